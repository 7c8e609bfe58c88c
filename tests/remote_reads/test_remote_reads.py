"""Remote reads: every reader fetches gs:// shards with parallel ranged reads (and a local cache), against the emulator.

The datasets are written locally by the real writer, then copied to the emulator; a reader must
give from ``gs://`` exactly what it gives from the local copy, in each format and compression,
with ranges small enough that every shard is several of them (``remote_datasets.SMALL_READS``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fixtures_gcs import FakeGcs

from beam_tfrecord import storage
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import CorruptShardError, MissingShardError, ReaderError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.order.read_plan import plan_read
from beam_tfrecord.remote_reads.cache import LOCK_NAME, PARTIAL_PREFIX, CacheKey, ShardCache
from beam_tfrecord.remote_reads.fetcher import range_starts
from beam_tfrecord.remote_reads.options import COUNTERS, RemoteReads
from tests.storage.remote_datasets import SMALL_READS, VARIANTS, write_local

SPLIT = "train+test"


@dataclasses.dataclass(frozen=True)
class Copies:
    local: str
    remote: str


@pytest.fixture(scope="module")
def datasets(fake_gcs: FakeGcs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Copies]:
    """Each variant written locally once and copied to one bucket of the emulator."""
    bucket = fake_gcs.create_bucket("remote-reads")
    out = {}
    for name, (file_format, compression) in VARIANTS.items():
        local = write_local(str(tmp_path_factory.mktemp("remote-reads") / name), file_format, compression)
        remote = f"{bucket}/{name}"
        fake_gcs.upload_tree(local, remote)
        out[name] = Copies(local, remote)
    return out


def _numpy_keys(path: str, **options) -> list[str]:
    return [bytes(example["key"]).decode() for example in read_numpy(path, split=SPLIT, **options)]


def _torch_keys(path: str, **options) -> list[str]:
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    batches = TFRecordIterableDataset(path, split=SPLIT, batch_size=16, **options)
    return [bytes(key).decode() for batch in batches for key in batch["key"]]


def _tf_keys(path: str, **options) -> list[str]:
    from beam_tfrecord.reader.tf_data import read_dataset

    return [key.decode() for batch in read_dataset(path, split=SPLIT, batch_size=16, **options)
            for key in batch["key"].numpy().tolist()]


READERS = {"numpy": _numpy_keys, "torch": _torch_keys, "tf": _tf_keys}


def _fetched() -> dict[str, int]:
    return COUNTERS.snapshot()


def _delta(before: dict[str, int], name: str) -> int:
    return _fetched().get(name, 0) - before.get(name, 0)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("reader", READERS)
def test_a_reader_gives_the_same_records_from_gs_as_from_local_disk(reader: str, variant: str,
                                                                     datasets: dict[str, Copies]) -> None:
    copies = datasets[variant]
    read = READERS[reader]
    before = _fetched()
    remote = read(copies.remote, remote_reads=SMALL_READS[variant])
    assert remote == read(copies.local) and len(remote) == 90
    shards = load_manifest(copies.local).shards
    assert _delta(before, "fetched_bytes") == sum(s.num_bytes for s in shards)  # through the fetcher, in ranges
    # every reader of either format: each shard in the one rule's ranges (the read's first ramped), once
    segments = plan_read(copies.remote, split=SPLIT).segments
    reads = SMALL_READS[variant]
    assert _delta(before, "ranges") == sum(len(range_starts(s.shard.num_bytes, reads.range_bytes, ramp=number == 0,
                                                            connections=reads.connections))
                                           for number, s in enumerate(segments))


@pytest.mark.parametrize("variant", ["tfrecord", "array_record"])
def test_a_shuffled_read_from_gs_is_the_local_order(variant: str, datasets: dict[str, Copies]) -> None:
    copies = datasets[variant]
    options = {"shuffle": True, "seed": 4, "epoch": 1, "shuffle_buffer": 20, "num_workers": 2, "worker_index": 1}
    remote = _numpy_keys(copies.remote, remote_reads=SMALL_READS[variant], **options)
    assert remote == _numpy_keys(copies.local, **options)


@pytest.mark.parametrize("variant", ["tfrecord", "array_record"])
def test_the_second_epoch_reads_from_the_cache(variant: str, datasets: dict[str, Copies], tmp_path: Path) -> None:
    copies = datasets[variant]
    expected = _numpy_keys(copies.local)
    num_shards = len(load_manifest(copies.local).shards)
    before = _fetched()
    assert _numpy_keys(copies.remote, remote_reads=SMALL_READS[variant], cache_dir=str(tmp_path)) == expected
    assert (_delta(before, "cache_misses"), _delta(before, "cached_shards")) == (num_shards, num_shards)
    assert len(ShardCache(str(tmp_path), limit_bytes=None).entries()) == num_shards

    before = _fetched()
    for read in READERS.values():  # every reader's next epoch: all from the cache, not one range fetched
        assert read(copies.remote, remote_reads=SMALL_READS[variant], cache_dir=str(tmp_path)) == expected
    assert _delta(before, "cache_hits") == 3 * num_shards
    assert _delta(before, "ranges") == 0 and _delta(before, "cache_misses") == 0


def _descriptors_into(directory: str) -> list[str]:
    """What this process's open descriptors of files in ``directory`` name (a removed file: "... (deleted)")."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # a descriptor closed since the listing
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [target for target in targets if target.startswith(directory + os.sep)]


def test_a_tf_dataset_made_from_the_cache_reads_its_shards_when_the_cache_loses_them(
        datasets: dict[str, Copies], tmp_path: Path) -> None:
    from beam_tfrecord.reader.tf_data import read_dataset

    copies = datasets["tfrecord"]
    cache = str(tmp_path / "cache")
    expected = _numpy_keys(copies.local)
    assert _numpy_keys(copies.remote, remote_reads=SMALL_READS["tfrecord"], cache_dir=cache) == expected  # fills it
    dataset = read_dataset(copies.remote, split=SPLIT, batch_size=16, cache_dir=cache)
    assert len(_descriptors_into(cache)) == len(load_manifest(copies.local).shards)  # every entry held
    shutil.rmtree(cache)  # evicted (or the cache emptied) after the dataset was made
    before = _fetched()
    for _ in range(2):  # every pass: the bytes the dataset was made with, nothing fetched
        assert [key.decode() for batch in dataset for key in batch["key"].numpy().tolist()] == expected
    assert _delta(before, "ranges") == 0
    del dataset
    gc.collect()
    assert _descriptors_into(cache) == []  # closed with the dataset


def test_the_cache_keeps_the_most_recently_read_shards_within_its_limit(datasets: dict[str, Copies],
                                                                         tmp_path: Path) -> None:
    copies = datasets["tfrecord"]
    shards = [s for split in ("train", "test") for s in load_manifest(copies.local).split(split).shards]
    limit = shards[-1].num_bytes + shards[-2].num_bytes  # the last two read fit, not one more
    before = _fetched()
    assert _numpy_keys(copies.remote, remote_reads=SMALL_READS["tfrecord"], cache_dir=str(tmp_path),
                       cache_limit=limit) == _numpy_keys(copies.local)
    kept = ShardCache(str(tmp_path), limit_bytes=limit).entries()
    assert sum(kept.values()) <= limit
    assert set(kept) == {CacheKey(f"{copies.remote}/{s.filename}", s.crc32c, s.num_bytes).filename for s in shards[-2:]}
    assert _delta(before, "cached_shards") == len(shards)  # every shard went in; the older ones were evicted


def test_processes_sharing_a_cache_read_the_same_records_within_its_limit(datasets: dict[str, Copies],
                                                                          tmp_path: Path) -> None:
    copies = datasets["tfrecord"]
    limit = sum(sorted(s.num_bytes for s in load_manifest(copies.local).shards)[-3:])
    script = ("import json, sys\n"
              "from beam_tfrecord.reader.numpy_reader import read_numpy\n"
              "from beam_tfrecord.remote_reads import RemoteReads\n"
              "reads = RemoteReads(connections=4, range_bytes=1000, bytes_in_flight=4000)\n"
              "keys = [[bytes(e['key']).decode() for e in read_numpy(sys.argv[1], split='train+test',"
              " remote_reads=reads, cache_dir=sys.argv[2], cache_limit=int(sys.argv[3]))] for _ in range(2)]\n"
              "print(json.dumps(keys))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                    os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-c", script, copies.remote, str(tmp_path), str(limit)]
    running = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [process.communicate(timeout=120) for process in running]
    assert [process.returncode for process in running] == [0, 0], [err[-2000:] for _, err in outputs]
    expected = _numpy_keys(copies.local)
    assert all(json.loads(out) == [expected, expected] for out, _ in outputs)
    kept = ShardCache(str(tmp_path), limit_bytes=limit).entries()
    assert 0 < sum(kept.values()) <= limit
    assert not [name for name in os.listdir(tmp_path) if name.startswith(PARTIAL_PREFIX)]
    assert LOCK_NAME in os.listdir(tmp_path)


def test_a_damaged_remote_shard_is_reported_with_its_path(fake_gcs: FakeGcs, datasets: dict[str, Copies],
                                                         gcs_bucket: str) -> None:
    copies = datasets["tfrecord"]
    remote = f"{gcs_bucket}/damaged"
    fake_gcs.upload_tree(copies.local, remote)
    shard = load_manifest(copies.local).split("train").shards[1]
    data = bytearray(storage.read_bytes(f"{remote}/{shard.filename}"))
    data[len(data) // 2] ^= 0xFF
    storage.delete_if_exists([f"{remote}/{shard.filename}"])
    with storage.open_write(f"{remote}/{shard.filename}") as handle:
        handle.write(bytes(data))
    with pytest.raises(CorruptShardError, match=shard.filename):
        _numpy_keys(remote, remote_reads=SMALL_READS["tfrecord"])


@pytest.mark.parametrize("variant", ["tfrecord", "array_record"])
@pytest.mark.parametrize("reader", READERS)
def test_a_missing_remote_shard_is_reported_with_its_path(reader: str, variant: str, fake_gcs: FakeGcs,
                                                          datasets: dict[str, Copies], gcs_bucket: str) -> None:
    copies = datasets[variant]
    remote = f"{gcs_bucket}/{variant}"
    fake_gcs.upload_tree(copies.local, remote)
    shard = load_manifest(copies.local).split("train").shards[2]
    storage.delete_if_exists([f"{remote}/{shard.filename}"])
    with pytest.raises(Exception, match=shard.filename) as raised:
        READERS[reader](remote, remote_reads=SMALL_READS[variant])
    if reader != "tf":  # tf.data raises its own error, naming the shard
        assert isinstance(raised.value, MissingShardError)


@pytest.mark.parametrize(("options", "message"), [
    ({"cache_limit": 1000}, "cache_limit=1000 needs cache_dir: the directory to keep shards in"),
    ({"cache_dir": "CACHE", "cache_limit": -5}, "cache_limit must be a positive number of bytes, got -5"),
    ({"cache_dir": "gs://bucket/cache"}, "cache_dir must be a local directory, got 'gs://bucket/cache'"),
    ({"remote_reads": "fast"}, "remote_reads must be a RemoteReads, got 'fast'"),
], ids=["limit-without-dir", "negative-limit", "remote-dir", "not-remote-reads"])
def test_bad_cache_options_are_refused_with_what_was_expected(options: dict, message: str,
                                                             datasets: dict[str, Copies], tmp_path: Path) -> None:
    options = {key: str(tmp_path) if value == "CACHE" else value for key, value in options.items()}
    with pytest.raises(ReaderError) as raised:
        read_numpy(datasets["tfrecord"].remote, **options)
    assert str(raised.value) == message


@pytest.mark.parametrize(("options", "message"), [
    ({"bytes_in_flight": -1}, "bytes_in_flight must be a positive int, got -1"),
    ({"range_bytes": 0}, "range_bytes must be a positive int, got 0"),
    ({"connections": 2.5}, "connections must be a positive int, got 2.5"),
    ({"range_bytes": 2000, "bytes_in_flight": 1000},
     "bytes_in_flight (1000) must be at least range_bytes (2000): one range must fit"),
], ids=["negative-in-flight", "zero-range", "float-connections", "range-over-budget"])
def test_bad_remote_reads_are_refused_with_what_was_expected(options: dict, message: str) -> None:
    with pytest.raises(ReaderError) as raised:
        RemoteReads(**options)
    assert str(raised.value) == message


@pytest.mark.parametrize("reader", READERS)
def test_a_read_without_cache_leaves_no_fetched_file_behind(reader: str, datasets: dict[str, Copies], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where private copies of fetched shards go
    for variant in ("tfrecord", "array_record"):
        copies = datasets[variant]
        assert READERS[reader](copies.remote, remote_reads=SMALL_READS[variant]) == READERS[reader](copies.local)
    assert [name for name in os.listdir(tmp_path) if name.startswith("beam-tfrecord-shard-")] == []


def _memfd_names() -> list[str]:
    """The in-memory files of fetched shards this process holds open now."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # a descriptor closed since the listing
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("/memfd:beam-tfrecord-shard-"):
                names.append(target)
    return names


@pytest.mark.parametrize(("bytes_in_flight", "most_in_memory"), [
    pytest.param(1 << 20, 7, id="all in memory: 4 ahead, 2 kept and the one read at most"),
    pytest.param(9000, 2, id="two shards' copies in memory at once at most, the others on disk"),
    pytest.param(3000, 0, id="no shard fits: all on disk"),
])
def test_tf_data_holds_fetched_shards_in_memory_while_they_fit_in_bytes_in_flight(
        bytes_in_flight: int, most_in_memory: int, datasets: dict[str, Copies], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from beam_tfrecord.remote_reads import fetched
    from beam_tfrecord.remote_reads.fetched import FetchedShard

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where private copies on disk go
    made: list[str] = []  # where each private copy was, when it was handed to tf.data
    local_file = FetchedShard.local_file

    def observed(self: FetchedShard, **options: bool) -> str:
        path = local_file(self, **options)
        made.append(os.readlink(path) if path.startswith("/proc/self/fd/") else os.path.dirname(path))
        return path

    monkeypatch.setattr(FetchedShard, "local_file", observed)
    # In-memory files made: one is written over by a later shard once free, so as many as were held at once.
    created: list[str] = []
    monkeypatch.setattr(fetched, "_MEMFD_CREATE",
                        lambda name, flags: created.append(name) or os.memfd_create(name, flags))
    copies = datasets["tfrecord"]
    sizes = [s.num_bytes for s in load_manifest(copies.local).shards]
    assert min(sizes) > 3000 and 2 * max(sizes) <= 9000 < 3 * min(sizes) and 7 * max(sizes) <= 1 << 20
    reads = RemoteReads(connections=4, range_bytes=1000, bytes_in_flight=bytes_in_flight)
    assert _tf_keys(copies.remote, remote_reads=reads) == _tf_keys(copies.local)
    in_memory = sum(name.startswith("/memfd:beam-tfrecord-shard-") for name in made)
    on_disk = made.count(str(tmp_path))
    assert in_memory + on_disk == len(sizes) and len(created) <= most_in_memory
    if most_in_memory == 7:
        assert on_disk == 0
    elif most_in_memory:
        assert in_memory and on_disk
    else:
        assert in_memory == 0
    left_on_disk = [name for name in os.listdir(tmp_path) if name.startswith("beam-tfrecord-shard-")]
    assert _memfd_names() == [] and left_on_disk == []  # all closed at the end of the epoch


def test_an_in_memory_copy_written_over_an_earlier_shard_holds_exactly_the_later_one(
        datasets: dict[str, Copies]) -> None:
    from beam_tfrecord.remote_reads.fetched import MemoryFiles
    from beam_tfrecord.remote_reads.fetcher import shard_fetcher
    from beam_tfrecord.remote_reads.options import RemoteShard

    copies = datasets["tfrecord"]
    shards = sorted(load_manifest(copies.local).shards, key=lambda s: -s.num_bytes)[:2]  # the larger first
    assert shards[0].num_bytes > shards[1].num_bytes
    fetcher = shard_fetcher([RemoteShard(f"{copies.remote}/{s.filename}", s.num_bytes, s.crc32c) for s in shards],
                            SMALL_READS["tfrecord"])
    assert fetcher is not None
    memory = MemoryFiles()
    with fetcher:
        paths = []
        for number, shard in enumerate(shards):
            fetched = fetcher.open(number)
            assert fetched is not None
            paths.append(fetched.local_file(memory=memory))
            assert Path(paths[-1]).read_bytes() == Path(copies.local, shard.filename).read_bytes()
            fetched.close()
    memory.close()
    assert paths[0] == paths[1] and _memfd_names() == []  # the same file, written over, then freed


@pytest.mark.parametrize("variant", ["tfrecord", "tfrecord-gzip"])
@pytest.mark.parametrize("reader", ["numpy", "tf"])
def test_a_worker_share_that_cuts_shards_reads_the_same_records_from_gs(reader: str, variant: str,
                                                                         datasets: dict[str, Copies]) -> None:
    copies = datasets[variant]
    for worker in range(3):  # shares start and end inside shards: segments with skip and take
        options = {"num_workers": 3, "worker_index": worker}
        remote = READERS[reader](copies.remote, remote_reads=SMALL_READS[variant], **options)
        assert remote == READERS[reader](copies.local, **options) and len(remote) == 30


MIB = 1 << 20


@pytest.mark.parametrize(("num_bytes", "range_bytes", "ramp", "connections", "starts"), [
    pytest.param(20 * MIB + 3, 8 * MIB, False, 16, [0, 6990508, 13981016],
                 id="20 MiB + 3: three equal ranges of <= 8 MiB"),
    pytest.param(16 * MIB, 8 * MIB, False, 16, [0, 8 * MIB], id="16 MiB: two ranges of 8 MiB"),
    pytest.param(10, 4, False, 16, [0, 4, 8], id="10 bytes in ranges of <= 4: 4, 4 and 2"),
    pytest.param(20 * MIB, 8 * MIB, True, 16, [i * 5 * MIB // 4 for i in range(16)],
                 id="the read's first shard, fitting one range per connection: on every connection at once"),
    pytest.param(5 * MIB // 2, 8 * MIB, True, 16, [0, 5 * MIB // 4], id="... in ranges of at least 1 MiB"),
    pytest.param(20 * MIB + 3, 8 * MIB, True, 2, [0, MIB, 3 * MIB, 7 * MIB, 15 * MIB],
                 id="the read's first shard, larger: 1 MiB, doubled up to 8 MiB, then the rest"),
    pytest.param(5000, 1000, True, 4, [0, 1000, 2000, 3000, 4000], id="ranges under 1 MiB: no ramp"),
    pytest.param(5000, 8 * MIB, False, 16, [0], id="smaller than one range"),
    pytest.param(5000, 8 * MIB, True, 16, [0], id="smaller than the ramp's first range"),
    pytest.param(0, 8 * MIB, False, 16, [], id="empty"),
    pytest.param(0, 8 * MIB, True, 16, [], id="empty, first"),
])
def test_a_shard_is_cut_in_equal_ranges_and_the_reads_first_on_every_connection(
        num_bytes: int, range_bytes: int, ramp: bool, connections: int, starts: list[int]) -> None:
    assert range_starts(num_bytes, range_bytes, ramp=ramp, connections=connections) == starts


def test_array_record_copies_are_held_in_memory_while_they_fit_in_bytes_in_flight(
        datasets: dict[str, Copies], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from beam_tfrecord.remote_reads.fetched import FetchedShard

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where private copies on disk go
    copies = datasets["array_record"]
    sizes = {s.filename: s.num_bytes for s in load_manifest(copies.local).shards}
    in_memory: list[int] = []  # sizes of the copies in memory (a shuffled read holds every shard open)
    on_disk: list[str] = []
    memory_file = FetchedShard.memory_file

    def observed(self: FetchedShard) -> str:
        path = memory_file(self)
        if path.startswith("/proc/self/fd/"):
            in_memory.append(sizes[os.path.basename(self.path)])
        else:
            on_disk.append(os.path.basename(path))
        return path

    monkeypatch.setattr(FetchedShard, "memory_file", observed)
    bytes_in_flight = sum(sorted(sizes.values())[-2:])  # the two largest shards, not all
    reads = dataclasses.replace(SMALL_READS["array_record"], bytes_in_flight=bytes_in_flight)
    options = {"shuffle": True, "seed": 1}
    assert _numpy_keys(copies.remote, remote_reads=reads, **options) == _numpy_keys(copies.local, **options)
    assert in_memory and on_disk and sum(in_memory) <= bytes_in_flight
    assert len(in_memory) + len(on_disk) == len(sizes)
    assert _memfd_names() == [] and os.listdir(tmp_path) == []  # all closed at the end of the epoch


@pytest.mark.parametrize(("variant", "reader"), [("array_record", "numpy"), ("tfrecord", "tf")])
def test_shards_taken_whole_are_copied_ahead_on_a_thread_of_their_own(
        variant: str, reader: str, datasets: dict[str, Copies], monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from beam_tfrecord.remote_reads.fetched import FetchedShard

    threads: list[str] = []  # the thread that made each whole shard's copy
    local_file = FetchedShard.local_file

    def observed(self: FetchedShard, **options: bool) -> str:
        threads.append(threading.current_thread().name.split("_")[0])
        return local_file(self, **options)

    monkeypatch.setattr(FetchedShard, "local_file", observed)
    copies = datasets[variant]
    assert READERS[reader](copies.remote, remote_reads=SMALL_READS[variant]) == READERS[reader](copies.local)
    # The read's first shard by the reader itself (nothing to overlap it with), every later one ahead of it.
    assert len(threads) == len(plan_read(copies.local, split=SPLIT).segments) > 2
    assert threads[0] != "shard-copy" and set(threads[1:]) == {"shard-copy"}


def test_a_reader_stopped_early_leaves_no_copy_made_ahead(datasets: dict[str, Copies], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where private copies on disk go
    copies = datasets["array_record"]
    for bytes_in_flight in (1 << 20, 32 << 10):  # the copies ahead in memory; on disk (a shard is > 32 KiB)
        reads = dataclasses.replace(SMALL_READS["array_record"], bytes_in_flight=bytes_in_flight)
        examples = read_numpy(copies.remote, split=SPLIT, remote_reads=reads)
        first = next(examples)  # the first shard open, the next ones being copied
        examples.close()
        assert bytes(first["key"]) == bytes(next(read_numpy(copies.local, split=SPLIT))["key"])
        assert _memfd_names() == [] and os.listdir(tmp_path) == []

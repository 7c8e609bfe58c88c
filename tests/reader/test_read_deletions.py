"""Every reader of a version that shares shards and deletes records returns exactly its live records.

The version (``deleted_records.shared_version``) lists the first version's shards where they are, with records
deleted at the first, last and middle positions of shards and in runs, one shard with all its records deleted, and
shards of its own named as the first version's are. Every reader, slice, worker split, shuffle and resume must give
the live records: none deleted, none missed, counts exact.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import shutil

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to
from deleted_records import first_version, live_records, shard_records, shared_version
from fixtures_gcs import fake_gcs  # noqa: F401  (a pytest fixture: one emulator per test process)

from beam_tfrecord import DatasetDescription, Sample, ShardingConfig, SplitConfig, WriteTFRecordDataset
from beam_tfrecord.beam.read_dataset import ReadTFRecordDataset
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import DType, Scalar, Schema, VarList
from beam_tfrecord.dataset import load_manifest, version_dir
from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.order.mixing import num_examples
from beam_tfrecord.reader.order.random_access import RandomAccessRecords
from beam_tfrecord.reader.order.read_plan import plan_read

FIRST, SECOND = "20260101T000000.000Z-a1a1a1", "20260102T000000.000Z-b2b2b2"
SCHEMA = Schema(features={"key": Scalar(DType.STRING), "i": Scalar(DType.INT64), "v": VarList(DType.INT64)})


def _write(directory: str, prefix: str, count: int, *, splits: str, file_format: FileFormat) -> str:
    """``count`` records keyed ``<prefix>0000``... in 4 shards per split (so two writers give files the same names)."""
    samples = [Sample(f"{prefix}{i:04d}", {"key": f"{prefix}{i:04d}", "i": i, "v": list(range(i % 3))})
               for i in range(count)]
    description = DatasetDescription(schema=SCHEMA, name="t", file_format=file_format,
                                     sharding=ShardingConfig(num_shards=4), splits=SplitConfig.parse(splits))
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(samples) | WriteTFRecordDataset(directory, description=description)
    return directory


@dataclasses.dataclass(frozen=True)
class Shared:
    """A root whose LATEST shares the first version's shards, and the keys a reader must return.

    Attributes:
        root: the versioned root.
        manifest: LATEST's manifest.
        live: per split, the keys of the live records in stored order.
        deleted: the keys of every deleted record.
    """

    root: str
    manifest: Manifest
    live: dict[str, list[bytes]]
    deleted: frozenset[bytes]


def _deleted_positions(number: int, num_records: int) -> list[int]:
    """Shard ``number``'s deleted records: none; first, middle and last; all of them; a run and a few; one."""
    middle = num_records // 2
    return [[], [0, middle, num_records - 1], list(range(num_records)),
            [1, 2, 3, middle, num_records - 2], [middle]][number % 5]


def _build(tmp_path_factory: pytest.TempPathFactory, file_format: FileFormat) -> Shared:
    tmp = tmp_path_factory.mktemp(f"deletions_{file_format.value}")
    root = str(tmp / "root")
    base = first_version(root, FIRST, lambda directory: _write(directory, "d", 400, splits="train=0.75,test=0.25",
                                                               file_format=file_format))
    own = _write(str(tmp / "own"), "n", 40, splits="train=1.0", file_format=file_format)
    deleted = {shard.filename: _deleted_positions(number + 3 * (split.name == "test"), shard.num_records)
               for split in base.splits for number, shard in enumerate(split.shards)}
    manifest = shared_version(root, FIRST, SECOND, deleted=deleted, own=own)
    decoder = RecordDecoder(SCHEMA)

    def key(record: bytes) -> bytes:
        return decoder.decode(record, shard="", offset=0)["key"]

    first_dir = version_dir(root, FIRST)
    gone = {key(records[position]) for shard in base.shards
            for records in [shard_records(first_dir, base, shard)] for position in deleted[shard.filename]}
    live = {split.name: [key(record) for record in live_records(version_dir(root, SECOND), manifest, split.name)]
            for split in manifest.splits}
    return Shared(root, manifest, live, frozenset(gone))


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Shared:
    return _build(tmp_path_factory, FileFormat.TFRECORD)


@pytest.fixture(scope="module")
def shared_array_record(tmp_path_factory) -> Shared:
    pytest.importorskip("array_record")
    return _build(tmp_path_factory, FileFormat.ARRAY_RECORD)


def test_the_version_shares_shards_deletes_records_and_repeats_file_names(shared):
    shards = shared.manifest.split("train").shards
    names = collections.Counter(shard.filename for shard in shards)
    assert {shard.stored_in for shard in shards} == {FIRST, None} and max(names.values()) == 2
    assert any(shard.num_live == 0 for shard in shards) and shared.manifest.num_deleted == len(shared.deleted)
    assert not shared.deleted & {key for keys in shared.live.values() for key in keys}
    assert len(shared.live["train"]) == num_examples(shared.root, split="train") == shared.manifest.split(
        "train").num_records


def test_a_shard_with_deletions_is_read_in_one_pass(shared):
    plan = plan_read(shared.root, split="train")
    assert len(plan.segments) > len(plan.passes) == sum(shard.num_live > 0 for shard in plan.manifest.split(
        "train").shards)
    assert [shard_pass.num_records for shard_pass in plan.passes] == [
        shard.num_live for shard in plan.manifest.split("train").shards if shard.num_live]
    # Two slices with live records between them are two passes: only deleted records are skipped over.
    first = plan.passes[0]
    assert len(plan_read(shared.root, split=f"train[:1]+train[3:{first.num_records}]").passes) == 2


def _tf_keys(dataset) -> list[bytes]:
    return [key for batch in dataset for key in batch["key"].numpy().tolist()]


@pytest.mark.parametrize("options", [{}, {"num_parallel_reads": 3}], ids=["chained", "interleaved"])
def test_tf_data_reads_the_live_records_in_order(shared, options):
    from beam_tfrecord.reader.tf_data import read_dataset

    dataset = read_dataset(shared.root, split="train", batch_size=16, **options)
    keys = _tf_keys(dataset)
    expected = shared.live["train"]
    for batch in dataset:  # a ragged feature's rows stay with their records
        assert [len(row) for row in batch["v"].to_list()] == [i % 3 for i in batch["i"].numpy().tolist()]
    assert len(dataset) == math.ceil(len(expected) / 16)
    assert (keys if not options else sorted(keys)) == (expected if not options else sorted(expected))


def test_tf_data_drops_records_a_batch_at_a_time_across_epochs(shared):
    """In stored order the deleted records are read and dropped in the parallel parse: batches stay exact, with
    ``repeat`` (batches span epochs), ``drop_remainder`` and without the count check."""
    from beam_tfrecord.reader.tf_data import read_dataset

    expected = shared.live["train"]
    repeated = read_dataset(shared.root, split="train", batch_size=16, repeat=True)
    batches = [batch["key"].numpy().tolist() for batch in repeated.take(2 * len(expected) // 16 + 3)]
    assert {len(batch) for batch in batches} == {16}
    assert [key for batch in batches for key in batch] == (expected * 3)[:len(batches) * 16]
    dropped = read_dataset(shared.root, split="train", batch_size=16, drop_remainder=True, verify_count=False)
    assert len(dropped) == len(expected) // 16 and _tf_keys(dropped) == expected[:len(expected) // 16 * 16]
    assert {batch["key"].shape[0] for batch in dropped} == {16}


def test_tf_data_slices_workers_and_shuffle(shared):
    from beam_tfrecord.reader.tf_data import read_dataset

    expected = shared.live["train"]
    half = _tf_keys(read_dataset(shared.root, split="train[:50%]", batch_size=8))
    assert half == expected[:round(len(expected) / 2)]
    workers = [_tf_keys(read_dataset(shared.root, split="train", batch_size=8, num_workers=2, worker_index=index))
               for index in range(2)]
    assert [len(keys) for keys in workers] == [len(expected) // 2] * 2
    assert workers[0] + workers[1] == expected[:len(expected) // 2 * 2]
    shuffled = _tf_keys(read_dataset(shared.root, split="train+test", batch_size=8, shuffle=True, seed=3))
    assert sorted(shuffled) == sorted(expected + shared.live["test"]) and shuffled != expected + shared.live["test"]


def test_numpy_reads_the_live_records(shared):
    expected = shared.live["train"]
    assert [example["key"] for example in read_numpy(shared.root, split="train")] == expected
    batches = list(read_numpy(shared.root, split="train", batch_size=32))
    assert [key for batch in batches for key in batch["key"]] == expected
    shuffled = [example["key"] for example in read_numpy(shared.root, split="train", shuffle=True, seed=1,
                                                         shuffle_buffer=16)]
    assert sorted(shuffled) == sorted(expected) and shuffled != expected


def test_numpy_workers_and_resume(shared):
    expected = shared.live["train"]
    workers = [[example["key"] for example in read_numpy(shared.root, split="train", num_workers=2,
                                                         worker_index=index, shuffle=True, seed=4)]
               for index in range(2)]
    assert [len(keys) for keys in workers] == [len(expected) // 2] * 2
    assert len(set(workers[0] + workers[1])) == len(expected) // 2 * 2 and set(workers[0] + workers[1]) <= set(
        expected)
    resumed = [example["key"] for example in read_numpy(shared.root, split="train", num_workers=2, worker_index=1,
                                                        shuffle=True, seed=4, start=7)]
    assert resumed == workers[1][7:]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_torch_reads_the_live_records(shared, num_workers):
    torch = pytest.importorskip("torch")
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset, collate

    expected = shared.live["train"] + shared.live["test"]
    dataset = TFRecordIterableDataset(shared.root, split="train+test")
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, num_workers=num_workers, collate_fn=collate)
    keys = [key for batch in loader for key in batch["key"]]
    assert len(dataset) == len(expected) and collections.Counter(keys) == collections.Counter(expected)
    batched = TFRecordIterableDataset(shared.root, split="train", batch_size=10, shuffle=True, seed=2)
    loader = torch.utils.data.DataLoader(batched, batch_size=None, num_workers=num_workers)
    keys = [key for batch in loader for key in batch["key"]]
    assert sorted(keys) == sorted(shared.live["train"]) and len(batched) == math.ceil(len(keys) / 10)


def test_torch_ranks_and_resume(shared):
    pytest.importorskip("torch")
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    expected = shared.live["train"]
    ranks = [[example["key"] for example in TFRecordIterableDataset(shared.root, split="train", rank=rank,
                                                                    world_size=2, shuffle=True, seed=9)]
             for rank in range(2)]
    assert [len(keys) for keys in ranks] == [len(expected) // 2] * 2
    assert len(set(ranks[0] + ranks[1])) == len(expected) // 2 * 2 and set(ranks[0] + ranks[1]) <= set(expected)
    reader = TFRecordIterableDataset(shared.root, split="train", shuffle=True, seed=9)
    examples = iter(reader)
    before = [next(examples)["key"] for _ in range(25)]
    resumed = TFRecordIterableDataset(shared.root, split="train", shuffle=True, seed=9)
    resumed.load_state_dict(reader.state_dict())
    after = [example["key"] for example in resumed]
    assert before + after == [example["key"] for example in TFRecordIterableDataset(
        shared.root, split="train", shuffle=True, seed=9)]
    assert sorted(before + after) == sorted(expected)


def test_mixtures_count_live_records(shared):
    """A mixture of the root with its own version directory (the same records): each live record twice."""
    from beam_tfrecord.reader.tf_data import read_dataset

    mixture = {shared.root: 1.0, version_dir(shared.root, SECOND): 1.0}
    expected = collections.Counter(shared.live["train"] * 2)
    assert num_examples(mixture, split="train") == sum(expected.values())
    assert collections.Counter(example["key"] for example in read_numpy(mixture, split="train", seed=1)) == expected
    assert collections.Counter(_tf_keys(read_dataset(mixture, split="train", batch_size=32, seed=1))) == expected


def test_beam_reads_the_live_records(shared):
    expected = shared.live["train"]
    with beam.Pipeline() as pipeline:
        keys = pipeline | ReadTFRecordDataset(shared.root, split="train") | beam.Map(lambda example: example["key"])
        assert_that(keys, equal_to(expected))


def test_array_record_random_access_maps_live_records_only(shared_array_record):
    shared = shared_array_record
    expected = shared.live["train"]
    records = RandomAccessRecords(plan_read(shared.root, split="train"))
    decoder = RecordDecoder(SCHEMA)
    try:
        assert len(records) == len(expected)
        found = records.read(np.arange(len(expected))[::-1])
        assert [decoder.decode(record, shard=path, offset=index)["key"] for record, path, index in found] == \
            expected[::-1]
    finally:
        records.close()
    shuffled = [example["key"] for example in read_numpy(shared.root, split="train", shuffle=True, seed=5)]
    assert sorted(shuffled) == sorted(expected) and shuffled != expected
    assert [example["key"] for example in read_numpy(shared.root, split="train[10:-10]")] == expected[10:-10]


def test_array_record_through_tf_data(shared_array_record):
    from beam_tfrecord.reader.tf_data import read_dataset

    expected = shared_array_record.live["train"]
    assert _tf_keys(read_dataset(shared_array_record.root, split="train", batch_size=16)) == expected
    shuffled = _tf_keys(read_dataset(shared_array_record.root, split="train", batch_size=16, shuffle=True, seed=1))
    assert sorted(shuffled) == sorted(expected)


def test_remote_reads_tell_versions_apart(shared, fake_gcs, tmp_path):
    """On gs://, the fetcher and the cache key shards by full path: a shard of the first version and one of the
    second with the same file name are two entries (read twice, the second time from the cache)."""
    from beam_tfrecord.reader.tf_data import read_dataset

    bucket = fake_gcs.create_bucket("read-deletions")
    fake_gcs.upload_tree(shared.root, f"{bucket}/root")
    remote, cache = f"{bucket}/root", str(tmp_path / "cache")
    expected = shared.live["train"]
    for _ in range(2):
        assert [example["key"] for example in read_numpy(remote, split="train", cache_dir=cache)] == expected
        assert _tf_keys(read_dataset(remote, split="train", batch_size=16, cache_dir=cache)) == expected
    assert _tf_keys(read_dataset(remote, split="train", batch_size=16, shuffle=True, seed=2)) != expected
    names = [entry.split("-", 3)[-1] for entry in os.listdir(cache) if not entry.startswith(".")]
    assert len(names) > len(set(names))  # the same file name, in two versions' directories


def test_a_shard_missing_from_its_version_is_named(shared, tmp_path):
    """A version copied out of its root lost the shards it shares: reading it names the remedy."""
    from beam_tfrecord.errors import ManifestError

    copy = str(tmp_path / "copy")
    shutil.copytree(version_dir(shared.root, SECOND), copy)
    with pytest.raises(ManifestError, match="compact"):
        read_numpy(copy, split="train")
    assert load_manifest(copy) == shared.manifest

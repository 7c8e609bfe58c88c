"""A flaky object store: gs:// through a seeded proxy that answers 503 and 429 or drops connections.

The emulator here is a second fake-gcs-server of its own, reached only through ``FlakyProxy``
(``STORAGE_EMULATOR_HOST`` points at the proxy for this module; the emulator hands out upload
session URLs on the proxy's address). Each test reseeds the proxy, so its decision sequence
reproduces. A build with faults must give the same shard bytes as the same build without.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path

import google_crc32c
import pytest
from fixtures_gcs import EMULATOR_ENV_KEYS, emulator_env, free_port, launch_fake_gcs
from flaky_proxy import FAULT_KINDS, FlakyProxy
from remote_datasets import SMALL_READS, VARIANTS, write_local

from beam_tfrecord import storage
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files
from beam_tfrecord.job import lease
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.storage import gcs
from beam_tfrecord.verify import verify_dataset
from pipelines import build_image_dataset
from tests.storage.forked_readers import assert_every_record_once, run_forked_readers

FAULT_FRACTION = 0.1  # the issue asks for at least 5%; 10% gives every kind a few hits in a small build
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


@dataclasses.dataclass(frozen=True)
class FlakyGcs:
    proxy: FlakyProxy

    def create_bucket(self, name: str) -> str:
        from google.cloud import storage as cloud_storage

        with self.quiet():
            cloud_storage.Client.create_anonymous_client().create_bucket(name)
        return f"gs://{name}"

    def quiet(self) -> "_Quiet":
        return _Quiet(self.proxy)


class _Quiet:
    """Faults off for the block (setting up and checking), back on after."""

    def __init__(self, proxy: FlakyProxy) -> None:
        self._proxy = proxy
        self._fraction = proxy.fault_fraction

    def __enter__(self) -> None:
        self._proxy.set_fault_fraction(0.0)

    def __exit__(self, *exc: object) -> None:
        self._proxy.set_fault_fraction(self._fraction)


@pytest.fixture(scope="module")
def flaky_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlakyGcs]:
    """The emulator behind the proxy; google-cloud-storage's back-off from 20 ms instead of 1 s: its length is not
    under test (the faults, the retries and the preconditions are), and at 1 s a build waited ~20 s on it."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    work = tmp_path_factory.mktemp("flaky-gcs")
    proxy_port, emulator_port = free_port(), free_port()
    process = launch_fake_gcs(work, port=emulator_port, external_url=f"http://127.0.0.1:{proxy_port}")
    proxy = FlakyProxy(f"http://127.0.0.1:{emulator_port}", fault_fraction=0.0, seed=0, port=proxy_port,
                       lifetime_seconds=600).start()
    saved = {key: os.environ.get(key) for key in EMULATOR_ENV_KEYS}
    os.environ.update(emulator_env(work, proxy.url))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(gcs, "retry_policy", lambda: DEFAULT_RETRY.with_delay(initial=0.02, maximum=0.5))
            yield FlakyGcs(proxy)
    finally:
        proxy.stop()
        process.kill()
        process.wait(timeout=10)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture()
def flaky_bucket(flaky_gcs: FlakyGcs, request: pytest.FixtureRequest) -> str:
    name = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[-40:].strip("-")
    return flaky_gcs.create_bucket(f"flaky-{name}")


@pytest.fixture(scope="module")
def flaky_dask_address(flaky_gcs: FlakyGcs) -> Iterator[str]:
    """Two in-process workers (threads): they see the proxy and the fixture's back-off; workers in their own
    processes without a shared disk: tests/dask/test_no_shared_disk.py."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def _assert_faults_injected(proxy: FlakyProxy, *, at_least_fraction: float = 0.05) -> None:
    assert proxy.requests > 0
    assert proxy.num_faults >= at_least_fraction * proxy.requests, (proxy.num_faults, proxy.requests)
    assert set(proxy.faults) == set(FAULT_KINDS), dict(proxy.faults)  # every kind, drops after forwarding too


def _shard_bytes(output: str) -> dict[str, bytes]:
    return {shard.filename: storage.read_bytes(storage.join(output, shard.filename))
            for shard in load_manifest(output).shards}


def _read_all(output: str) -> list[bytes]:
    return sorted(bytes(example["image"]) for split in ("train", "validation")
                  for example in read_numpy(output, split=split))


@dataclasses.dataclass(frozen=True)
class CleanBuild:
    """The input on gs:// and what a build without faults wrote from it."""

    gs_input: str
    shards: dict[str, bytes]
    records: list[bytes]


BUILD_ARGS = ["--splits", "train=0.8,validation=0.2", "--target_shard_bytes=6000"]
RUNNERS = {"direct": ["--runner=DirectRunner", "--direct_running_mode=in_memory"], "dask": [f"--runner={DASK_RUNNER}"]}


@pytest.fixture(scope="module")
def clean_build(flaky_gcs: FlakyGcs, tiny_images: str, tmp_path_factory: pytest.TempPathFactory) -> CleanBuild:
    """The reference: the DirectRunner's build of the local copy (a build's bytes depend on neither the runner
    nor the store: tests/storage/test_store_end_to_end.py), and the input uploaded to gs:// without faults."""
    bucket = flaky_gcs.create_bucket("flaky-clean-build")
    gs_input, output = f"{bucket}/raw/images", str(tmp_path_factory.mktemp("flaky-clean") / "images")
    with flaky_gcs.quiet():
        assert _upload_tree(tiny_images, gs_input) == 30
    build_image_dataset.run(["--input", tiny_images, "--output", output, *BUILD_ARGS, *RUNNERS["direct"]])
    built = CleanBuild(gs_input, _shard_bytes(output), _read_all(output))
    assert len(built.shards) > 2 and len(built.records) == 30
    return built


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_build_verify_and_read_through_faults_give_the_same_bytes(
        runner: str, flaky_gcs: FlakyGcs, clean_build: CleanBuild, flaky_bucket: str,
        request: pytest.FixtureRequest) -> None:
    proxy = flaky_gcs.proxy
    runner_args = RUNNERS[runner]
    if runner == "dask":
        runner_args = [*runner_args, f"--dask_client_address={request.getfixturevalue('flaky_dask_address')}"]
    proxy.reset(seed=5 if runner == "direct" else 6, fault_fraction=FAULT_FRACTION)
    output = f"{flaky_bucket}/flaky/images"
    started = time.monotonic()
    manifest = build_image_dataset.run(["--input", clean_build.gs_input, "--output", output, *BUILD_ARGS, *runner_args])
    built = time.monotonic()
    report = verify_dataset(output)
    records = _read_all(output)
    faults, requests = dict(proxy.faults), proxy.requests
    print(f"{runner}: {requests} requests, faults injected {faults}, re-sent chunks {proxy.resent_chunks}; "
          f"build {built - started:.1f} s, verify and read {time.monotonic() - built:.1f} s")
    _assert_faults_injected(proxy)

    with flaky_gcs.quiet():
        assert _shard_bytes(output) == clean_build.shards  # the same files, byte for byte
        listed = {path for path, _ in storage.list_files(f"{output}/**")}
    assert (report.num_records, report.num_shards) == (30, len(clean_build.shards))
    assert records == clean_build.records
    assert {s.filename: s.crc32c for s in manifest.shards} == {
        name: google_crc32c.Checksum(data).hexdigest().decode("ascii") for name, data in clean_build.shards.items()}
    published = ["manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES,
                 *filter(None, [manifest.statistics]), *clean_build.shards]
    assert listed == {f"{output}/{name}" for name in published}  # no temporary file, no lease left


def _upload_tree(local_dir: str, gs_dir: str) -> int:
    paths = [path for path in sorted(Path(local_dir).rglob("*")) if path.is_file()]
    for path in paths:
        with storage.open_write(f"{gs_dir}/{path.relative_to(local_dir).as_posix()}") as out:
            out.write(path.read_bytes())
    return len(paths)


# Each write that can meet its own first try, with the connection dropped after the server did it.
def _atomic_write(bucket: str, proxy: FlakyProxy) -> None:
    path = f"{bucket}/pointer/LATEST"
    storage.write_bytes_atomic(path, b"v1\n")
    proxy.fail_next("drop_after", "POST", "uploadType=multipart")  # the temporary object's upload
    storage.write_bytes_atomic(path, b"v2\n")
    assert storage.read_bytes(path) == b"v2\n"


def _rename_copy(bucket: str, proxy: FlakyProxy) -> None:
    storage.write_bytes_atomic(f"{bucket}/a/x", b"old")
    with storage.open_write(f"{bucket}/tmp/x") as handle:
        handle.write(b"new")
    proxy.fail_next("drop_after", "POST", "/copyTo/")
    proxy.fail_next("drop_after", "DELETE", "/o/tmp")
    storage.rename([f"{bucket}/tmp/x"], [f"{bucket}/a/x"])
    assert storage.read_bytes(f"{bucket}/a/x") == b"new"
    assert not storage.exists(f"{bucket}/tmp/x")


def _lease_create(bucket: str, proxy: FlakyProxy) -> None:
    proxy.fail_next("drop_after", "POST", "uploadType=multipart")
    held = lease.acquire(f"{bucket}/out", run_id="mine")  # before: OutputLockedError naming its own run
    assert held.holder.run_id == "mine"
    proxy.fail_next("drop_after", "DELETE", ".beam-tfrecord.lock")
    held.release()
    assert not storage.exists(lease.lease_path(f"{bucket}/out"))


def _resumable_chunks(bucket: str, proxy: FlakyProxy) -> None:
    data = os.urandom(3 * (256 << 10) + 1000)  # three whole chunks and a short last one
    proxy.fail_next("drop_after", "PUT", "upload_id=")  # the first chunk, done but unanswered
    with gcs.GcsWriter(f"{bucket}/big.bin", chunk_bytes=256 << 10) as handle:
        handle.write(data[:500_000])
        handle.write(data[500_000:])
        proxy.fail_next("drop_after", "PUT", "upload_id=")  # the last chunk: the object is committed
    assert storage.read_bytes(f"{bucket}/big.bin") == data
    assert storage.crc32c_and_size(f"{bucket}/big.bin")[1] == len(data)


@pytest.mark.parametrize("case", [_atomic_write, _rename_copy, _lease_create, _resumable_chunks],
                         ids=["atomic-write", "rename", "lease", "resumable-chunks"])
def test_a_write_whose_answer_is_lost_is_recognised_as_done(case, flaky_gcs: FlakyGcs, flaky_bucket: str) -> None:
    proxy = flaky_gcs.proxy
    proxy.reset(seed=0, fault_fraction=0.0)
    case(flaky_bucket, proxy)
    assert proxy.faults["drop_after"] >= 1  # the scripted faults were met


def test_the_proxy_is_seeded_and_bounded() -> None:
    proxy = FlakyProxy("http://127.0.0.1:9", fault_fraction=0.5, seed=3, max_consecutive_faults=2)
    first = [proxy._decide("GET", "/x") for _ in range(200)]
    proxy.reset(seed=3, fault_fraction=0.5)
    assert [proxy._decide("GET", "/x") for _ in range(200)] == first
    assert 60 <= sum(k is not None for k in first) <= 140
    runs = "".join("x" if k else "." for k in first)
    assert "xxx" not in runs
    proxy.stop()  # never started: stopping it only closes its socket


@pytest.fixture(scope="module")
def flaky_datasets(flaky_gcs: FlakyGcs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """(local, gs://) copies of a small dataset per format, uploaded with faults off."""
    bucket = flaky_gcs.create_bucket("flaky-remote-reads")
    out = {}
    for name in ("tfrecord", "array_record"):
        file_format, compression = VARIANTS[name]
        local = write_local(str(tmp_path_factory.mktemp("flaky-reads") / name), file_format, compression)
        with flaky_gcs.quiet():
            _upload_tree(local, f"{bucket}/{name}")
        out[name] = (local, f"{bucket}/{name}")
    return out


def _keys(reader: str, path: str, **options) -> list[str]:
    if reader == "numpy":
        return [bytes(e["key"]).decode() for e in read_numpy(path, split="train+test", **options)]
    if reader == "torch":
        from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

        return [bytes(k).decode() for batch in TFRecordIterableDataset(path, split="train+test", batch_size=16,
                                                                       **options) for k in batch["key"]]
    from beam_tfrecord.reader.tf_data import read_dataset

    return [k.decode() for batch in read_dataset(path, split="train+test", batch_size=16, **options)
            for k in batch["key"].numpy().tolist()]


@pytest.mark.parametrize("variant", ["tfrecord", "array_record"])
@pytest.mark.parametrize("reader", ["numpy", "torch", "tf"])
def test_parallel_ranged_reads_through_faults_give_the_same_records(
        reader: str, variant: str, flaky_gcs: FlakyGcs, flaky_datasets: dict[str, tuple[str, str]],
        tmp_path: Path) -> None:
    local, remote = flaky_datasets[variant]
    proxy = flaky_gcs.proxy
    proxy.reset(seed=11, fault_fraction=0.2)
    proxy.set_shaping(latency_seconds=0.005, bytes_per_second=None)

    def shard_reads() -> int:  # GETs of shard bytes (not of the manifest)
        return sum(count for path, count in proxy.media_reads.items() if "-of-0" in path)

    try:
        first = _keys(reader, remote, remote_reads=SMALL_READS[variant], cache_dir=str(tmp_path))
        first_reads = shard_reads()
        second = _keys(reader, remote, remote_reads=SMALL_READS[variant], cache_dir=str(tmp_path))
    finally:
        proxy.set_shaping(latency_seconds=0.0, bytes_per_second=None)
    assert first == second == _keys(reader, local)
    assert proxy.faulted_methods["GET"] >= 3, dict(proxy.faults)  # ranged reads met faults and were retried
    assert first_reads > len(load_manifest(local).shards)  # several ranges per shard
    assert shard_reads() == first_reads  # the second epoch read the cache only


def test_forked_dataloader_workers_read_every_record_once_through_faults(
        flaky_gcs: FlakyGcs, flaky_datasets: dict[str, tuple[str, str]]) -> None:
    """A training script's main process reads, then its forked DataLoader workers, a resumed loader and a Pool read
    through the faults (tests/storage/forked_readers.py); every record once, and faults met."""
    flaky_gcs.proxy.reset(seed=5, fault_fraction=0.1)
    result = run_forked_readers(["fork"], [flaky_datasets["tfrecord"][1]])
    assert_every_record_once(result, "fork")
    assert sum(flaky_gcs.proxy.faults.values()) >= 3, dict(flaky_gcs.proxy.faults)


def test_the_proxy_delays_first_bytes_and_caps_each_connection(flaky_gcs: FlakyGcs, flaky_bucket: str) -> None:
    path = f"{flaky_bucket}/blob"
    data = os.urandom(200_000)
    with flaky_gcs.quiet():
        storage.write_bytes_atomic(path, data)
    proxy = flaky_gcs.proxy
    proxy.reset(seed=0, fault_fraction=0.0)
    proxy.set_shaping(latency_seconds=0.1, bytes_per_second=1_000_000)
    try:
        read = storage.backend_for(path).read_range
        started = time.monotonic()
        assert read(path, 0, 200_000) == data
        whole = time.monotonic() - started
        started = time.monotonic()
        assert read(path, 0, 10) == data[:10]
        small = time.monotonic() - started
    finally:
        proxy.set_shaping(latency_seconds=0.0, bytes_per_second=None)
    assert whole >= 0.1 + 0.2 * 0.95  # the latency, then 200 KB at 1 MB/s
    assert small >= 0.1
    with pytest.raises(ValueError, match="latency_seconds must be >= 0, got -1"):
        proxy.set_shaping(latency_seconds=-1, bytes_per_second=None)

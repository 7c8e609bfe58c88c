"""Memory on Beam's DaskRunner is bounded by the engine's settings, not by the data.

A LocalCluster of two worker processes, each capped by ``memory_limit`` as real clusters' workers
are, builds a dataset 1.3 times the size of the cluster's memory in partitions sized to that limit: no worker
is restarted or paused for long, the process tree's peak RSS stays under the cluster's memory, and the shards are the
DirectRunner's, byte for byte. A cluster that cannot make progress (workers paused or killed for
memory) fails the job with ``ClusterStalledError`` naming the limit, instead of hanging.
(``benchmarks/dask_volume.py`` runs the full-size version: 4 GiB of small records, 5 GiB of blobs.)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apache_beam as beam
import psutil
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from dask_fixtures import CAPPED_WORKER_MEMORY, DASK_RUNNER, PER_ELEMENT, RECORD_BYTES, incompressible_records

from beam_tfrecord import (
    DType,
    Scalar,
    Schema,
    ShardingConfig,
    SplitConfig,
    WriterTuning,
    WriteTFRecordDataset,
    load_manifest,
)
from beam_tfrecord.core.units import MiB
from beam_tfrecord.engine.dask_cluster import DaskClusterOptions
from beam_tfrecord.errors import ClusterStalledError
from pipelines.common import job_pipeline

SCHEMA = Schema({"payload": Scalar(DType.BYTES), "index": Scalar(DType.INT64)})


class _PeakTreeRss:
    """Samples this process and the descendants it starts while measured (the cluster's nannies and
    workers) every 100 ms. Children alive before (another test's cluster, in the same pytest
    process) are not this build's and are left out."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._before = {child.pid for child in psutil.Process().children(recursive=True)}

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *(c for c in me.children(recursive=True) if c.pid not in self._before)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.1)

    def __enter__(self) -> _PeakTreeRss:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()


def _build(out: str, options: list[str], elements: int) -> None:
    writer = WriteTFRecordDataset(out, schema=SCHEMA, splits=SplitConfig.parse("train=0.9,test=0.1"),
                                  sharding=ShardingConfig(target_shard_bytes=64 * MiB),
                                  tuning=WriterTuning(spill_run_bytes=8 * MiB))
    with job_pipeline(PipelineOptions(options)) as pipeline:
        _ = pipeline | beam.Create(list(range(elements))) | beam.Map(incompressible_records) | writer


def _shards(out: str) -> list[tuple[str, int, str]]:
    return [(s.filename, s.num_bytes, s.crc32c) for s in load_manifest(out).shards]


@pytest.mark.slow
def test_a_capped_cluster_builds_more_than_its_memory_byte_identically(tmp_path: Path) -> None:
    cluster_memory = 2 * CAPPED_WORKER_MEMORY
    elements = -(-13 * cluster_memory // (10 * RECORD_BYTES * PER_ELEMENT))  # 1.3x: more than the bound below
    reference = str(tmp_path / "direct")
    _build(reference, ["--runner=DirectRunner"], elements)

    out = str(tmp_path / "dask")
    # No --dask_partition_size: the runner fits partitions to the workers' limit (16 elements of 2 MiB here). Beam's
    # default, 128 elements a partition, stalls this build: workers killed at 95%, ClusterStalledError.
    options = [f"--runner={DASK_RUNNER}", "--dask_local_workers=2", f"--dask_memory_limit={CAPPED_WORKER_MEMORY}",
               "--dask_stall_timeout_seconds=60"]
    with _PeakTreeRss() as rss:
        _build(out, options, elements)

    data_bytes = sum(size for _, size, _ in _shards(out))
    assert data_bytes >= 1.3 * cluster_memory > cluster_memory + 256 * MiB  # more than the bound below
    assert _shards(out) == _shards(reference)
    # Client (this pytest process, ~0.6 GB with TensorFlow imported by earlier tests) plus the workers,
    # each under its cap: the peak follows the settings, never the 1.3 GiB of data.
    client = psutil.Process().memory_info().rss
    assert rss.peak <= client + cluster_memory + 256 * MiB, (rss.peak / MiB, client / MiB)


_HOARD: list[bytes] = []  # in a worker process: memory the job never gives back


class _HoldMemory(beam.DoFn):
    """Brings its worker process to ``fraction`` of ``limit_bytes`` and keeps it there."""

    def __init__(self, limit_bytes: int, fraction: float) -> None:
        self._limit_bytes = limit_bytes
        self._fraction = fraction

    def process(self, element: int):
        need = int(self._fraction * self._limit_bytes) - psutil.Process().memory_info().rss
        if need > 0:
            _HOARD.append(b"\x01" * need)
        yield element


def _run_holding(fraction: float, limit_bytes: int, extra: list[str], workers: int = 2) -> None:
    options = PipelineOptions([f"--runner={DASK_RUNNER}", f"--dask_local_workers={workers}",
                               f"--dask_memory_limit={limit_bytes}", "--dask_partition_size=1", *extra])
    with job_pipeline(options) as pipeline:
        _ = (pipeline | beam.Create(list(range(8))) | beam.ParDo(_HoldMemory(limit_bytes, fraction))
             | beam.Map(lambda x: x))


def test_workers_paused_for_memory_fail_the_job_with_a_typed_error_instead_of_hanging() -> None:
    limit = 640 * MiB
    start = time.monotonic()
    with pytest.raises(ClusterStalledError) as caught:
        _run_holding(0.88, limit, ["--dask_stall_timeout_seconds=4"])  # paused at 80%, never resumed
    message = str(caught.value)
    assert "no worker could run tasks for 4 s (workers: " in message and message.count(" paused at ") == 2
    assert "memory limit: 0.62 GiB per worker" in message and "--dask_memory_limit" in message
    assert caught.value.memory_limit_bytes == limit
    assert time.monotonic() - start < 60  # the stall timeout, cluster start and stop: not forever


def test_workers_killed_for_memory_again_and_again_fail_the_job_with_a_typed_error() -> None:
    import dask

    limit = 640 * MiB
    # One worker: the task that kills it is retried on its restarted self and kills it again (two kills, where two
    # workers took four and a Beam import after each restart).
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
            pytest.raises(ClusterStalledError) as caught:
        _run_holding(1.2, limit, [], workers=1)  # over 95%: the nanny restarts the worker, the task runs again
    message = str(caught.value)
    assert "the scheduler gave up on a task after its workers were killed repeatedly" in message
    assert "memory limit: 0.62 GiB per worker" in message and "--dask_partition_size" in message


def test_the_local_cluster_options_reach_the_workers() -> None:
    from distributed import Client

    from beam_tfrecord.engine.dask_cluster import local_cluster_for

    options = PipelineOptions([f"--runner={DASK_RUNNER}", "--dask_local_workers=3", "--dask_memory_limit=700MiB"])
    assert options.view_as(DaskClusterOptions).dask_stall_timeout_seconds == 300
    with local_cluster_for(options) as address, Client(address) as client:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        assert [w["memory_limit"] for w in workers] == [700 * MiB] * 3
        # Dask measures what Beam's DaskRunner stores (the dask.sizeof entry point, loaded in workers too).
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue

        def measured() -> int:
            from dask.sizeof import sizeof

            return sizeof(WindowedValue(b"x" * 10**6, 0, (GlobalWindow(),)))

        one = next(iter(client.scheduler_info(n_workers=-1)["workers"]))  # each worker importing Beam costs ~3 s
        assert client.run(measured, workers=[one])[one] >= 10**6

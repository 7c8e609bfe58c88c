"""A Dask worker process killed while the job runs: the scheduler re-runs its tasks elsewhere, and the
dataset is byte-identical to a clean run (every step the writer runs is safe to run again)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from apache_beam.options.pipeline_options import PipelineOptions
from dask_fixtures import DASK_RUNNER

from beam_tfrecord import ShardingConfig, SplitConfig, WriteTFRecordDataset, load_manifest, verify_dataset
from beam_tfrecord.beam.worker_placement import scheduler_on_this_machine
from beam_tfrecord.core.schema import ImageFormat
from beam_tfrecord.sources.image_folder import ReadImageFolder, image_folder_schema
from pipelines.common import job_pipeline


def _slow_identity(seconds: float):
    def transform(value):  # stretches the job so that a worker dies mid-way; bytes unchanged
        time.sleep(seconds)
        return value
    return transform


def _build(images: str, out: str, options: list[str], *, slow_s: float) -> None:
    writer = WriteTFRecordDataset(out, schema=image_folder_schema(images, ImageFormat.JPEG),
                                  splits=SplitConfig.parse("train=0.8,test=0.2"),
                                  sharding=ShardingConfig(target_shard_bytes=60_000),
                                  feature_transforms={"image": _slow_identity(slow_s)})
    with job_pipeline(PipelineOptions(options)) as pipeline:
        _ = pipeline | ReadImageFolder(images) | writer


def _shards(out: str) -> dict[str, bytes]:
    return {s.filename: Path(out, s.filename).read_bytes() for s in load_manifest(out).shards}


def test_job_survives_a_killed_worker_with_identical_output(sample_images: str, tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    reference = str(tmp_path / "reference")
    _build(sample_images, reference, ["--runner=DirectRunner"], slow_s=0.0)

    out = str(tmp_path / "dask")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            scheduler_on_this_machine(cluster.scheduler_address), Client(cluster.scheduler_address) as client:
        pids_before = client.run(os.getpid)  # worker address -> pid
        errors: list[BaseException] = []

        def job() -> None:
            try:
                _build(sample_images, out, [f"--runner={DASK_RUNNER}",
                                            f"--dask_client_address={cluster.scheduler_address}"], slow_s=0.02)
            except BaseException as err:  # re-raised in the test thread
                errors.append(err)

        thread = threading.Thread(target=job)
        thread.start()
        deadline = time.monotonic() + 60
        victim = None
        while victim is None and time.monotonic() < deadline and thread.is_alive():
            busy = [worker for worker, tasks in client.processing().items() if tasks]
            if busy:
                victim = busy[0]
            else:
                time.sleep(0.05)
        assert victim is not None, "no task ever ran on a worker"
        time.sleep(0.5)  # let the victim get well into its tasks
        assert thread.is_alive(), "the job finished before a worker could be killed"
        os.kill(pids_before[victim], signal.SIGKILL)
        thread.join(timeout=300)
        assert not thread.is_alive(), "the job did not finish after the worker was killed"
        if errors:
            raise errors[0]
        pids_after = client.run(os.getpid)

    assert pids_before[victim] not in pids_after.values()  # it really died (its nanny started a new one)
    assert verify_dataset(out).num_records == 300
    assert _shards(out) == _shards(reference)
    assert sorted(os.listdir(out)) == sorted(os.listdir(reference))

"""A Dask worker process killed while the job runs: the scheduler re-runs its tasks elsewhere, and the
dataset is byte-identical to a clean run (every step the writer runs is safe to run again)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from apache_beam.options.pipeline_options import PipelineOptions
from dask_fixtures import DASK_RUNNER, kill_a_worker_mid_job

from beam_tfrecord import ShardingConfig, SplitConfig, WriteTFRecordDataset, load_manifest, verify_dataset
from beam_tfrecord.core.schema import ImageFormat
from beam_tfrecord.engine.worker_placement import scheduler_on_this_machine
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
        killed = kill_a_worker_mid_job(client, lambda: _build(sample_images, out, [
            f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}"], slow_s=0.02),
            settle_s=0.5)
        pids_after = client.run(os.getpid)

    assert killed not in pids_after.values()  # it really died (its nanny started a new one)
    assert verify_dataset(out).num_records == 300
    assert _shards(out) == _shards(reference)
    assert sorted(os.listdir(out)) == sorted(os.listdir(reference))

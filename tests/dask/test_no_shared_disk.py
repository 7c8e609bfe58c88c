"""A build on a Dask cluster whose workers share no disk with the client (tests/dask/private_cluster.py).

gs:// in and out works, byte-identically to the DirectRunner build of the same gs:// input, for a build,
an incremental refresh and a build that loses a worker mid-job; and s3:// in and out (moto's server on
127.0.0.1, its variables in the workers' environment) gives the same bytes. Each local path is refused before any
work starts with its typed error, naming the workers that could not see it; a local folder declared shared
that the workers do not mount fails with the counts, and nothing is published in any of these cases.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dask_fixtures import kill_a_worker_mid_job
from fixtures_gcs import FakeGcs, fake_gcs, gcs_bucket, tiny_images  # noqa: F401  (pytest fixtures)
from fixtures_stores import Server, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)
from private_cluster import PrivateCluster, private_cluster, private_cluster_skip_reason

from beam_tfrecord import load_manifest, storage
from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.engine.dask_probe import TOKEN_PREFIX
from beam_tfrecord.errors import InputsMismatchError, LocalPathError
from beam_tfrecord.versions.commit import COMMIT_KEY
from pipelines import build_image_dataset, refresh_image_dataset

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
SHARDING = ["--target_shard_bytes=4000", "--splits=train=0.8,test=0.2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, fake_gcs: FakeGcs,
            moto_s3: Server) -> Iterator[PrivateCluster]:
    """The workers start with this process's environment: both emulators' variables."""
    hidden = tmp_path_factory.getbasetemp()  # every folder this test process makes
    reason = private_cluster_skip_reason(hidden)
    if reason is not None:
        pytest.skip(reason)
    with private_cluster(hidden) as running:
        yield running


@pytest.fixture(scope="module")
def inputs(fake_gcs: FakeGcs, tiny_images: str) -> str:
    bucket = fake_gcs.create_bucket(f"bt-no-shared-disk-{time.monotonic_ns() % 10**6}")
    fake_gcs.upload_tree(tiny_images, f"{bucket}/raw/images")
    return bucket


def _on_cluster(cluster: PrivateCluster) -> list[str]:
    return [f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.address}"]


def _shard_bytes(dataset: str) -> dict[tuple[bool, str], bytes]:
    """(listed from an earlier version, file name) -> bytes of every shard the dataset lists, wherever stored."""
    opened = open_dataset(dataset)
    return {(s.stored_in is not None, s.filename): storage.read_bytes(opened.shard_path(s))
            for s in opened.manifest.shards}


def _objects_under(path: str) -> list[str]:
    return [name for name, _ in storage.list_files(path.rstrip("/") + "/**")]


@pytest.fixture(scope="module")
def reference(inputs: str) -> dict[str, bytes]:
    """The DirectRunner's build of the gs:// input."""
    out = f"{inputs}/datasets/direct"
    build_image_dataset.run([f"--input={inputs}/raw/images", f"--output={out}", *SHARDING])
    return _shard_bytes(out)


def test_the_workers_do_not_see_the_clients_folders(cluster: PrivateCluster, tiny_images: str) -> None:
    from distributed import Client

    assert os.path.isdir(tiny_images)
    with Client(cluster.address) as client:
        seen = client.run(os.path.exists, tiny_images)
    assert len(seen) == 2 and not any(seen.values())


def test_gs_build_on_workers_without_shared_disk_equals_the_direct_runner_build(
        cluster: PrivateCluster, inputs: str, reference: dict[str, bytes], capsys: pytest.CaptureFixture) -> None:
    out = f"{inputs}/datasets/dask"
    capsys.readouterr()
    manifest = build_image_dataset.run([f"--input={inputs}/raw/images", f"--output={out}", *SHARDING,
                                        *_on_cluster(cluster)])
    assert manifest.num_written == 30 and _shard_bytes(out) == reference
    summary = capsys.readouterr().out
    assert ("  fan-in: spill (auto: the DaskRunner's shuffle holds what it groups in memory); sorted runs spilled "
            f"to the temp folder, merged by the shard writers (temp folder {out}/.tmp-beam-tfrecord-") in summary


def test_s3_build_on_workers_without_shared_disk_equals_the_direct_runner_build(
        cluster: PrivateCluster, s3_bucket: str, tiny_images: str, reference: dict[str, bytes]) -> None:
    """The reference is the DirectRunner's build of the same images from gs:// (a build's bytes do not
    depend on the store: tests/storage/test_store_end_to_end.py)."""
    _upload_tree(tiny_images, f"{s3_bucket}/raw/images")
    out = f"{s3_bucket}/datasets/dask"
    manifest = build_image_dataset.run([f"--input={s3_bucket}/raw/images", f"--output={out}", *SHARDING,
                                        *_on_cluster(cluster)])
    assert manifest.num_written == 30 and _shard_bytes(out) == reference


def _upload_tree(local: str, remote: str) -> None:
    for path in sorted(Path(local).rglob("*")):
        if path.is_file():
            with storage.open_write(storage.join(remote, path.relative_to(local).as_posix())) as out:
                out.write(path.read_bytes())


@pytest.mark.parametrize("local", ["input", "output"])
def test_a_local_path_is_refused_before_any_work(cluster: PrivateCluster, inputs: str, tiny_images: str,
                                                 tmp_path: Path, local: str) -> None:
    from distributed import Client

    given = {"input": f"--input={tiny_images}" if local == "input" else f"--input={inputs}/raw/images",
             "output": f"--output={tmp_path / 'out'}" if local == "output" else f"--output={inputs}/refused"}
    path = tiny_images if local == "input" else str(tmp_path / "out")
    with Client(cluster.address) as client:
        workers = sorted(client.scheduler_info()["workers"])
    with pytest.raises(LocalPathError) as raised:
        build_image_dataset.run([given["input"], given["output"], *_on_cluster(cluster)])
    missed = "; ".join(f"{worker} cannot see {path!r}" for worker in workers)
    assert str(raised.value) == (
        f"--{local} {path!r} is a local path, but the DaskRunner runs on the Dask scheduler {cluster.address}, "
        f"whose workers do not share this disk ({missed}): they would not see it. Put it on storage every worker "
        "reads (gs://BUCKET/...), or, if every worker mounts this path (NFS, a bucket mounted with gcsfuse), say so "
        "with --shared_filesystem")
    assert not (tmp_path / "out").exists() and not _objects_under(f"{inputs}/refused")
    assert not [name for name in os.listdir(tmp_path) if name.startswith(TOKEN_PREFIX)]  # the probe's, removed


def test_a_local_folder_declared_shared_that_workers_lack_fails_with_the_counts(
        cluster: PrivateCluster, inputs: str, tiny_images: str) -> None:
    out = f"{inputs}/datasets/declared"
    with pytest.raises(InputsMismatchError) as raised:
        build_image_dataset.run([f"--input={tiny_images}", f"--output={out}", "--shared_filesystem",
                                 *_on_cluster(cluster)])
    assert str(raised.value).startswith(
        f"image folder {tiny_images!r}: the workers read 0 inputs where the client planned 30 (30 missing, e.g. "
        "'circle/")
    assert "nothing was published" in str(raised.value)
    assert not storage.exists(f"{out}/manifest.json")


def test_incremental_refresh_on_workers_without_shared_disk_equals_the_direct_runner(
        cluster: PrivateCluster, fake_gcs: FakeGcs, tiny_images: str, tmp_path: Path) -> None:
    bucket = fake_gcs.create_bucket(f"bt-no-shared-refresh-{time.monotonic_ns() % 10**6}")
    folder = f"{bucket}/raw/images"
    fake_gcs.upload_tree(tiny_images, folder)
    roots = {"dask": f"{bucket}/roots/dask", "direct": f"{bucket}/roots/direct"}
    for root in roots.values():
        refresh_image_dataset.run([f"--input={folder}", f"--dataset_root={root}", *SHARDING])
    extra = tmp_path / "extra"
    (extra / "square").mkdir(parents=True)
    first_square = sorted(Path(tiny_images, "square").iterdir())[0]
    (extra / "square" / "new.jpg").write_bytes(first_square.read_bytes())
    fake_gcs.upload_tree(str(extra), folder)
    plans = {name: refresh_image_dataset.run([f"--input={folder}", f"--dataset_root={root}", *SHARDING,
                                              *(_on_cluster(cluster) if name == "dask" else [])])
             for name, root in roots.items()}
    dask, direct = (load_manifest(plans[name].version_dir) for name in ("dask", "direct"))
    commit = dask.metadata[COMMIT_KEY]  # an append: the base's shards listed, the new image in a shard of its own
    assert (commit["base_version"], commit["kept_records"], commit["written_records"], commit["deleted_records"]) == \
        (plans["dask"].latest, 30, 1, 0)
    assert dask.num_written == direct.num_written == 31
    assert _shard_bytes(plans["dask"].version_dir) == _shard_bytes(plans["direct"].version_dir)


def _slow(seconds: float):
    def transform(value):  # stretches the job so that a worker dies mid-way; bytes unchanged
        time.sleep(seconds)
        return value
    return transform


def test_a_worker_killed_mid_job_gives_the_same_bytes(cluster: PrivateCluster, inputs: str,
                                                      reference: dict[str, bytes]) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions
    from distributed import Client

    from beam_tfrecord import ShardingConfig, SplitConfig, WriteTFRecordDataset
    from beam_tfrecord.core.schema import ImageFormat
    from beam_tfrecord.sources.image_folder import ReadImageFolder, image_folder_schema
    from pipelines.common import job_pipeline

    images, out = f"{inputs}/raw/images", f"{inputs}/datasets/killed"
    writer = WriteTFRecordDataset(out, schema=image_folder_schema(images, ImageFormat.JPEG),
                                  splits=SplitConfig.parse("train=0.8,test=0.2"),
                                  sharding=ShardingConfig(target_shard_bytes=4000),
                                  feature_transforms={"image": _slow(0.1)})
    def job() -> None:
        with job_pipeline(PipelineOptions(_on_cluster(cluster))) as pipeline:
            _ = pipeline | ReadImageFolder(images) | writer

    with Client(cluster.address) as client:
        killed = kill_a_worker_mid_job(client, job, settle_s=0.3)
        client.wait_for_workers(2, timeout=60)  # the nanny started a new one, for the next test
        assert killed not in client.run(os.getpid).values()
    assert _shard_bytes(out) == reference

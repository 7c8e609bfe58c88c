"""An image folder on each object store built into a dataset on the same store, verified and read back
by read_numpy and the PyTorch dataset: the same bytes as the same build on local disk; and refreshed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from beam_tfrecord import storage
from beam_tfrecord.dataset import load_manifest, resolve_dataset_dir
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.refresh import RefreshAction, list_versions
from pipelines import build_image_dataset, compact, refresh_image_dataset

STORES = {"s3": "moto_s3", "az": "azurite"}  # the session fixture of each store's server
OPTIONS = ["--splits", "train=0.8,validation=0.2", "--target_shard_bytes=6000", "--runner=DirectRunner",
           "--direct_running_mode=in_memory"]


@dataclasses.dataclass(frozen=True)
class Built:
    local: str  # the reference: the same inputs, built on local disk
    remote: str  # built from the inputs copied to the store, onto the store


def _new_bucket(store: str) -> str:
    name = f"e2e-{time.monotonic_ns() % 10**9}"
    if store == "s3":
        from beam_tfrecord.storage import s3

        s3.client().create_bucket(Bucket=name)
        return f"s3://{name}"
    from beam_tfrecord.storage import azure_blob

    azure_blob.service(None).create_container(name)
    return f"az://{name}"


def _upload(local_dir: str, remote_dir: str) -> None:
    for path in sorted(Path(local_dir).rglob("*")):
        if path.is_file():
            with storage.open_write(storage.join(remote_dir, path.relative_to(local_dir).as_posix())) as out:
                out.write(path.read_bytes())


@pytest.fixture(scope="module")
def local_build(tiny_images: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The reference: the images built on local disk, from an input root named as on the stores (raw/images)."""
    local_input = str(tmp_path_factory.mktemp("raw") / "images")
    _upload(tiny_images, local_input)
    local = str(tmp_path_factory.mktemp("local") / "images")
    build_image_dataset.run(["--input", local_input, "--output", local, *OPTIONS])
    return local


@pytest.fixture(scope="module", params=list(STORES))
def built(request: pytest.FixtureRequest, tiny_images: str, local_build: str) -> Built:
    request.getfixturevalue(STORES[request.param])
    bucket = _new_bucket(request.param)
    _upload(tiny_images, f"{bucket}/raw/images")
    remote = f"{bucket}/datasets/images"
    build_image_dataset.run(["--input", f"{bucket}/raw/images", "--output", remote, *OPTIONS])
    return Built(local_build, remote)


def test_the_build_publishes_exactly_its_files_and_verifies(built: Built) -> None:
    manifest = load_manifest(built.remote)
    report = verify_dataset(built.remote)
    assert (report.num_records, report.num_shards) == (30, len(manifest.shards)) and len(manifest.shards) > 2
    published = ["manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES,
                 *filter(None, [manifest.statistics]), *(s.filename for s in manifest.shards)]
    assert {p for p, _ in storage.list_files(f"{built.remote}/**")} == {f"{built.remote}/{n}" for n in published}


def test_the_shards_are_the_local_builds_bytes(built: Built) -> None:
    manifest = load_manifest(built.remote)
    assert [s.filename for s in manifest.shards] == [s.filename for s in load_manifest(built.local).shards]
    for shard in manifest.shards:
        assert storage.read_bytes(f"{built.remote}/{shard.filename}") == Path(built.local, shard.filename).read_bytes()


@pytest.mark.parametrize("split", ["train", "validation"])
def test_read_numpy_gives_the_local_records(built: Built, split: str) -> None:
    def records(path: str) -> list[tuple[bytes, int]]:
        return [(bytes(ex["image"]), int(ex["label"])) for ex in read_numpy(path, split=split)]

    assert records(built.remote) == records(built.local) != []


def test_the_pytorch_dataset_gives_the_local_batches(built: Built, tmp_path: Path) -> None:
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    def batches(path: str, **options: object) -> list[tuple[list[bytes], list[int]]]:
        dataset = TFRecordIterableDataset(path, batch_size=8, **options)  # type: ignore[arg-type]
        return [([bytes(image) for image in batch["image"]], [int(x) for x in batch["label"]]) for batch in dataset]

    expected = batches(built.local)
    assert batches(built.remote) == expected != []
    cache = str(tmp_path / "cache")
    assert batches(built.remote, cache_dir=cache) == expected  # fills the cache
    assert batches(built.remote, cache_dir=cache) == expected  # read from it


@pytest.mark.parametrize("bucket_fixture", ["s3_bucket", "az_container"], ids=["s3", "az"])
def test_a_refresh_on_the_store_skips_unchanged_inputs_and_moves_latest(bucket_fixture: str, tiny_images: str,
                                                                        request: pytest.FixtureRequest) -> None:
    bucket = request.getfixturevalue(bucket_fixture)
    raw, root = f"{bucket}/raw/images", f"{bucket}/datasets/refreshed"
    _upload(tiny_images, raw)
    argv = ["--input", raw, "--dataset_root", root, "--keep_versions=1", "--min_version_age=0",
            "--target_shard_bytes=8000"]  # incremental (the default): the inputs' ETags are their content tokens
    first = refresh_image_dataset.run(argv)
    assert first.action is RefreshAction.BUILD
    assert refresh_image_dataset.run(argv).action is RefreshAction.SKIP
    with storage.open_write(f"{raw}/circle/9999.jpg") as handle:  # new raw data lands
        handle.write(Path(tiny_images, "circle", "0000.jpg").read_bytes())
    second = refresh_image_dataset.run(argv)
    assert second.action is RefreshAction.BUILD and second.version_id > first.version_id
    assert storage.read_bytes(f"{root}/LATEST").decode().strip() == second.version_id
    assert verify_dataset(resolve_dataset_dir(root)).num_records == 31
    assert list_versions(root).complete == (second.version_id,)  # keep_versions=1 retired the first
    assert not load_manifest(root).self_contained  # an append: the first version's shards are listed, not copied
    assert sum(1 for _ in read_numpy(root)) == 31  # the reader takes the root and reads LATEST
    compacted = compact.run(["--dataset_root", root, "--keep_versions=1", "--min_version_age=0"])
    assert load_manifest(root).self_contained and list_versions(root).complete == (compacted,)
    assert verify_dataset(resolve_dataset_dir(root)).num_records == 31
    assert not storage.list_files(f"{root}/versions/{first.version_id}/**")  # nothing lists its shards now


RUNNERS = {"multi-processing": ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                                 "--direct_num_workers=2"],
           "portable-loopback": ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]}
CROSSED = {"multi-processing": ("s3", "az"), "portable-loopback": ("az", "s3")}  # (input's store, output's store)


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_other_runners_read_one_store_and_write_the_other_with_the_same_bytes(
        runner: str, tiny_images: str, local_build: str, request: pytest.FixtureRequest) -> None:
    """The DirectRunner's worker processes and the portable runner's LOOPBACK workers (the Fn API path of
    Flink and Dataflow) inherit both stores' variables and make their own clients: each store is read by one
    runner and written by the other (one job per runner: a job's workers cost ~10 s to start here)."""
    stores = CROSSED[runner]
    for store in stores:
        request.getfixturevalue(STORES[store])
    raw, output = f"{_new_bucket(stores[0])}/raw/images", f"{_new_bucket(stores[1])}/datasets/{runner}"
    _upload(tiny_images, raw)
    manifest = build_image_dataset.run(["--input", raw, "--output", output, *OPTIONS[:3], *RUNNERS[runner]])
    assert [s.filename for s in manifest.shards] == [s.filename for s in load_manifest(local_build).shards]
    for shard in manifest.shards:
        assert storage.read_bytes(f"{output}/{shard.filename}") == Path(local_build, shard.filename).read_bytes()

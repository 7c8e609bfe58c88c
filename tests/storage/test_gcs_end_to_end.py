"""gs:// in, gs:// out, through the real jobs and runners, verified and read back (emulator-backed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gcs import FakeGcs

from beam_tfrecord import storage
from beam_tfrecord.dataset import load_manifest, resolve_dataset_dir, shard_paths
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.refresh import RefreshAction, list_versions
from pipelines import build_image_dataset, refresh_image_dataset

RUNNERS = {
    "direct-in-memory": ["--runner=DirectRunner", "--direct_running_mode=in_memory"],
    "direct-multi-processing": ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                                "--direct_num_workers=2"],
}
# The DaskRunner's gs:// build (workers inheriting the emulator's environment) runs in
# tests/storage/test_flaky_store.py, through injected faults, with the same checks.


def _local_images(root: str) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in Path(root).rglob("*.jpg")}


@pytest.fixture()
def gs_images(fake_gcs: FakeGcs, gcs_bucket: str, tiny_images: str) -> str:
    gs_input = f"{gcs_bucket}/raw/images"
    assert fake_gcs.upload_tree(tiny_images, gs_input) == 30
    return gs_input


@pytest.mark.parametrize("runner", RUNNERS.values(), ids=RUNNERS.keys())
def test_build_gs_to_gs_verify_and_read(runner: list[str], gs_images: str, gcs_bucket: str, tiny_images: str,
                                        fake_gcs: FakeGcs) -> None:
    output = f"{gcs_bucket}/datasets/images"
    manifest = build_image_dataset.run(["--input", gs_images, "--output", output, "--splits",
                                        "train=0.8,validation=0.2", "--target_shard_bytes=6000", *runner])

    report = verify_dataset(output)
    assert (report.num_records, report.num_shards) == (30, len(manifest.shards))
    assert len(manifest.shards) > 2
    listed = {p for p, _ in storage.list_files(f"{output}/**")}
    published = ["manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES, *filter(None, [manifest.statistics]),
                 *(s.filename for s in manifest.shards)]
    assert listed == {f"{output}/{name}" for name in published}  # no temporary file left
    read = [ex for split in ("train", "validation") for ex in read_numpy(output, split=split)]
    assert sorted(bytes(ex["image"]) for ex in read) == sorted(_local_images(tiny_images).values())
    text = storage.read_bytes(f"{output}/manifest.json").decode()
    for secret_ish in (fake_gcs.env["GOOGLE_APPLICATION_CREDENTIALS"], '"token"'):
        assert secret_ish not in text


def test_refresh_gs_versions_noop_change_and_retention(gs_images: str, gcs_bucket: str, tiny_images: str) -> None:
    root = f"{gcs_bucket}/datasets/refreshed"
    argv = ["--input", gs_images, "--dataset_root", root, "--keep_versions=1", "--min_version_age=0",
            "--target_shard_bytes=8000"]

    first = refresh_image_dataset.run(argv)
    assert first.action is RefreshAction.BUILD
    assert storage.read_bytes(f"{root}/LATEST").decode().strip() == first.version_id
    assert verify_dataset(resolve_dataset_dir(root)).num_records == 30
    paths = shard_paths(root, load_manifest(root), "train")  # a root resolves to its LATEST version
    assert paths and all(p.startswith(f"{root}/versions/{first.version_id}/") and storage.exists(p) for p in paths)

    assert refresh_image_dataset.run(argv).action is RefreshAction.SKIP

    extra = Path(tiny_images, "circle", "0000.jpg").read_bytes()
    with storage.open_write(f"{gs_images}/circle/9999.jpg") as handle:  # new raw data lands
        handle.write(extra)
    second = refresh_image_dataset.run(argv)
    assert second.action is RefreshAction.BUILD and second.version_id > first.version_id
    assert verify_dataset(resolve_dataset_dir(root)).num_records == 31
    assert list_versions(root).complete == (second.version_id,)  # keep_versions=1 deleted the first
    assert list_versions(root).incomplete == ()
    assert sum(1 for _ in read_numpy(root)) == 31  # the reader takes the root and reads LATEST

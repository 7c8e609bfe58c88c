"""An incremental refresh killed while it builds its version is resumed by the next run of the same inputs:
that run builds the killed version in place, encodes only what the killed one's finished runs do not hold,
says so, and publishes the shard bytes of a clean refresh."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from kills import files_exist, kill_when

from beam_tfrecord import load_manifest
from beam_tfrecord.core.runs import INDEX_SUFFIX
from beam_tfrecord.dataset import open_dataset, read_latest, resolve_dataset_dir
from beam_tfrecord.spill.resume import TEMP_PREFIX, finished_runs
from beam_tfrecord.versions.commit import COMMIT_KEY
from pipelines import refresh_image_dataset
from pipelines.make_sample_images import write_sample_images


def _args(images: Path, root: Path) -> list[str]:
    return ["--input", str(images), "--dataset_root", str(root), "--resize=64x64", "--spill_run_mib=1",
            "--target_shard_bytes=200000", "--progress=none", "--direct_num_workers=1", "--min_version_age=0"]


def _latest_shards(root: Path) -> dict[tuple[bool, str], bytes]:
    """(listed from the base version, file name) -> bytes of every shard LATEST lists."""
    dataset = open_dataset(str(root))
    return {(s.stored_in is not None, s.filename): Path(dataset.shard_path(s)).read_bytes()
            for s in dataset.manifest.shards}


def test_a_killed_refresh_is_resumed_by_the_next_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The killed refresh is a command (a process to kill); the other runs call the job's ``run`` in this
    process with the same arguments."""
    images, root, clean_root = tmp_path / "images", tmp_path / "root", tmp_path / "clean"
    write_sample_images(str(images), per_class=100, size=64, seed=3)
    refresh_image_dataset.run(_args(images, root))
    first = read_latest(str(root))
    shutil.copytree(root, clean_root)
    more = tmp_path / "more"
    write_sample_images(str(more), per_class=500, size=64, seed=4)
    for path in more.glob("*/*.jpg"):
        if int(path.stem) >= 100:  # 400 new images per class; the first 100 are kept from the first version
            shutil.copy(path, images / path.parent.name / path.name)

    kill_when([sys.executable, "-m", "pipelines.refresh_image_dataset", *_args(images, root)],
              files_exist(f"{root}/versions/*/{TEMP_PREFIX}*/runs/*{INDEX_SUFFIX}"), seconds=180)
    assert read_latest(str(root)) == first
    [killed] = [p.parent.name for p in root.glob(f"versions/*/{TEMP_PREFIX}*")]
    finished = sum(len(index.hashes) for index in finished_runs(str(root / "versions" / killed)))

    capsys.readouterr()
    refresh_image_dataset.run(_args(images, root))
    assert f"refresh {root}: resuming version {killed}, which a killed refresh of these inputs left" in (
        capsys.readouterr().out)
    assert read_latest(str(root)) == killed
    metadata = load_manifest(resolve_dataset_dir(str(root))).metadata
    assert metadata["resumed"]["reused_records"] == finished > 0
    assert metadata[COMMIT_KEY]["base_version"] == first
    assert metadata[COMMIT_KEY]["kept_records"] == 300  # an append: the first version's records stay where they are

    refresh_image_dataset.run(_args(images, clean_root))
    assert "resumed" not in load_manifest(resolve_dataset_dir(str(clean_root))).metadata
    assert _latest_shards(root) == _latest_shards(clean_root)

"""Fixtures for the refresh tests: a private copy of the tiny image folder per test, and one
real version built once per session that tests copy to lay out roots with chosen version ids."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures_gcs import FakeGcs, fake_gcs, gcs_bucket, tiny_images  # noqa: F401  (pytest fixtures)

from pipelines import refresh_image_dataset


@pytest.fixture()
def images(tmp_path: Path, tiny_images: str) -> str:
    """A copy of the 30 tiny images that the test may change."""
    return str(shutil.copytree(tiny_images, tmp_path / "images"))


@pytest.fixture(params=["local", "gs"])
def input_and_root(request: pytest.FixtureRequest, images: str, tmp_path: Path) -> tuple[str, str]:
    """(image folder, dataset root): both local, or both on gs:// (the emulator; a copy of the images)."""
    if request.param == "local":
        return images, str(tmp_path / "root")
    fake_gcs: FakeGcs = request.getfixturevalue("fake_gcs")
    bucket = request.getfixturevalue("gcs_bucket")
    fake_gcs.upload_tree(images, f"{bucket}/raw/images")
    return f"{bucket}/raw/images", f"{bucket}/datasets/images"


@pytest.fixture(scope="session")
def built_version(tmp_path_factory: pytest.TempPathFactory, tiny_images: str) -> Path:
    """The directory of one complete version (manifest + shards) built by the refresh job."""
    root = tmp_path_factory.mktemp("built-root")
    plan = refresh_image_dataset.run(["--input", tiny_images, "--dataset_root", str(root)])
    return Path(plan.version_dir)

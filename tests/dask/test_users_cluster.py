"""A Dask cluster the user started on this machine takes local paths without an option: its workers show
they see them (``beam_tfrecord.engine.dask_probe``), and the probe leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

from dask_fixtures import DASK_RUNNER
from fixtures_gcs import tiny_images  # noqa: F401  (a pytest fixture)
from statistics_checks import assert_statistics_match_records

from beam_tfrecord import load_manifest
from beam_tfrecord.engine.dask_probe import TOKEN_PREFIX, unseen_paths
from pipelines import build_image_dataset


def test_a_users_local_cluster_builds_from_and_to_local_paths(dask_address: str, tiny_images: str,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "out"
    build_image_dataset.run([f"--input={tiny_images}", f"--output={out}", "--target_shard_bytes=4000",
                             f"--runner={DASK_RUNNER}", f"--dask_client_address={dask_address}"])
    assert load_manifest(str(out)).num_written == 30
    assert_statistics_match_records(str(out))  # statistics.pb from the Dask workers' shard writers
    assert not [name for name in os.listdir(tmp_path) if name.startswith(TOKEN_PREFIX)]


def test_a_worker_reports_each_path_it_sees_otherwise(tmp_path: Path) -> None:
    here, token = tmp_path / "here", tmp_path / f"{TOKEN_PREFIX}x"
    here.mkdir()
    token.write_text("another cluster's token", encoding="ascii")
    assert unseen_paths([(str(here), True), (str(tmp_path / "nowhere"), False)], [(str(token), "other")]) == [
        str(tmp_path)]
    assert unseen_paths([(str(here), False)], [(str(tmp_path / "missing-token"), "x")]) == [str(here), str(tmp_path)]

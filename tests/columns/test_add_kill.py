"""Crash safety of ``add-features``: SIGKILLed at moments spread over its writing window, LATEST names the base (or,
past the move, the complete new version), nothing half-written is visible (a version with column files but no
manifest is no version), and the add run again publishes records equal to a native build's. Local paths.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from beam_tfrecord import storage
from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.versions.refresh import list_versions
from tests.columns.column_data import QUIET, build_root, columns, joined_records, write_parquet
from tests.versions.test_compact_kill import run_killed


def _command(root: str, features: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.add_features", "--dataset_root", root, "--features", features,
            "--key_column", "id", *QUIET, "--runner=DirectRunner", "--direct_running_mode=in_memory"]


def _run(root: str, features: str, delay_seconds: float | None) -> tuple[bool, float]:
    return run_killed(_command(root, features), root, delay_seconds)


def _check_root(root: str, base: str) -> None:
    """LATEST names the base or a complete version whose every listed file is there with its checksum."""
    latest = read_latest(root)
    assert latest in list_versions(root).complete
    for version_id in list_versions(root).complete:
        manifest = load_manifest(version_dir(root, version_id))
        for shard in manifest.shards:
            for column in shard.columns:
                path = storage.join(version_dir(root, column.stored_in or version_id), column.filename)
                assert storage.crc32c_and_size(path) == (column.crc32c, column.num_bytes)
    assert latest == base or load_manifest(root).column_features() == {"emb"}


@pytest.mark.slow
def test_sigkill_during_an_add_leaves_latest_unchanged_then_the_add_runs_again(tmp_path):
    data = columns()
    root = str(tmp_path / "root")
    base = build_root(write_parquet(tmp_path / "base.parquet", {k: v for k, v in data.items() if k != "emb"}), root)
    features = write_parquet(tmp_path / "emb.parquet", {"id": data["id"], "emb": data["emb"]})
    native = str(tmp_path / "native")
    build_root(write_parquet(tmp_path / "native.parquet", data), native)
    pristine = str(shutil.copytree(root, tmp_path / "pristine"))
    _, window = _run(root, features, None)  # uninterrupted: how long the writing takes
    assert joined_records(root) == joined_records(native)
    before_the_move = 0
    for fraction in (0.0, 0.5):
        shutil.rmtree(root)
        shutil.copytree(pristine, root)
        killed, _ = _run(root, features, window * fraction)
        _check_root(root, base)
        if read_latest(root) == base:  # killed before the move (else the add is published: nothing to run again)
            before_the_move += 1
            _run(root, features, None)  # the lease of the killed job is stale: the add runs again
        assert joined_records(root) == joined_records(native)
    assert before_the_move >= 1  # at least one kill came while column files were being written

"""Crash safety of ``compact``: SIGKILL it at random moments of its writing window, check the root, run it again.

After every kill LATEST names a complete version that verifies (the appended one, or the compacted one if the kill
came after LATEST moved), every version that looks complete verifies, and nothing the appended version lists is
gone. The last run's version holds a full build's very shards. Two jobs on one root: the second is refused by the
root's lease. Local paths (the kill moments as in ``test_refresh_kill.py``; ``BT_KILL_SEED`` varies them).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from beam_tfrecord import storage
from beam_tfrecord.dataset import open_dataset, read_latest, version_dir
from beam_tfrecord.errors import OutputLockedError
from beam_tfrecord.job import lease
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.refresh import list_versions
from pipelines import build_image_dataset, compact, refresh_image_dataset
from tests.versions.test_incremental import LAYOUT, RUNNER, _change_inputs
from tests.versions.test_refresh_kill import MAX_RUN_SECONDS, _versions, _wait_for_new_version

KEEP = ["--keep_versions=10", "--min_version_age=0"]


def _compact_command(root: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.compact", "--dataset_root", root, *KEEP, *RUNNER]


def _run(root: str, delay_seconds: float | None) -> tuple[bool, float]:
    """Runs compact in its own process group; SIGKILLs it ``delay_seconds`` after its version's folder appears.
    Returns (killed, seconds from that moment to the end)."""
    return run_killed(_compact_command(root), root, delay_seconds)


def run_killed(command: list[str], root: str, delay_seconds: float | None) -> tuple[bool, float]:
    """Runs a job writing a version of ``root`` in its own process group; SIGKILLs it ``delay_seconds`` after its
    version's folder appears (never when None). Returns (killed, seconds from that moment to the end)."""
    before = _versions(root)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    started = _wait_for_new_version(process, root, before) or time.monotonic()
    try:
        process.wait(timeout=delay_seconds if delay_seconds is not None else MAX_RUN_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        return True, time.monotonic() - started
    assert process.returncode == 0, process.stderr.read()[-3000:] if process.stderr else ""
    return False, time.monotonic() - started


def _check_root(root: str, appended: str, context: str) -> None:
    latest = read_latest(root)
    assert latest in list_versions(root).complete, context
    for version_id in list_versions(root).complete:  # what looks complete is complete
        verify_dataset(version_dir(root, version_id))
    verify_dataset(version_dir(root, appended))  # the version compacted keeps every file it lists


def _undo(root: str, appended: str) -> None:
    """LATEST back to the appended version; what a compaction left after it goes."""
    storage.write_bytes_atomic(f"{root}/LATEST", f"{appended}\n".encode())
    for version_id in _versions(root):
        if version_id > appended:
            shutil.rmtree(version_dir(root, version_id))


@pytest.mark.slow
def test_sigkill_during_compact_then_rerun(images: str, tmp_path) -> None:
    root = str(tmp_path / "root")
    refresh = ["--input", images, "--dataset_root", root, *LAYOUT, *RUNNER, *KEEP]
    refresh_image_dataset.run(refresh)
    _change_inputs(images)
    appended = refresh_image_dataset.run(refresh).version_id
    assert not open_dataset(root).manifest.self_contained
    _, window = _run(root, None)
    _undo(root, appended)
    seed = int(os.environ.get("BT_KILL_SEED", "20261128"))
    delays = [round(random.Random(seed + n).uniform(0.0, window), 3) for n in range(2)]
    killed = []
    for delay in delays:
        was_killed, _ = _run(root, delay)
        killed.append(was_killed)
        context = f"seed {seed}, delays {delays} in a {window:.2f} s window, killed {killed}"
        _check_root(root, appended, context)
        _undo(root, appended)
    if not any(killed):  # every run ended before its kill: one more, early in the window
        killed.append(_run(root, window / 4)[0])
        _check_root(root, appended, f"seed {seed}, one more kill at {window / 4:.2f} s, killed {killed}")
        _undo(root, appended)

    compacted = compact.run(["--dataset_root", root, *KEEP, *RUNNER])
    full = build_image_dataset.run(["--input", images, "--output", str(tmp_path / "full"), *LAYOUT, *RUNNER])
    assert read_latest(root) == compacted
    assert [(s.filename, s.crc32c) for s in open_dataset(root).manifest.shards] == [
        (s.filename, s.crc32c) for s in full.shards]


def test_compact_is_refused_while_another_job_holds_the_root(images: str, tmp_path) -> None:
    root = str(tmp_path / "root")
    refresh_image_dataset.run(["--input", images, "--dataset_root", root, *LAYOUT, *RUNNER, *KEEP])
    with lease.held(root, run_id="a-refresh"):
        with pytest.raises(OutputLockedError, match="a-refresh"):
            compact.run(["--dataset_root", root, *KEEP, *RUNNER, "--force"])

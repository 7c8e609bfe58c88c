"""Crash safety: SIGKILL the refresh job at random moments, check the root, then re-run.

Most of a tiny job's wall time is interpreter start-up, so the kill moments are drawn within the
*writing window*: from the moment the new version's directory appears (the pipeline started
writing) to the process's end as measured on an uninterrupted run. That covers spilling runs,
writing shards, publishing the manifest, moving LATEST and retention. After every kill: LATEST
names a complete version that verifies byte for byte, and every version that looks complete
(has a manifest) verifies too; unfinished versions have no manifest. A final re-run publishes the
newest inputs and retention removes what the killed runs left. Runs on local paths (gs:// is
``test_incremental.py``'s kill test; ``_versions`` lists either).
The delays come from a seeded RNG (``BT_KILL_SEED`` varies it) and are reported on failure.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from beam_tfrecord import storage
from beam_tfrecord.dataset import LATEST_FILENAME, load_manifest, read_latest, resolve_dataset_dir, version_dir
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.refresh import fingerprint_inputs, list_versions, stored_fingerprint

NUM_KILLS = 3
MAX_RUN_SECONDS = 120.0
POLL_SECONDS = 0.01


def _command(images: str, root: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.refresh_image_dataset", "--input", images, "--dataset_root", root,
            "--keep_versions=2", "--min_version_age=0", "--target_shard_bytes=4000", "--runner=DirectRunner",
            "--direct_running_mode=in_memory"]


def _versions(root: str) -> set[str]:
    """Version ids under root, safe to call while a job writes (a local glob would stat vanishing files)."""
    if not root.startswith("gs://"):
        versions = os.path.join(root, "versions")
        return set(os.listdir(versions)) if os.path.isdir(versions) else set()
    listing = list_versions(root)  # one GCS list call: no per-file stat
    return set(listing.complete) | set(listing.incomplete)


def _wait_for_new_version(process: subprocess.Popen, root: str, before: set[str]) -> float | None:
    """Polls until a new version appears; returns that moment, or None if the job ended first."""
    deadline = time.monotonic() + MAX_RUN_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        if _versions(root) - before:
            return time.monotonic()
        time.sleep(POLL_SECONDS)
    return None


def _run_to_end(images: str, root: str) -> float:
    """Runs the job uninterrupted; returns the length of its writing window in seconds."""
    before = _versions(root)
    process = subprocess.Popen(_command(images, root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = _wait_for_new_version(process, root, before)
    _, stderr = process.communicate(timeout=MAX_RUN_SECONDS)
    assert process.returncode == 0, stderr[-3000:]
    return time.monotonic() - started if started is not None else 0.0


def _run_and_kill(images: str, root: str, delay_seconds: float) -> int | None:
    """Starts the job in its own process group and SIGKILLs the group ``delay_seconds`` after it
    starts writing a new version. Returns None when killed, else the exit code of a job that ended first."""
    before = _versions(root)
    process = subprocess.Popen(_command(images, root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        if _wait_for_new_version(process, root, before) is None:
            return process.wait(timeout=MAX_RUN_SECONDS)
        return process.wait(timeout=delay_seconds)  # finished before the kill
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        return None


def _input_files(images: str) -> list[str]:
    return [path for path, _ in storage.list_files(images.rstrip("/") + "/*/*")]


def _rewrite(path: str) -> None:
    """New raw data lands: the same bytes written again (a new mtime / GCS generation)."""
    data = storage.read_bytes(path)
    with storage.open_write(path) as handle:
        handle.write(data)


def _assert_consistent(root: str, context: str) -> None:
    if read_latest(root) is not None:  # raises LatestPointerError on a torn or garbage pointer
        assert verify_dataset(resolve_dataset_dir(root)).num_records > 0, context
    for version_id in list_versions(root).complete:  # anything that looks complete must be complete
        verify_dataset(version_dir(root, version_id))


# Local only: the kills on gs:// are test_incremental.py's test_sigkill_during_incremental_refresh_then_rerun[gs]
# (what looks complete is complete after each, and the re-run leaves no unfinished version).
@pytest.mark.slow
@pytest.mark.parametrize("input_and_root", ["local"], indirect=True)
def test_sigkill_at_random_moments_then_rerun(input_and_root: tuple[str, str]) -> None:
    images, root = input_and_root
    window_seconds = _run_to_end(images, root)  # version 1: an existing LATEST the kills must not damage
    first = read_latest(root)
    files = _input_files(images)
    storage.delete_if_exists([files[-1]])
    seed = int(os.environ.get("BT_KILL_SEED", "20261122"))
    rng = random.Random(seed)
    # One moment in each third of the window (early, mid, late), random within it: three kills span the phases
    # that five drawn over the whole window did.
    delays = [round(rng.uniform(n, n + 1) * window_seconds / NUM_KILLS, 3) for n in range(NUM_KILLS)]
    outcomes: list[int | None] = []
    states: list[str] = []
    context = f"seed {seed}, delays {delays}"
    for attempt, delay in enumerate(delays, start=1):
        _rewrite(files[attempt])  # new raw data for every attempt: each run builds a version
        outcomes.append(_run_and_kill(images, root, delay))
        listing = list_versions(root)
        states.append(f"complete={len(listing.complete)} unfinished={len(listing.incomplete)} "
                      f"latest_moved={read_latest(root) != first}")
        context = f"seed {seed}, delays {delays}, outcomes {outcomes} (None = killed), states {states}"
        _assert_consistent(root, context)
        assert read_latest(root) is not None, context

    _run_to_end(images, root)  # the re-run finishes the job: builds, or adopts a finished version
    manifest = load_manifest(root)
    assert read_latest(root) != first and manifest.num_written == 29, context
    assert stored_fingerprint(manifest) == fingerprint_inputs([images.rstrip("/") + "/*/*"]), context
    assert verify_dataset(resolve_dataset_dir(root)).num_records == 29, context
    listing = list_versions(root)
    assert read_latest(root) in listing.complete and len(listing.complete) <= 2, context  # retention
    assert listing.incomplete == (), f"abandoned versions left behind: {listing.incomplete}; {context}"
    assert storage.list_files(storage.join(root, LATEST_FILENAME) + ".tmp-*") == [], context
    assert outcomes.count(None) >= 1, f"no run was killed: {context} vs a {window_seconds:.2f} s window"
    print(context)

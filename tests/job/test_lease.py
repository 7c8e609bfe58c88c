"""One writer per output: the lease is taken atomically, refuses a second job by name, and is taken
over when its holder is dead or it is older than the staleness limit, or with --break_lock."""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fixtures_gcs import tiny_images  # noqa: F401  (pytest fixture)

from beam_tfrecord import storage
from beam_tfrecord.interop import INTEROP_FILENAMES
from beam_tfrecord.interop.tfds import tfds_files
from beam_tfrecord.job import lease
from beam_tfrecord.job.lease import LeaseHolder, OutputLockedError
from pipelines import build_image_dataset


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _plant(output: Path, **fields) -> None:
    holder = {"run_id": "other", "host": "elsewhere", "pid": 4242,
              "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **fields}
    output.mkdir(parents=True, exist_ok=True)
    (output / lease.LEASE_FILENAME).write_text(json.dumps(holder))


def test_a_second_job_is_refused_naming_the_holder_until_the_first_releases(tmp_path):
    out = str(tmp_path / "ds")
    first = lease.acquire(out, run_id="run-a")
    with pytest.raises(OutputLockedError, match=rf"{re.escape(out)} is being written by another job: run run-a "
                                                rf"\(pid {os.getpid()} on .+\), started 20"):
        lease.acquire(out, run_id="run-b")
    first.release()
    lease.acquire(out, run_id="run-b").release()
    assert not os.path.exists(lease.lease_path(out))


@pytest.mark.parametrize("fields, taken", [
    (dict(host=os.uname().nodename, pid=None), True),  # this host, process gone: a crashed job
    (dict(started_at="2026-01-01T00:00:00+00:00"), True),  # older than 24 hours
    (dict(), False),  # another host, recent: alive as far as anyone can tell
    (dict(started_at="not a time"), False),
], ids=["dead-process", "older-than-24h", "other-host-recent", "unknown-start"])
def test_the_staleness_rule(tmp_path, fields, taken):
    if fields.get("pid", 1) is None:
        fields["pid"] = _dead_pid()
    _plant(tmp_path / "ds", **fields)
    if taken:
        held = lease.acquire(str(tmp_path / "ds"), run_id="mine")
        assert held.holder.run_id == "mine"
    else:
        with pytest.raises(OutputLockedError, match="run other"):
            lease.acquire(str(tmp_path / "ds"), run_id="mine")
        assert lease.acquire(str(tmp_path / "ds"), run_id="mine", break_lock=True).holder.run_id == "mine"


def test_release_never_removes_a_lease_another_job_took_over(tmp_path):
    out = tmp_path / "ds"
    mine = lease.acquire(str(out), run_id="mine")
    _plant(out)  # another job broke the lock and holds it now
    mine.release()
    assert LeaseHolder.from_bytes((out / lease.LEASE_FILENAME).read_bytes()).run_id == "other"


def _try(path: str, run_id: str) -> bool:
    try:
        lease.acquire(path, run_id=run_id)
    except OutputLockedError:
        return False
    return True


def test_of_eight_processes_racing_for_one_output_exactly_one_wins(tmp_path):
    with concurrent.futures.ProcessPoolExecutor(8) as pool:
        won = list(pool.map(_try, [str(tmp_path / "ds")] * 8, [f"r{i}" for i in range(8)]))
    assert sum(won) == 1


def test_a_build_into_an_output_another_job_holds_fails_at_once_and_writes_nothing(tiny_images, tmp_path):
    out = tmp_path / "ds"
    _plant(out)
    argv = ["--input", tiny_images, "--output", str(out)]
    with pytest.raises(OutputLockedError, match="run other"):
        build_image_dataset.run(argv)
    assert sorted(os.listdir(out)) == [lease.LEASE_FILENAME]
    manifest = build_image_dataset.run([*argv, "--break_lock"])
    assert manifest.num_written == 30 and sorted(os.listdir(out)) == sorted(
        [s.filename for s in manifest.shards] + ["manifest.json", *tfds_files(manifest), *INTEROP_FILENAMES,
                                                 *filter(None, [manifest.statistics])])


def test_the_command_prints_the_holder_and_exits_1(tiny_images, tmp_path):
    out = tmp_path / "ds"
    _plant(out)
    done = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", tiny_images, "--output",
                           str(out)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "OutputLockedError" in done.stderr and "run other (pid 4242 on elsewhere)" in done.stderr


def test_output_locked_error_lives_in_errors_and_is_still_importable_from_lease():
    from beam_tfrecord import errors

    assert OutputLockedError is errors.OutputLockedError and issubclass(OutputLockedError, errors.BeamTFRecordError)


def test_a_local_create_if_absent_is_never_seen_empty_or_half_written(tmp_path):
    """The file appears whole (written aside, then linked): a job killed while taking a lease leaves none, never an
    empty one that reads as held by nobody (never stale). Watched from another thread while 32 MB are created."""
    path, data = str(tmp_path / "lease"), b"x" * (32 << 20)
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                seen.add(os.path.getsize(path))
            except FileNotFoundError:
                pass
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert storage.create_if_absent(path, data)
    finally:
        done.set()
        watcher.join()
    assert seen <= {len(data)} and not storage.create_if_absent(path, b"other")
    assert sorted(os.listdir(tmp_path)) == ["lease"]  # no file left aside

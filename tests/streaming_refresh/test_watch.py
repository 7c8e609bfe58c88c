"""Continuous refresh (``refresh --watch``) of a local image folder where files arrive in 3 batches, with the job
SIGKILLed between batches and during a commit, restarted each time, and stopped by SIGTERM at the end; a
follower (``read_numpy(follow=True)``) started before the first batch reads along.

Checks: LATEST ends with every input exactly once; a batch landing under a running watch is visible within
``--triggering_frequency`` + 10 s; the follower yields every record exactly once; SIGTERM during a commit lets it
finish, then exits 0 with its line. Each batch is a new class folder (a new label: a full build each time).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import BeamTFRecordError
from beam_tfrecord.reader import read_numpy
from pipelines.make_sample_images import CLASSES, write_sample_images

FREQUENCY_SECONDS = 2.0
VISIBLE_WITHIN_SECONDS = FREQUENCY_SECONDS + 10
PER_BATCH = 4
STARTUP_TIMEOUT_SECONDS = 90.0


def _watch(images: str, root: str, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipelines.refresh_image_dataset", "--input", images, "--dataset_root", root,
               "--watch", f"--triggering_frequency={FREQUENCY_SECONDS}", "--keep_versions=3", "--min_version_age=0",
               "--target_shard_bytes=4000", "--runner=DirectRunner", "--direct_running_mode=in_memory"]
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _land(batches: Path, images: Path, kind: str) -> float:
    """Moves one batch (a class folder, written beforehand) into the input folder in one rename."""
    os.rename(batches / kind, images / kind)
    return time.monotonic()


def _published(root: str) -> int:
    try:
        return load_manifest(root).num_written
    except BeamTFRecordError:  # nothing published yet
        return 0


def _wait(condition, what: str, timeout: float = STARTUP_TIMEOUT_SECONDS) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@pytest.fixture()
def batches(tmp_path: Path) -> Path:
    """Three batches of tiny images, one class folder each, beside (not in) the input folder."""
    write_sample_images(str(tmp_path / "batches"), per_class=PER_BATCH, size=16)
    return tmp_path / "batches"


def test_watch_killed_and_restarted_publishes_every_input_once_and_a_follower_reads_each(batches, tmp_path):
    images, root, log = tmp_path / "images", str(tmp_path / "root"), tmp_path / "watch.log"
    images.mkdir()
    expected = {path.read_bytes() for path in batches.rglob("*.jpg")}
    followed: list[bytes] = []
    follower = read_numpy(root, follow=True, follow_poll_seconds=0.2)
    reading = threading.Thread(target=lambda: followed.extend(bytes(e["image"]) for e in follower), daemon=True)
    reading.start()

    first = _watch(str(images), root, log)
    _wait(lambda: b"no input files yet" in log.read_bytes(), "the watch's first interval")
    landed = _land(batches, images, CLASSES[0])
    seen = _wait(lambda: _published(root) == PER_BATCH, "batch 1")
    print(f"batch 1 visible {seen - landed:.1f} s after it landed")
    assert seen - landed <= VISIBLE_WITHIN_SECONDS
    _kill(first)  # between intervals or in an interval with nothing new

    versions = Path(root, "versions")
    before = set(os.listdir(versions))
    _land(batches, images, CLASSES[1])
    second = _watch(str(images), root, log)
    _wait(lambda: set(os.listdir(versions)) - before, "the version of batch 2 to be started")
    _kill(second)  # during the commit of batch 2

    third = _watch(str(images), root, log)
    _wait(lambda: _published(root) == 2 * PER_BATCH, "batch 2 after the restart")
    before = set(os.listdir(versions))
    landed = _land(batches, images, CLASSES[2])
    _wait(lambda: set(os.listdir(versions)) - before, "the version of batch 3 to be started")
    third.send_signal(signal.SIGTERM)  # during the commit of batch 3: it is finished, then the process ends
    seen = _wait(lambda: _published(root) == 3 * PER_BATCH, "batch 3")
    print(f"batch 3 visible {seen - landed:.1f} s after it landed")
    assert seen - landed <= VISIBLE_WITHIN_SECONDS
    assert third.wait(timeout=60) == 0
    assert b"stopped cleanly (SIGTERM received)" in log.read_bytes()

    latest = [bytes(example["image"]) for example in read_numpy(root)]
    assert len(latest) == len(expected) and set(latest) == expected  # every input exactly once
    _wait(lambda: len(followed) >= len(expected), "the follower", timeout=30)
    follower.close()
    reading.join(timeout=10)
    assert not reading.is_alive()
    assert len(followed) == len(expected) and set(followed) == expected


def test_watch_flags_are_checked_before_any_work(tmp_path):
    from pipelines import refresh_image_dataset

    base = ["--input", str(tmp_path), "--dataset_root", str(tmp_path / "root")]
    cases = {("--watch",): "--watch needs --triggering_frequency SECONDS (> 0): how often to refresh",
             ("--watch", "--triggering_frequency=0"): "--triggering_frequency must be a number of seconds > 0, got 0.0",
             ("--triggering_frequency=5",): "--triggering_frequency is an option of --watch: add --watch, or leave "
                                            "it out",
             ("--watch", "--triggering_frequency=5", "--max_intervals=0"):
                 "--max_intervals must be an integer >= 1, got 0",
             ("--watch", "--triggering_frequency=5", "--force"):
                 "--force cannot be combined with --watch: every interval would rebuild every split",
             ("--watch", "--triggering_frequency=900"):
                 "--watch_lease_ttl must be longer than --triggering_frequency (900 s), got 10m"}
    for flags, message in cases.items():
        with pytest.raises(BeamTFRecordError) as caught:
            refresh_image_dataset.run([*base, *flags])
        assert str(caught.value) == message
    assert not (tmp_path / "root").exists()


def test_the_watch_deployment_passes_options_the_refresh_job_takes():
    import yaml

    from pipelines import refresh_image_dataset
    from pipelines.watch import watch_plan

    deployment = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "schedule" / "k8s-deployment-watch.yaml")
                                .read_text())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["beam-tfrecord", "refresh"]
    options = refresh_image_dataset.COMMAND.parse(container["args"])  # exits 2 on an option the job does not take
    plan = watch_plan(options, force=False)
    assert plan is not None and plan.schedule.triggering_frequency_seconds == 60
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"


def test_a_watch_of_a_bucket_appends_each_batch_once_and_a_follower_reads_each(fake_gcs, gcs_bucket, tmp_path):
    """On gs:// (the emulator), in this process: the watch of --max_intervals 4 every 1 s, a second batch uploaded
    into the existing classes once the first is published (an append), a follower reading along."""
    from pipelines import refresh_image_dataset

    write_sample_images(str(tmp_path / "all"), per_class=2, size=16)
    first, second = tmp_path / "first", tmp_path / "second"
    for kind in CLASSES:  # image 0 of each class first, image 1 of each in the second batch
        for number, batch in enumerate((first, second)):
            (batch / kind).mkdir(parents=True)
            os.rename(tmp_path / "all" / kind / f"{number:04d}.jpg", batch / kind / f"{number:04d}.jpg")
    images, root = f"{gcs_bucket}/raw/images", f"{gcs_bucket}/datasets/images"
    fake_gcs.upload_tree(str(first), images)
    follower = read_numpy(root, follow=True, follow_poll_seconds=0.2)
    followed: list[bytes] = []
    reading = threading.Thread(target=lambda: followed.extend(bytes(e["image"]) for e in follower), daemon=True)
    reading.start()
    uploading = threading.Thread(target=lambda: (_wait(lambda: _published(root) == len(CLASSES), "batch 1"),
                                                 fake_gcs.upload_tree(str(second), images)), daemon=True)
    uploading.start()
    refresh_image_dataset.run(["--input", images, "--dataset_root", root, "--watch", "--triggering_frequency=1",
                               "--max_intervals=4", "--min_version_age=0", "--runner=DirectRunner",
                               "--direct_running_mode=in_memory"])
    uploading.join(timeout=30)
    expected = {path.read_bytes() for path in tmp_path.glob("*/*/*.jpg") if "all" not in path.parts}
    manifest = load_manifest(root)
    assert manifest.metadata["commit"]["base_version"] is not None  # the second batch was an append
    latest = [bytes(example["image"]) for example in read_numpy(root)]
    assert len(latest) == len(expected) and set(latest) == expected
    _wait(lambda: len(followed) >= len(expected), "the follower", timeout=30)
    follower.close()
    reading.join(timeout=10)
    assert len(followed) == len(expected) and set(followed) == expected


def test_a_lease_left_on_another_host_blocks_a_restart_for_at_most_the_watch_lease_ttl(tmp_path):
    """A holder this host cannot check (another host, or the same PID in a new container) is taken over once
    older than --watch_lease_ttl, not after the scheduled refresh's 24 h."""
    import datetime

    from beam_tfrecord.errors import OutputLockedError
    from beam_tfrecord.job.lease import LEASE_FILENAME, LeaseHolder
    from pipelines import refresh_image_dataset

    images, root = tmp_path / "images", tmp_path / "root"
    images.mkdir()
    root.mkdir()

    def leave_lease(minutes_ago: int) -> None:
        started = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=minutes_ago)
        holder = LeaseHolder("killed-run", "another-host", 4242, started.isoformat(timespec="seconds"))
        (root / LEASE_FILENAME).write_bytes(holder.to_bytes())

    argv = ["--input", str(images), "--dataset_root", str(root), "--watch", "--triggering_frequency=1",
            "--max_intervals=1", "--watch_lease_ttl=10m"]
    leave_lease(minutes_ago=1)
    with pytest.raises(OutputLockedError, match="run killed-run"):
        refresh_image_dataset.run(argv)
    leave_lease(minutes_ago=11)
    refresh_image_dataset.run(argv)  # takes the stale lease over, finds no input yet, releases it
    assert not (root / LEASE_FILENAME).exists()

"""SIGKILL during a build whose encoding runs in a pool of processes: nothing looks published unless
it is (and then it is complete), no process is left behind, and a re-run writes the same bytes.

The job runs as a command (``python -m pipelines.build_image_dataset``) with two encoding
processes started at once, on the shared 300-image folder resized (so encoding takes a while).
Kill moments are drawn from seeded random delays after the pool has started; a case whose job
finished before its kill would prove nothing and fails.
"""

import os
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest

from beam_tfrecord import load_manifest, verify_dataset
from pipelines import build_image_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _args(images: str, out: str) -> list[str]:
    return ["--input", images, "--output", out, "--resize", "48x48", "--encode_processes", "2",
            "--target_shard_bytes", "60000", "--progress", "none"]


def _shard_bytes(out: str) -> dict[str, bytes]:
    manifest = load_manifest(out)
    return {s.filename: open(os.path.join(out, s.filename), "rb").read() for s in manifest.shards}


@pytest.fixture(scope="module")
def reference(sample_images, tmp_path_factory) -> dict[str, bytes]:
    out = str(tmp_path_factory.mktemp("reference") / "dataset")
    build_image_dataset.run(_args(sample_images, out))
    return _shard_bytes(out)


def _pool_processes(job: psutil.Process) -> list[psutil.Process]:
    try:
        return [p for p in job.children(recursive=True) if "beam_tfrecord.beam.encode_pool" in " ".join(p.cmdline())]
    except psutil.Error:
        return []


def _start_job(images: str, out: str) -> tuple[psutil.Popen, list[psutil.Process]]:
    """Starts the job; returns it once its encoding pool runs."""
    job = psutil.Popen([sys.executable, "-m", "pipelines.build_image_dataset", *_args(images, out)], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (pool := _pool_processes(job)):
        assert job.poll() is None, f"the job ended before its pool started: {job.communicate()[1][-2000:]!r}"
        assert time.monotonic() < deadline, "no encoding pool started"
        time.sleep(0.05)
    return job, pool


def _assert_only_the_finished_looks_published_and_rerun_is_identical(out: str, images: str, pool: list[psutil.Process],
                                                      reference: dict[str, bytes]) -> None:
    """What looks finished is finished: without a manifest, nothing a reader or TFDS would open
    (shards moved into place just before the manifest are not a dataset); with one (the kill came
    after the publish point, while the job wrote TFDS's files or cleaned up), the reference bytes."""
    _, alive = psutil.wait_procs(pool, timeout=10)
    assert not alive, f"pool processes outlived the job: {alive}"
    visible = os.listdir(out) if os.path.isdir(out) else []
    if "manifest.json" in visible:
        verify_dataset(out)
        assert _shard_bytes(out) == reference
    else:
        assert "dataset_info.json" not in visible, visible
    build_image_dataset.run(_args(images, out))  # the dead job's lease is taken over (its process is gone)
    assert _shard_bytes(out) == reference


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_of_the_job_at_a_random_moment(seed, sample_images, reference, tmp_path):
    out = str(tmp_path / "dataset")
    job, pool = _start_job(sample_images, out)
    time.sleep(random.Random(seed).uniform(0.0, 1.5))
    assert job.poll() is None, "the job finished before it was killed: nothing was tested"
    job.send_signal(signal.SIGKILL)
    job.communicate()
    _assert_only_the_finished_looks_published_and_rerun_is_identical(out, sample_images, pool, reference)


def test_sigkill_of_a_pool_process_fails_the_job(sample_images, reference, tmp_path):
    out = str(tmp_path / "dataset")
    job, pool = _start_job(sample_images, out)
    pool[0].send_signal(signal.SIGKILL)
    _, stderr = job.communicate(timeout=120)
    assert job.returncode != 0
    assert b"EncodePoolError" in stderr and b"exited (code -9)" in stderr
    _assert_only_the_finished_looks_published_and_rerun_is_identical(out, sample_images, pool, reference)

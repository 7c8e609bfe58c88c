"""SIGKILL during a build that runs in several processes: nothing looks published unless it is (and
then it is complete), no process is left behind, and a re-run writes the same bytes.

The job runs as a command (``python -m pipelines.build_image_dataset``, forked from a server that imported
Beam once: tests/docs/command_zygote.py) on the shared 300-image folder resized (so encoding takes a while),
in two ways: its default on the DirectRunner (one worker process per core; at least 2 here) and an encoding
pool of two processes inside one in-memory worker. Kill moments are drawn from seeded random fractions of the
time the same job takes, once those processes have started (timed once per mode, unkilled): a machine that runs
the job faster still has it killed mid-way; a case whose job finished before its kill would prove nothing and fails.
"""

import os
import random
import re
import signal
import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

import psutil
import pytest

from beam_tfrecord import load_manifest, verify_dataset
from beam_tfrecord.engine.local_engine import WORKER_MODULE
from pipelines import build_image_dataset
from pipelines.common import INTERRUPTED, INTERRUPTED_EXIT_CODE
from tests.docs.command_zygote import Job, serving

# What the job imports (its own module is run as ``__main__``), imported once by the server it is forked from.
PRELOAD = ("apache_beam", "apache_beam.runners.portability.fn_api_runner", "beam_tfrecord.engine.local_engine",
           "pipelines.common", "PIL.Image")


POOL, WORKERS = "encoding-pool", "runner-workers"
_MARK = {POOL: "beam_tfrecord.beam.encode_pool", WORKERS: WORKER_MODULE}  # the runner's workers: LocalBatchRunner's


def _args(images: str, out: str, mode: str | None = None) -> list[str]:
    """The job's arguments; without ``mode``, its own choice: one in-memory worker for this small input (the
    clean builds: the same bytes as the pool's or the workers', without their interpreters' start-up)."""
    processes = {None: [], POOL: ["--encode_processes", "2"],
                 WORKERS: ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]}[mode]
    return ["--input", images, "--output", out, "--resize", "48x48", *processes,
            "--target_shard_bytes", "60000", "--progress", "none"]


def _shard_bytes(out: str) -> dict[str, bytes]:
    manifest = load_manifest(out)
    return {s.filename: open(os.path.join(out, s.filename), "rb").read() for s in manifest.shards}


@pytest.fixture(scope="module")
def jobs() -> Iterator[str]:
    """The socket of the server the killed jobs are forked from."""
    with serving(PRELOAD) as socket_path:
        yield socket_path


@pytest.fixture(scope="module")
def reference(sample_images, tmp_path_factory) -> dict[str, bytes]:
    out = str(tmp_path_factory.mktemp("reference") / "dataset")
    build_image_dataset.run(_args(sample_images, out))
    return _shard_bytes(out)


def _helper_processes(job: psutil.Process, mode: str) -> list[psutil.Process]:
    """The job's encoding pool or runner workers: Beam's fresh interpreters, or workers forked by the
    job's fork server (a child of the job, itself a copy of the job: workers are its children)."""
    try:
        return [p for p in job.children(recursive=True) if _MARK[mode] in " ".join(p.cmdline())
                or (mode == WORKERS and p.cmdline() == job.cmdline() and p.ppid() != job.pid)]
    except psutil.Error:
        return []


def _connected(processes: list[psutil.Process]) -> bool:
    """Whether every Python process among ``processes`` holds a TCP connection (a runner worker
    that has reached the job's control service)."""
    try:
        python = [p for p in processes if "python" in p.cmdline()[0]]
        return bool(python) and all(any(c.status == psutil.CONN_ESTABLISHED for c in p.net_connections("tcp"))
                                    for p in python)
    except psutil.Error:
        return False


def _start_job(jobs: str, images: str, out: str, mode: str,
               stderr: BinaryIO) -> tuple[Job, psutil.Process, list[psutil.Process]]:
    """Starts the job; returns it once its encoding pool runs, or its runner workers are connected.

    A runner worker killed with its job before it has connected waits for the job's control service
    until gRPC gives up (about two minutes; it has been given no work, so it writes nothing): the
    kill moments here start once they are connected, when a dead job ends them at once.
    """
    job = Job(jobs, [sys.executable, "-m", "pipelines.build_image_dataset", *_args(images, out, mode)],
              stderr=stderr.fileno())
    process = psutil.Process(job.pid)
    deadline = time.monotonic() + 120
    while len(helpers := _helper_processes(process, mode)) < 2 or (mode == WORKERS and not _connected(helpers)):
        assert job.poll() is None, f"the job ended before its {mode} started: {_tail(stderr)!r}"
        assert time.monotonic() < deadline, f"no {mode} started"
        time.sleep(0.05)
    return job, process, helpers


def _tail(stderr: BinaryIO) -> bytes:
    with open(stderr.name, "rb") as written:
        return written.read()[-2000:]


def _assert_only_the_finished_looks_published_and_rerun_is_identical(out: str, images: str, pool: list[psutil.Process],
                                                      reference: dict[str, bytes]) -> None:
    """What looks finished is finished: without a manifest, nothing a reader or TFDS would open
    (shards moved into place just before the manifest are not a dataset); with one (the kill came
    after the publish point, while the job wrote TFDS's files or cleaned up), the reference bytes."""
    _, alive = psutil.wait_procs(pool, timeout=10)
    assert not alive, f"processes outlived the job: {alive}"
    visible = os.listdir(out) if os.path.isdir(out) else []
    if "manifest.json" in visible:
        verify_dataset(out)
        assert _shard_bytes(out) == reference
    else:
        assert "dataset_info.json" not in visible, visible
    build_image_dataset.run(_args(images, out))  # the dead job's lease is taken over (its process is gone)
    assert _shard_bytes(out) == reference


@pytest.fixture(scope="module")
def durations(jobs, sample_images, tmp_path_factory) -> dict[str, float]:
    """Seconds each mode's job runs once its processes have started, unkilled. The kill moments were fixed delays
    (0.36 s for the workers) until forked workers and a faster encoder let the job end before them on a quiet
    machine; a fraction of this time stays inside the job however fast it gets."""
    timed = {}
    for mode in (POOL, WORKERS):
        folder = tmp_path_factory.mktemp(f"timed-{mode}")
        with open(folder / "stderr.txt", "wb") as stderr:
            job, _, _ = _start_job(jobs, sample_images, str(folder / "dataset"), mode, stderr)
        started = time.monotonic()
        assert job.wait(timeout=300) == 0, _tail(stderr)
        timed[mode] = time.monotonic() - started
    return timed


# One moment per mode, a fraction of its job's time: late in the pool's encoding (seed 2: 0.48), early in the
# workers' (seed 3: 0.16). Under 0.5: the timed run may have been slowed by a load the killed one does not have.
@pytest.mark.parametrize("mode, seed", [(POOL, 2), (WORKERS, 3)])
def test_sigkill_of_the_job_at_a_random_moment(mode, seed, jobs, sample_images, reference, durations, tmp_path):
    out = str(tmp_path / "dataset")
    with open(tmp_path / "stderr.txt", "wb") as stderr:
        job, process, pool = _start_job(jobs, sample_images, out, mode, stderr)
    time.sleep(random.Random(seed).uniform(0.05, 0.5) * durations[mode])
    assert job.poll() is None, "the job finished before it was killed: nothing was tested"
    everything = _descendants(process) or pool  # workers, their launchers, a fork server: none may outlive the job
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    _assert_only_the_finished_looks_published_and_rerun_is_identical(out, sample_images, everything, reference)


def _descendants(job: psutil.Process) -> list[psutil.Process]:
    try:
        return job.children(recursive=True)
    except psutil.Error:
        return []


def test_sigkill_of_a_pool_process_fails_the_job(jobs, sample_images, reference, tmp_path):
    out = str(tmp_path / "dataset")
    with open(tmp_path / "stderr.txt", "wb") as written:
        job, _, pool = _start_job(jobs, sample_images, out, POOL, written)
    pool[0].send_signal(signal.SIGKILL)
    assert job.wait(timeout=120) != 0
    stderr = (tmp_path / "stderr.txt").read_bytes()
    assert b"EncodePoolError" in stderr and b"exited (code -9)" in stderr
    _assert_only_the_finished_looks_published_and_rerun_is_identical(out, sample_images, pool, reference)


# A worker SIGKILLed (the kernel's out-of-memory killer): Beam 2.77's engine waited for its answers for good, or
# failed after ~140 lines of tracebacks (engine/worker_handler.py). Ctrl-C, SIGINT to the job's process group as a
# terminal sends it: each process printed its KeyboardInterrupt traceback (72-120 lines for `beam-tfrecord build`).
@pytest.mark.parametrize("interrupt", ["a worker killed", "ctrl-c"])
def test_a_killed_worker_or_ctrl_c_ends_the_job_in_one_line(interrupt, jobs, sample_images, reference, tmp_path):
    out = str(tmp_path / "dataset")
    with open(tmp_path / "stderr.txt", "wb") as written:
        job, process, workers = _start_job(jobs, sample_images, out, WORKERS, written)
    everything = _descendants(process)
    prog = re.escape(build_image_dataset.COMMAND.prog)
    if interrupt == "ctrl-c":
        os.killpg(job.pid, signal.SIGINT)
        code, line = INTERRUPTED_EXIT_CODE, rf"{prog}: interrupted; {re.escape(INTERRUPTED)}"
    else:
        workers[0].send_signal(signal.SIGKILL)
        code, line = 1, (rf"{prog}: WorkerProcessLostError: local worker process worker_\d+ ended while the job still "
                         r"needed it: killed by SIGKILL \(exit code -9\), .*")
    assert job.wait(timeout=120) == code
    stderr = (tmp_path / "stderr.txt").read_text()
    assert re.fullmatch(line + "\n", stderr), stderr
    _assert_only_the_finished_looks_published_and_rerun_is_identical(out, sample_images, everything, reference)

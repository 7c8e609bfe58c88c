"""What the Dask tests share: the runner's name and records made on the workers (the cluster itself is the
session's ``dask_address`` fixture in tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.units import MiB

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
RECORD_BYTES = 256 * 1024
PER_ELEMENT = 8
# Workers capped low enough to pause: one holds ~220-300 MiB once Beam and the writer are imported; it pauses at 80%.
CAPPED_WORKER_MEMORY = 512 * MiB
SMALL_RECORD_BYTES = 3_000  # a 32x32x3 image's worth, as benchmarks/dask_volume.py writes
SMALL_PER_ELEMENT = 1_000


def incompressible_records(element: int) -> list[Sample]:
    """``PER_ELEMENT`` records of ``RECORD_BYTES`` random bytes, made on the worker (so the input is
    held nowhere by construction). Here rather than in a test module: a worker that unpickles it
    imports only this module, as a real job's worker imports only the job's code."""
    rng = np.random.default_rng(element)
    start = element * PER_ELEMENT
    return [Sample(f"r/{i:07d}", {"payload": rng.bytes(RECORD_BYTES), "index": i})
            for i in range(start, start + PER_ELEMENT)]


def small_records(element: int) -> list[Sample]:
    """``SMALL_PER_ELEMENT`` records of ``SMALL_RECORD_BYTES`` random bytes, made on the worker: many blocks
    ``malloc`` serves from its arenas, freed in a different order than made (what a writer's bundle does)."""
    rng = np.random.default_rng(element)
    start = element * SMALL_PER_ELEMENT
    return [Sample(f"s/{i:08d}", {"payload": rng.bytes(SMALL_RECORD_BYTES), "index": i})
            for i in range(start, start + SMALL_PER_ELEMENT)]


def kill_a_worker_mid_job(client: Any, job: Callable[[], None], *, settle_s: float) -> int:
    """Runs ``job`` in a thread and SIGKILLs the worker process of ``client``'s cluster that first runs a task,
    ``settle_s`` after; waits for the job and re-raises what it raised. Returns the killed worker's pid, which
    the caller checks is gone (its nanny started a new one)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job()
        except BaseException as err:  # re-raised in the caller's thread
            errors.append(err)

    pids = client.run(os.getpid)  # worker address -> pid
    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline and thread.is_alive():
        busy = [worker for worker, tasks in client.processing().items() if tasks]
        victim = busy[0] if busy else None
        time.sleep(0.05)
    assert victim is not None, "no task ever ran on a worker"
    time.sleep(settle_s)  # let the victim get well into its tasks
    assert thread.is_alive(), "the job finished before a worker could be killed"
    os.kill(pids[victim], signal.SIGKILL)
    thread.join(timeout=300)
    assert not thread.is_alive(), "the job did not finish after the worker was killed"
    if errors:
        raise errors[0]
    return pids[victim]

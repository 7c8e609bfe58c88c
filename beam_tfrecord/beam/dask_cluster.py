"""Beam's DaskRunner, run well: a local ``dask.distributed`` cluster when no scheduler is given, and a
wait that fails with a typed error when the cluster stalls instead of hanging forever.

Beam's DaskRunner connects to ``--dask_client_address``; without one it starts whatever
``distributed.Client()`` defaults to and never stops it. Jobs here instead start a
``LocalCluster`` of worker *processes* (``--dask_local_workers``, at least two: a real distributed
run, with pickling between processes and a scheduler that re-runs the tasks of a worker that
dies), each capped by ``--dask_memory_limit`` as real clusters' workers are, hand its address to
the runner, and close it when the job ends.

Dask's memory manager spills what it can measure at 60-70% of a worker's limit, pauses the worker
at 80% and restarts it at 95%. A paused worker whose memory is not spillable never resumes, and
the job waits forever; a worker restarted again and again ends in ``KilledWorker``.
``wait_for_dask`` watches the scheduler while it waits: no worker able to run for longer than
``--dask_stall_timeout_seconds``, or the engine giving up on killed workers, is a
``ClusterStalledError`` naming the memory limit and the options to change.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.beam.runners.table import uses_dask_runner
from beam_tfrecord.beam.worker_placement import scheduler_on_this_machine
from beam_tfrecord.errors import ClusterStalledError

DEFAULT_LOCAL_WORKERS = 2
DEFAULT_STALL_TIMEOUT_SECONDS = 300.0
_POLL_SECONDS = 1.0


class DaskClusterOptions(PipelineOptions):
    """The local cluster a DaskRunner job starts when it names no scheduler, and the stall guard."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dask_local_workers", type=int, default=DEFAULT_LOCAL_WORKERS,
                            help="DaskRunner without --dask_client_address: worker processes of the local cluster")
        parser.add_argument("--dask_memory_limit", default="auto",
                            help="DaskRunner without --dask_client_address: memory limit of each local worker "
                                 "('1GiB', '2.5GB'...; auto: the machine's memory shared among the workers)")
        parser.add_argument("--dask_stall_timeout_seconds", type=float, default=DEFAULT_STALL_TIMEOUT_SECONDS,
                            help="DaskRunner: fail with ClusterStalledError when no worker can run (all paused "
                                 "for memory, or restarting) for this long")


@contextlib.contextmanager
def local_cluster_for(options: PipelineOptions) -> Iterator[str | None]:
    """Starts a LocalCluster for a DaskRunner job that names no scheduler; yields its address.

    Yields None (and starts nothing) for other runners, or when ``--dask_client_address`` or
    ``--dask_scheduler_file`` is given.
    """
    if not uses_dask_runner(options):
        yield None
        return
    from apache_beam.runners.dask.dask_runner import DaskOptions  # needs the [dask] extra
    from distributed import LocalCluster

    dask_options = options.view_as(DaskOptions)
    if dask_options.address or dask_options.scheduler_file:
        yield None
        return
    settings = options.view_as(DaskClusterOptions)
    with LocalCluster(n_workers=settings.dask_local_workers, threads_per_worker=1, processes=True,
                      memory_limit=settings.dask_memory_limit, dashboard_address=None) as cluster:
        dask_options.address = cluster.scheduler_address
        try:
            with scheduler_on_this_machine(cluster.scheduler_address):  # its workers see this machine's files
                yield cluster.scheduler_address
        finally:
            dask_options.address = None


@dataclasses.dataclass
class _StallWatch:
    """What the scheduler said while the job ran: since when no worker could run, and restarts."""

    stalled_since: float | None = None
    restarts: int = 0
    memory_limit_bytes: int | None = None
    _addresses: dict[str, str] = dataclasses.field(default_factory=dict)  # worker name -> address

    def stalled_for(self, workers: dict[str, dict[str, Any]], now: float) -> float:
        """Seconds for which no worker has been able to run tasks (0 while one can)."""
        for address, info in workers.items():
            name = str(info.get("name", address))
            if self._addresses.get(name, address) != address:
                self.restarts += 1  # the nanny started a new worker process under the same name
            self._addresses[name] = address
            self.memory_limit_bytes = info.get("memory_limit") or self.memory_limit_bytes
        if any(info.get("status") == "running" for info in workers.values()):
            self.stalled_since = None
            return 0.0
        if self.stalled_since is None:
            self.stalled_since = now
        return now - self.stalled_since

    def describe(self, workers: dict[str, dict[str, Any]], seconds: float) -> str:
        states = sorted(str(info.get("status")) for info in workers.values()) or ["none connected"]
        return (f"no worker could run tasks for {seconds:.0f} s (worker states: {', '.join(states)}; "
                f"{self.restarts} worker restart(s) seen)")


@dataclasses.dataclass(frozen=True)
class DaskRunReport:
    """What the scheduler showed while a job ran (polled every second).

    Attributes:
        restarts: worker processes seen replaced by their nanny (a memory kill, or a crash).
        stalled_seconds: the longest time no worker could run tasks (all paused, or none connected).
        memory_limit_bytes: each worker's memory limit, when the scheduler reports one.
    """

    restarts: int
    stalled_seconds: float
    memory_limit_bytes: int | None


def _raise_task_error(futures: Any) -> None:
    """Raises what a failed task of the job raised, once every task is done (``distributed.wait``).

    Only an error is fetched (it travels with the future's state). Beam's ``wait_until_finish``
    gathers every task's result to the client instead, for errors alone; that gather once waited
    forever here, every process of the cluster idle, after every task had finished
    (``tests/dask/test_no_shared_disk.py``, 2026-11-26).
    """
    for future in futures:
        if future.status in ("error", "cancelled"):
            future.result()  # raises the task's exception (CancelledError for a cancelled one)


def wait_for_dask(result: Any, *, stall_timeout_seconds: float = DEFAULT_STALL_TIMEOUT_SECONDS,
                  poll_seconds: float = _POLL_SECONDS) -> DaskRunReport:
    """Waits for a DaskRunner job (the ``PipelineResult`` of ``pipeline.run()``), failing instead of hanging.

    Raises:
        ClusterStalledError: no worker could run for ``stall_timeout_seconds`` (the job is
            cancelled), or the scheduler gave up on a task whose workers kept being killed.
        Exception: whatever a task raised.
    """
    from distributed import wait
    from distributed.scheduler import KilledWorker

    futures = result.futures if isinstance(result.futures, (list, tuple)) else [result.futures]
    watch = _StallWatch()
    longest = 0.0
    while True:
        try:
            wait(futures, timeout=poll_seconds)
            break
        except TimeoutError:
            workers = result.client.scheduler_info(n_workers=-1).get("workers", {})
            seconds = watch.stalled_for(workers, time.monotonic())
            longest = max(longest, seconds)
            if seconds >= stall_timeout_seconds:
                result.cancel()
                raise ClusterStalledError(watch.describe(workers, seconds), watch.memory_limit_bytes) from None
    try:
        _raise_task_error(futures)
    except KilledWorker as err:
        with contextlib.suppress(Exception):  # the limit, if the scheduler still answers
            watch.stalled_for(result.client.scheduler_info(n_workers=-1).get("workers", {}), time.monotonic())
        reason = f"the scheduler gave up on a task after its workers were killed repeatedly ({err})"
        raise ClusterStalledError(reason, watch.memory_limit_bytes) from err
    return DaskRunReport(watch.restarts, longest, watch.memory_limit_bytes)

"""The stall watchdog of a Dask job: ``wait_for_dask`` waits for its tasks and fails instead of hanging.

Invariant: the wait ends, with the job done, a task's own error, or ``ClusterStalledError`` once no
worker has been able to run a task for ``--dask_stall_timeout_seconds`` (all paused for memory,
restarting, lost, or idle while the work waits on a paused one). Both the jobs and the project's
``DaskRunner`` (a user's own pipeline) wait here. ``docs/operations.md`` ("Dask").
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.errors import ClusterStalledError

DEFAULT_LOCAL_WORKERS = 2
DEFAULT_STALL_TIMEOUT_SECONDS = 300.0
_POLL_SECONDS = 1.0
# A worker's task states (its heartbeat's ``task_counts``): running one (a paused worker finishes the task it
# is running), or, on a running worker, about to.
_RUNNING_STATES = ("executing", "long-running")
_STARTING_STATES = ("ready", "constrained", "flight")


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
                            help="DaskRunner: fail with ClusterStalledError when no worker can run a task (all "
                                 "paused for memory, restarting, lost, or idle while the rest wait) for this long")


def _working(info: dict[str, Any]) -> bool:
    counts = info.get("metrics", {}).get("task_counts", {})
    states = _RUNNING_STATES + (_STARTING_STATES if info.get("status") == "running" else ())
    return any(counts.get(state, 0) for state in states)


def _describe_worker(address: str, info: dict[str, Any]) -> str:
    status = str(info.get("status"))
    if status == "running":
        status = "running, idle"  # had it been working, the cluster would not be stalled
    memory = info.get("metrics", {}).get("memory")
    limit = info.get("memory_limit")
    held = f" at {memory / 2**20:.0f} MiB" if memory else ""
    of = f" of {limit / 2**20:.0f} MiB" if memory and limit else ""
    return f"{info.get('name', address)} ({address}) {status}{held}{of}"


@dataclasses.dataclass
class _StallWatch:
    """What the scheduler said while the job ran: since when no worker could run, restarts, lost workers."""

    stalled_since: float | None = None
    restarts: int = 0
    memory_limit_bytes: int | None = None
    _addresses: dict[str, str] = dataclasses.field(default_factory=dict)  # worker name -> address
    _lost: set[str] = dataclasses.field(default_factory=set)  # names seen once, gone now
    _counts: dict[str, Any] = dataclasses.field(default_factory=dict)  # address -> task counts last poll

    def stalled_for(self, workers: dict[str, dict[str, Any]], now: float) -> float:
        """Seconds for which no worker has run a task (0 while one is, or a task changed state since the last poll)."""
        names = set()
        for address, info in workers.items():
            name = str(info.get("name", address))
            names.add(name)
            if self._addresses.get(name, address) != address:
                self.restarts += 1  # the nanny started a new worker process under the same name
            self._addresses[name] = address
        self.note_memory_limit(workers)
        self._lost = set(self._addresses) - names
        counts = {address: info.get("metrics", {}).get("task_counts") for address, info in workers.items()}
        moved, self._counts = counts != self._counts, counts  # a task changed state: work got done in between
        if moved or any(_working(info) for info in workers.values()):
            self.stalled_since = None
            return 0.0
        if self.stalled_since is None:
            self.stalled_since = now
        return now - self.stalled_since

    def note_memory_limit(self, workers: dict[str, dict[str, Any]]) -> None:
        """The workers' memory limit as the scheduler reports it, kept once they are gone (killed, restarting)."""
        for info in workers.values():
            self.memory_limit_bytes = info.get("memory_limit") or self.memory_limit_bytes

    def describe(self, workers: dict[str, dict[str, Any]], seconds: float) -> str:
        states = [_describe_worker(address, info) for address, info in sorted(workers.items())]
        states += [f"{name} lost" for name in sorted(self._lost)]
        return (f"no worker could run tasks for {seconds:.0f} s (workers: {'; '.join(states) or 'none connected'}; "
                f"{self.restarts} worker restart(s) seen)")


@dataclasses.dataclass(frozen=True)
class DaskRunReport:
    """What the scheduler showed while a job ran (polled every second).

    Attributes:
        restarts: worker processes seen replaced by their nanny (a memory kill, or a crash).
        stalled_seconds: the longest time no worker ran a task (all paused, idle or none connected).
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
    """Waits for a DaskRunner job (a result with ``client``, ``futures`` and ``cancel()``), failing instead of hanging.

    Raises:
        ClusterStalledError: no worker could run a task for ``stall_timeout_seconds`` (the job is
            cancelled), or the scheduler gave up on a task whose workers kept being killed.
        Exception: whatever a task raised.
    """
    from distributed import wait
    from distributed.scheduler import KilledWorker

    futures = result.futures if isinstance(result.futures, (list, tuple)) else [result.futures]
    watch = _StallWatch()
    with contextlib.suppress(Exception):  # now, while the workers are there: a job may fail before the first poll
        watch.note_memory_limit(result.client.scheduler_info(n_workers=-1).get("workers", {}))
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

"""``beam-tfrecord refresh --watch``: one process that runs the append refresh every interval.

Each interval is the ordinary refresh (``refresh_driver.run_refresh``): its own lease, its input index, one atomic
commit, so a watch killed and restarted publishes every input exactly once. The process stays up between
intervals so TensorFlow and Beam are imported once (~6.5 s saved per interval). SIGTERM ends it after the interval
in flight, with exit code 0. The clock: ``versions/watch.py``; how to run it: docs/operations.md, "Continuous
refresh (--watch)".
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.durations import format_duration, parse_duration
from beam_tfrecord.errors import DurationError, RefreshError
from beam_tfrecord.versions.watch import StopReason, WatchSchedule, watch
from pipelines.source_options import parse_bool

# A watch's lease is taken again every interval, so it is never older than one interval: the restart after a
# SIGKILL that cannot tell the holder is dead (another host, or the same PID in a new container) waits this long.
DEFAULT_WATCH_LEASE_TTL = datetime.timedelta(minutes=10)
Outcome = TypeVar("Outcome")


class WatchOptions(PipelineOptions):
    """Continuous refresh: keep running and refresh every interval."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--watch", type=parse_bool, nargs="?", const=True, default=False,
                            help="keep running: every --triggering_frequency seconds, append what arrived (new and "
                                 "changed inputs) as one version; nothing new: no version. SIGTERM stops it after "
                                 "the interval in flight (exit 0)")
        parser.add_argument("--triggering_frequency", type=float, default=None,
                            help="with --watch: seconds between the starts of two refreshes (> 0); an input is "
                                 "visible at most this long plus one refresh's duration after it landed")
        parser.add_argument("--max_intervals", type=int, default=None,
                            help="with --watch: stop after this many refreshes (default: until SIGTERM)")
        parser.add_argument("--watch_lease_ttl", default=format_duration(DEFAULT_WATCH_LEASE_TTL),
                            help="with --watch: a lease older than this is taken over (each refresh takes it anew, "
                                 "so every refresh must finish within it): how long a restart after a kill waits "
                                 "when it cannot see that the holder is dead (another host, a reused PID)")


@dataclasses.dataclass(frozen=True)
class WatchPlan:
    """A validated ``--watch``: when refreshes run and how old a lease may get."""

    schedule: WatchSchedule
    lease_ttl: datetime.timedelta


def watch_plan(options: PipelineOptions, *, force: bool) -> WatchPlan | None:
    """The watch the options ask for, or None without ``--watch``. ``force``: the refresh's ``--force``.

    Raises:
        RefreshError: a watch option without ``--watch``, no or a bad ``--triggering_frequency``, a bad
            ``--max_intervals`` or ``--watch_lease_ttl``, or ``--force`` (every interval would rebuild).
    """
    given = options.view_as(WatchOptions)
    if not given.watch:
        extra = [name for name in ("triggering_frequency", "max_intervals") if getattr(given, name) is not None]
        if extra:
            raise RefreshError(f"--{extra[0]} is an option of --watch: add --watch, or leave it out")
        return None
    if given.triggering_frequency is None:
        raise RefreshError("--watch needs --triggering_frequency SECONDS (> 0): how often to refresh")
    if force:
        raise RefreshError("--force cannot be combined with --watch: every interval would rebuild every split")
    schedule = WatchSchedule(given.triggering_frequency, given.max_intervals)
    try:
        ttl = parse_duration(str(given.watch_lease_ttl))
    except DurationError as err:
        raise RefreshError(f"--watch_lease_ttl: {err}") from err
    if ttl.total_seconds() <= schedule.triggering_frequency_seconds:
        raise RefreshError(f"--watch_lease_ttl must be longer than --triggering_frequency "
                           f"({schedule.triggering_frequency_seconds:g} s), got {given.watch_lease_ttl}")
    return WatchPlan(schedule, ttl)


def run_watch(plan: WatchPlan, refresh_once: Callable[[], Outcome], *, root: str) -> Outcome | None:
    """Runs ``refresh_once`` every interval until SIGTERM or ``max_intervals``; returns the last outcome.

    SIGTERM is caught only when called from the main thread (Python delivers signals there); the handler just
    asks the loop to stop, so the interval in flight finishes and the process exits normally.
    """
    stop = threading.Event()
    outcomes: list[Outcome] = []
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set()) if in_main else None
    frequency = plan.schedule.triggering_frequency_seconds
    print(f"refresh --watch {root}: refreshing every {frequency:g} s (SIGTERM stops after the interval in flight)",
          flush=True)
    try:
        summary = watch(lambda number: outcomes.append(refresh_once()), plan.schedule, stop=stop)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    why = "SIGTERM received" if summary.reason is StopReason.STOP_REQUESTED else "--max_intervals reached"
    print(f"refresh --watch {root}: stopped cleanly ({why}) after {summary.intervals} interval(s); every interval "
          "finished whole", flush=True)
    return outcomes[-1] if outcomes else None

"""Continuous refresh's clock: run one refresh per interval until told to stop.

Pure (no Beam, no storage): the caller gives the interval's work. Intervals start every
``triggering_frequency_seconds`` (fixed rate, from the first start); one that overruns is followed at once by the
next, never by two. A stop request (SIGTERM in ``pipelines/watch.py``) is honoured between intervals only, so the
interval in flight is finished whole. See docs/operations.md, "Continuous refresh (--watch)".
"""

from __future__ import annotations

import dataclasses
import enum
import math
import threading
import time
from collections.abc import Callable

from beam_tfrecord.errors import RefreshError


class StopReason(enum.Enum):
    """Why a watch ended."""

    MAX_INTERVALS = "max_intervals"  # ran the intervals it was asked for
    STOP_REQUESTED = "stop requested"  # SIGTERM (or the caller's event) between intervals


@dataclasses.dataclass(frozen=True)
class WatchSchedule:
    """When intervals run.

    Attributes:
        triggering_frequency_seconds: seconds between the starts of two intervals (> 0).
        max_intervals: end after this many intervals (tests, a bounded catch-up); None: until stopped.
    """

    triggering_frequency_seconds: float
    max_intervals: int | None = None

    def __post_init__(self) -> None:
        frequency = self.triggering_frequency_seconds
        if isinstance(frequency, bool) or not isinstance(frequency, int | float) or not math.isfinite(frequency) \
                or frequency <= 0:
            raise RefreshError(f"--triggering_frequency must be a number of seconds > 0, got {frequency!r}")
        if self.max_intervals is not None and (type(self.max_intervals) is not int or self.max_intervals < 1):
            raise RefreshError(f"--max_intervals must be an integer >= 1, got {self.max_intervals!r}")


@dataclasses.dataclass(frozen=True)
class WatchSummary:
    """How a watch ended.

    Attributes:
        intervals: intervals run (each finished whole).
        reason: why it ended.
    """

    intervals: int
    reason: StopReason


def watch(run_interval: Callable[[int], None], schedule: WatchSchedule, *, stop: threading.Event,
          clock: Callable[[], float] = time.monotonic) -> WatchSummary:
    """Calls ``run_interval(number)`` at each interval's start until ``stop`` is set or ``max_intervals`` ran.

    The first interval starts at once. ``stop`` is checked before each interval and while waiting for the next
    (the wait ends as soon as it is set); an interval is never interrupted. An exception of ``run_interval``
    propagates (the job ends; a restart resumes: docs/operations.md).
    """
    number = 0
    next_start = clock()
    while not stop.is_set():
        run_interval(number)
        number += 1
        if schedule.max_intervals is not None and number >= schedule.max_intervals:
            return WatchSummary(number, StopReason.MAX_INTERVALS)
        now = clock()
        next_start = max(next_start + schedule.triggering_frequency_seconds, now)  # an overrun skips missed starts
        if stop.wait(next_start - now):
            break
    return WatchSummary(number, StopReason.STOP_REQUESTED)

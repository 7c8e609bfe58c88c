"""Beam's state sampler in the local worker processes: a short period, so that a bundle ends when its work does.

Beam's ``BundleProcessor`` has a thread note which step runs, sleeping between two notes for a period that
grows to ``statesampler.DEFAULT_SAMPLING_PERIOD_MS`` (200 ms) within a bundle's first second; the bundle's end
stops that thread and waits for its sleep to finish. A bundle longer than a second so ended 0-200 ms after its
work while its worker idled, and the next stage waited for it: 0.10 s on average at the end of the encode stage
of 1M small records and 0.09 s at the end of its shard stage, 0.01 s each with 10 ms (docs/performance.md, "A
bundle's end without Beam's 200 ms wait"). Waking every 10 ms costs the sampler a few microseconds each time.
Only worker processes call this, never a user's process.
"""

from __future__ import annotations

SAMPLING_PERIOD_MS = 10


def sample_states_often() -> None:
    """Makes every state sampler this process creates from now on note its step every ``SAMPLING_PERIOD_MS``
    (Beam 2.77 builds one per bundle processor with the default period of ``StateSampler.__init__``)."""
    from apache_beam.runners.worker import statesampler

    statesampler.StateSampler.__init__.__defaults__ = (SAMPLING_PERIOD_MS,)

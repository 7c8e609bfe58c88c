"""Beam's state sampler in the local worker processes: a short period, so that a bundle ends when its work does.

Invariant: only worker processes call this, never a user's process. Measured: docs/performance.md, "A bundle's
end without Beam's 200 ms wait".
"""

from __future__ import annotations

# Beam's BundleProcessor has a thread note which step runs, sleeping between notes for a period that grows to
# DEFAULT_SAMPLING_PERIOD_MS (200 ms) within a bundle's first second; the bundle's end joins that thread, so a
# bundle longer than a second ended 0-200 ms after its work while its worker idled and the next stage waited:
# 0.10 s on average at the ends of the encode and shard stages of 1M small records, 0.01 s with 10 ms. Waking
# 100 times a second costs the sampler a few microseconds each time.
SAMPLING_PERIOD_MS = 10


def sample_states_often() -> None:
    """Makes every state sampler this process creates from now on note its step every ``SAMPLING_PERIOD_MS``
    (Beam 2.77 builds one per bundle processor with the default period of ``StateSampler.__init__``)."""
    from apache_beam.runners.worker import statesampler

    statesampler.StateSampler.__init__.__defaults__ = (SAMPLING_PERIOD_MS,)

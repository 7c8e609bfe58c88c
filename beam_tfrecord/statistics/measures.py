"""TFDV's two drift measures, computed as TFDV computes them (``anomalies/metrics.cc``), on plain values.

L-infinity distance of two categorical count maps; approximate Jensen-Shannon divergence of two histograms
after aligning them on the union of their bucket boundaries. Proto-free, so tests check them against SciPy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Bucket:
    """One histogram bucket: values in [low, high] (a point mass when low == high), and how many."""

    low: float
    high: float
    count: float


def l_infinity(old: Mapping[str, float], new: Mapping[str, float]) -> tuple[str, float]:
    """The largest change of one value's share (each map normalized by its own total), and that value.

    As TFDV's ``LInftyDistance``: values in key order, a tie goes to the later key; an empty map has
    every share 0.
    """
    old_total, new_total = sum(old.values()), sum(new.values())
    best = ("", 0.0)
    for key in sorted(set(old) | set(new)):
        old_share = old.get(key, 0.0) / old_total if old_total else 0.0
        new_share = new.get(key, 0.0) / new_total if new_total else 0.0
        if abs(new_share - old_share) >= best[1]:
            best = (key, abs(new_share - old_share))
    return best


def _split_buckets(buckets: Sequence[Bucket]) -> tuple[list[Bucket], dict[float, float], float]:
    """(buckets of finite width, point masses by value, mass in buckets with an infinite bound)."""
    regular: list[Bucket] = []
    points: dict[float, float] = {}
    infinite = 0.0
    for bucket in buckets:
        if not (math.isfinite(bucket.low) and math.isfinite(bucket.high)):
            infinite += bucket.count
        elif bucket.low == bucket.high:
            points[bucket.low] = points.get(bucket.low, 0.0) + bucket.count
        else:
            regular.append(bucket)
    return regular, points, infinite


def _rebucket(buckets: Sequence[Bucket], boundaries: Sequence[float]) -> list[float]:
    """Counts in [boundaries[i], boundaries[i+1]], each bucket's count spread uniformly over its width."""
    counts = [0.0] * (len(boundaries) - 1)
    for bucket in buckets:
        width = bucket.high - bucket.low
        for i in range(len(counts)):
            overlap = min(bucket.high, boundaries[i + 1]) - max(bucket.low, boundaries[i])
            if overlap > 0:
                counts[i] += bucket.count * overlap / width
    return counts


def aligned(old: Sequence[Bucket], new: Sequence[Bucket], old_nan: float = 0.0,
            new_nan: float = 0.0) -> tuple[list[float], list[float]]:
    """Both histograms' counts on the same buckets, as TFDV's ``AlignHistograms`` lays them out.

    Finite buckets are rebucketed on the union of both sets of boundaries; then one bucket per point
    mass value; then infinite-bounded mass as a bucket of its own per side (never matching the
    other); then NaNs, which TFDV also places so that they never match (``num_nan`` of each side).
    """
    old_regular, old_points, old_infinite = _split_buckets(old)
    new_regular, new_points, new_infinite = _split_buckets(new)
    boundaries = sorted({edge for b in [*old_regular, *new_regular] for edge in (b.low, b.high)})
    old_counts = _rebucket(old_regular, boundaries) if boundaries else []
    new_counts = _rebucket(new_regular, boundaries) if boundaries else []
    for value in sorted(set(old_points) | set(new_points)):
        old_counts.append(old_points.get(value, 0.0))
        new_counts.append(new_points.get(value, 0.0))
    extra = [(old_infinite, 0.0)] if old_infinite else []
    extra += [(0.0, new_infinite)] if new_infinite else []
    extra += [(0.0, new_nan), (old_nan, 0.0)] if old_nan > 0 or new_nan > 0 else []
    for old_mass, new_mass in extra:
        old_counts.append(old_mass)
        new_counts.append(new_mass)
    return old_counts, new_counts


def jensen_shannon(old: Sequence[float], new: Sequence[float]) -> float | None:
    """Jensen-Shannon divergence (log base 2, so within [0, 1]) of two aligned count vectors; None when
    either is empty (TFDV cannot normalize an empty histogram)."""
    old_total, new_total = sum(old), sum(new)
    if not old_total or not new_total:
        return None
    total = 0.0
    for old_count, new_count in zip(old, new, strict=True):
        p, q = old_count / old_total, new_count / new_total
        m = (p + q) / 2
        total += (p * math.log2(p / m) if p > 0 else 0.0) + (q * math.log2(q / m) if q > 0 else 0.0)
    return min(total / 2, 1.0)  # TFDV caps it at 1.0 (rounding)

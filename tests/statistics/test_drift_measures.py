"""TFDV's drift measures (``statistics/measures.py``) against computations made independently here:
SciPy's Jensen-Shannon distance on a fine grid, and shares counted by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from beam_tfrecord.statistics.measures import Bucket, aligned, jensen_shannon, l_infinity


def _density_on_grid(buckets: list[Bucket], grid: np.ndarray) -> np.ndarray:
    """Each grid cell's mass, every bucket's count spread uniformly over its width (TFDV's assumption)."""
    mass = np.zeros(len(grid) - 1)
    for bucket in buckets:
        overlap = np.clip(np.minimum(grid[1:], bucket.high) - np.maximum(grid[:-1], bucket.low), 0, None)
        mass += bucket.count * overlap / (bucket.high - bucket.low)
    return mass


def _buckets(values: np.ndarray, bins: int) -> list[Bucket]:
    counts, edges = np.histogram(values, bins=bins)
    return [Bucket(low, high, count) for low, high, count in zip(edges[:-1], edges[1:], counts.tolist())]


@pytest.mark.parametrize("shift, scale, bins", [(0.0, 1.0, 10), (1.0, 1.0, 10), (3.0, 1.0, 10), (0.5, 2.0, 7),
                                                (10.0, 1.0, 10)])
def test_jensen_shannon_of_histograms_with_other_edges_matches_scipy(shift: float, scale: float, bins: int) -> None:
    rng = np.random.default_rng(7)
    old = _buckets(rng.normal(0.0, 1.0, 5000), 10)
    new = _buckets(rng.normal(shift, scale, 4000), bins)
    grid = np.linspace(min(old[0].low, new[0].low), max(old[-1].high, new[-1].high), 100_001)
    expected = jensenshannon(_density_on_grid(old, grid), _density_on_grid(new, grid), base=2) ** 2
    assert jensen_shannon(*aligned(old, new)) == pytest.approx(expected, rel=1e-3, abs=1e-6)


def test_point_masses_infinite_buckets_and_nans_never_match_as_tfdv_lays_them_out() -> None:
    old = [Bucket(5.0, 5.0, 30), Bucket(0.0, 1.0, 70)]
    new = [Bucket(5.0, 5.0, 30), Bucket(0.0, 1.0, 60), Bucket(1.0, float("inf"), 10)]
    old_counts, new_counts = aligned(old, new, old_nan=0, new_nan=5)
    # [0, 1], the point 5, new's infinite mass, then TFDV's two NaN buckets (0, new NaNs) and (old NaNs, 0).
    assert (old_counts, new_counts) == ([70.0, 30.0, 0.0, 0.0, 0.0], [60.0, 30.0, 10.0, 5.0, 0.0])
    expected = jensenshannon(old_counts, new_counts, base=2) ** 2
    assert jensen_shannon(old_counts, new_counts) == pytest.approx(expected, rel=1e-12)


def test_disjoint_histograms_are_one_and_empty_ones_have_no_divergence() -> None:
    assert jensen_shannon(*aligned([Bucket(63.5, 64.5, 10)], [Bucket(31.5, 32.5, 10)])) == 1.0
    assert jensen_shannon([0.0, 0.0], [1.0, 2.0]) is None


def test_l_infinity_is_the_largest_share_change_with_tfdvs_tie_rule() -> None:
    old, new = {"a": 10, "b": 30, "c": 60}, {"a": 40, "b": 30, "d": 30}
    shares = {k: abs(new.get(k, 0) / 100 - old.get(k, 0) / 100) for k in "abcd"}  # by hand: a .3, b 0, c .6, d .3
    assert l_infinity(old, new) == ("c", pytest.approx(max(shares.values())))
    assert l_infinity({"x": 1, "y": 1}, {"x": 1, "y": 1}) == ("y", 0.0)  # a tie goes to the later key
    assert l_infinity({"x": 1}, {}) == ("x", 1.0)

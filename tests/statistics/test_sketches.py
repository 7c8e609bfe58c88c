"""Numbers' summaries: the same bytes of statistics however the values were split and merged, beyond any exact
capacity; while exact, the quantiles and histogram counts a KLL sketch in exact mode gives (small builds' bytes).

The byte-identity of whole builds' ``statistics.pb`` across runners and worker counts: tests/test_determinism.py.
"""

from __future__ import annotations

import datasketches
import numpy as np
import pytest

from beam_tfrecord.core.schema import DType, Scalar, Schema, VarList
from beam_tfrecord.statistics.accumulator import SplitStatistics
from beam_tfrecord.statistics.sketches import _MAX_BUCKETS, EXACT_NUMBERS, Numbers
from beam_tfrecord.statistics.tfmd import statistics_proto

FRACTIONS = [i / 10 for i in range(11)]
SCHEMA = Schema({"x": Scalar(DType.FLOAT32), "ids": VarList(DType.INT64)})


def _numbers(parts: list[np.ndarray]) -> Numbers:
    merged = Numbers()
    for part in parts:
        numbers = Numbers()
        numbers.add(part)
        merged.merge(numbers)
    return merged


@pytest.mark.parametrize("kind", ["normal", "small integers", "rounded"])
def test_exact_quantiles_and_counts_are_a_kll_sketchs_in_exact_mode(kind: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 201))  # at most k = 200 values: the sketch holds them all
        values = {"normal": rng.normal(size=n), "small integers": rng.integers(-5, 6, n),
                  "rounded": np.round(rng.exponential(3.0, n), 1)}[kind]
        kll = datasketches.kll_doubles_sketch(200)
        kll.update(values.astype(np.float64))
        cut = int(rng.integers(0, n + 1))
        numbers = _numbers([values[:cut], values[cut:]])
        assert numbers.quantiles(FRACTIONS) == [float(q) for q in kll.get_quantiles(FRACTIONS)]
        low, high = float(values.min()), float(values.max())
        if low < high:
            edges = [low + (high - low) * i / 10 for i in range(1, 10)]
            assert numbers.counts_below(edges) == [float(c) * n for c in kll.get_cdf(edges, inclusive=False)[:-1]]


def test_statistics_are_the_same_bytes_for_any_split_and_merge_order_of_many_values() -> None:
    rng = np.random.default_rng(3)
    n = 40_000
    # Sums of floats depend on the order of their additions (the shard writers add a shard's blocks in its order);
    # these have exact sums and sums of squares (1/64ths of at most 21 bits; ids below 2^17), so what is checked
    # here is the rest.
    x = (rng.integers(-1 << 15, 1 << 15, n) / 64).astype(np.float32)
    counts = rng.integers(0, 5, n)
    ids = rng.integers(0, 1 << 17, int(counts.sum()))
    starts = np.concatenate([[0], np.cumsum(counts)])

    def built(order: np.ndarray, cuts: np.ndarray) -> bytes:
        parts = []
        for block in np.split(order, cuts):
            part = SplitStatistics("train", SCHEMA)
            part.add_columns({"x": x[block], "ids": [ids[starts[i]:starts[i + 1]] for i in block]}, len(block))
            parts.append(part)
        merged = SplitStatistics("train", SCHEMA)
        for index in rng.permutation(len(parts)):
            merged.merge(parts[index])
        assert merged.features["x"].values.bucketed and merged.features["ids"].values.bucketed
        return statistics_proto([merged])

    reference = built(np.arange(n), np.array([n // 2]))
    for blocks in (3, 17, 60):
        assert built(rng.permutation(n), np.sort(rng.integers(0, n, blocks))) == reference


def test_bucketed_quantiles_are_within_a_quarter_percent_of_the_values_of_their_rank() -> None:
    values = np.random.default_rng(5).lognormal(5.0, 1.0, 50_000)
    numbers = _numbers(np.array_split(values, 7))
    assert numbers.bucketed and len(numbers.keys) <= 2 * _MAX_BUCKETS < values.size
    ordered = np.sort(values)
    truth = [ordered[min(int(f * values.size), values.size - 1)] for f in FRACTIONS]
    assert np.allclose(numbers.quantiles(FRACTIONS), truth, rtol=0.0026, atol=0)
    assert numbers.quantiles([0.0, 1.0]) == [values.min(), values.max()]


def test_many_distinct_values_fold_their_smallest_magnitudes_and_stay_bounded() -> None:
    values = np.exp(np.linspace(-60.0, 60.0, 3 * EXACT_NUMBERS))  # more buckets than kept
    numbers = _numbers([values[::2], values[1::2]])
    assert numbers.bucketed and len(numbers.keys) == _MAX_BUCKETS and int(numbers.weights.sum()) == values.size
    assert numbers.quantiles([0.9, 0.99]) == pytest.approx([values[int(0.9 * values.size)],
                                                           values[int(0.99 * values.size)]], rel=0.0026)
    # One value a bucket: the median is folded into the lowest bucket kept, the 4096th largest value's.
    assert numbers.quantiles([0.5]) == pytest.approx([values[-_MAX_BUCKETS]], rel=0.0026)

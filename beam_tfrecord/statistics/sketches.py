"""Mergeable summaries of one feature's values, bounded in memory at any size (Apache DataSketches underneath).

Each takes a block of values at a time (NumPy arrays: no per-value Python), merges with another of its kind, and
pickles (the sketches as their own serialized bytes). Exact while small: counts, sums, minimum and maximum always;
value frequencies until ``EXACT_DISTINCT`` distinct values, then a frequent-items and an HLL sketch.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import datasketches
import numpy as np

KLL_K = 200  # KLL's default: normalized rank error ~1.3% (``Numbers.rank_error``), a few KB per sketch
EXACT_DISTINCT = 1000  # distinct values counted exactly (unique count and top values), then sketched
_FREQUENT_LG_MAP = 10  # frequent-items map of 2^10 slots: ~750 items, counts within n * 3.5 / 768
_HLL_LG_K = 12  # HLL of 4096 buckets: distinct count within ~1.6%


class Numbers:
    """Numeric values: count, NaNs, zeros, min, max, sum and sum of squares exactly; quantiles by a KLL sketch."""

    def __init__(self) -> None:
        self.count = 0
        self.nan = 0
        self.zeros = 0
        self.minimum = np.inf
        self.maximum = -np.inf
        self.total = 0.0
        self.total_sq = 0.0
        self.kll = datasketches.kll_doubles_sketch(KLL_K)

    def add(self, values: np.ndarray) -> None:
        """Adds a 1-d array of values (any numeric dtype)."""
        if not values.size:
            return
        floats = values.astype(np.float64, copy=False)
        nan = np.isnan(floats)
        if nan.any():
            self.nan += int(nan.sum())
            floats = floats[~nan]
            if not floats.size:
                return
        self.count += int(floats.size)
        self.zeros += int(floats.size - np.count_nonzero(floats))
        self.minimum = min(self.minimum, float(floats.min()))
        self.maximum = max(self.maximum, float(floats.max()))
        self.total += float(floats.sum())
        self.total_sq += float(np.einsum("i,i->", floats, floats))  # not np.dot: BLAS threads cost 300x here
        self.kll.update(floats)

    def merge(self, other: "Numbers") -> None:
        self.count += other.count
        self.nan += other.nan
        self.zeros += other.zeros
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        self.total += other.total
        self.total_sq += other.total_sq
        self.kll.merge(other.kll)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        return float(np.sqrt(max(0.0, self.total_sq / self.count - self.mean ** 2))) if self.count else 0.0

    def rank_error(self) -> float:
        """The sketch's normalized rank error (a quantile's rank is within this fraction of n)."""
        return float(self.kll.normalized_rank_error(False))

    def quantiles(self, fractions: Iterable[float]) -> list[float]:
        return [float(q) for q in self.kll.get_quantiles(list(fractions))] if self.count else []

    def counts_below(self, edges: list[float]) -> list[float]:
        """Estimated number of values below each of ``edges`` (sorted), from the sketch's CDF."""
        if not self.count:
            return [0.0] * len(edges)
        return [float(c) * self.count for c in self.kll.get_cdf(edges, inclusive=False)[:-1]]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "kll": self.kll.serialize()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, kll=datasketches.kll_doubles_sketch.deserialize(state["kll"]))


class Frequencies:
    """Values' frequencies (strings): exact up to ``EXACT_DISTINCT`` distinct values, then sketched
    (frequent items for the top values, HLL for the unique count); total length for the average."""

    def __init__(self) -> None:
        self.count = 0
        self.total_length = 0
        self.exact: collections.Counter[str] | None = collections.Counter()
        self.frequent: Any = None
        self.distinct: Any = None

    def add_counts(self, counts: collections.Counter[str] | dict[str, int]) -> None:
        """Adds values with their counts (one block's ``Counter``)."""
        for value, count in counts.items():
            self.count += count
            self.total_length += len(value) * count
        if self.exact is not None:
            self.exact.update(counts)
            if len(self.exact) > EXACT_DISTINCT:
                self._to_sketches()
            return
        for value, count in counts.items():
            self.frequent.update(value, count)
            self.distinct.update(value)

    def _to_sketches(self) -> None:
        exact, self.exact = self.exact or collections.Counter(), None
        self.frequent = datasketches.frequent_strings_sketch(_FREQUENT_LG_MAP)
        self.distinct = datasketches.hll_sketch(_HLL_LG_K)
        self.count -= sum(exact.values())
        self.total_length -= sum(len(v) * c for v, c in exact.items())
        self.add_counts(exact)

    def merge(self, other: "Frequencies") -> None:
        if other.exact is not None:
            self.add_counts(other.exact)
            return
        if self.exact is not None:
            self._to_sketches()
        self.count += other.count
        self.total_length += other.total_length
        self.frequent.merge(other.frequent)
        union = datasketches.hll_union(_HLL_LG_K)
        union.update(self.distinct)
        union.update(other.distinct)
        self.distinct = union.get_result()

    def unique(self) -> int:
        return len(self.exact) if self.exact is not None else round(self.distinct.get_estimate())

    def top(self, limit: int) -> list[tuple[str, int]]:
        """The most frequent values with their counts (exact while exact; else the sketch's estimates),
        most frequent first, ties by value."""
        if self.exact is not None:
            pairs = list(self.exact.items())
        else:
            items = self.frequent.get_frequent_items(datasketches.frequent_items_error_type.NO_FALSE_NEGATIVES)
            pairs = [(item[0], int(item[1])) for item in items]
        return sorted(pairs, key=lambda pair: (-pair[1], pair[0]))[:limit]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.exact is None:
            state.update(frequent=self.frequent.serialize(), distinct=self.distinct.serialize_compact())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.exact is None:
            self.frequent = datasketches.frequent_strings_sketch.deserialize(state["frequent"])
            self.distinct = datasketches.hll_sketch.deserialize(state["distinct"])


def value_counts(values: Iterable[str]) -> collections.Counter[str]:
    return collections.Counter(values)


def label_counts(ids: np.ndarray, names: tuple[str, ...]) -> dict[str, int]:
    """Counts of class ids (an int array) by class name (an id out of range keeps its number)."""
    found, counts = np.unique(ids, return_counts=True)
    return {names[i] if 0 <= i < len(names) else str(i): int(c) for i, c in zip(found.tolist(), counts.tolist())}

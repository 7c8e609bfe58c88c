"""Mergeable summaries of one feature's values, bounded in memory at any size.

Each takes a block of values at a time (NumPy arrays: no per-value Python), merges with another of its kind, and
pickles. Exact while small: counts, sums, minimum and maximum always; numbers' quantiles until ``EXACT_NUMBERS``
distinct values, then log-spaced buckets (a function of the values alone: the same bytes however the work was
split); strings' frequencies until ``EXACT_DISTINCT`` distinct values, then Apache DataSketches' frequent-items
and HLL sketches (their own serialized bytes in a pickle).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import datasketches
import numpy as np

EXACT_DISTINCT = 1000  # distinct strings counted exactly (unique count and top values), then sketched
_FREQUENT_LG_MAP = 10  # frequent-items map of 2^10 slots: ~750 items, counts within n * 3.5 / 768
_HLL_LG_K = 12  # HLL of 4096 buckets: distinct count within ~1.6%
EXACT_NUMBERS = 4096  # distinct numbers counted exactly (exact quantiles and histograms), then bucketed
_GAMMA = 1.005  # bucket bounds grow by 0.5%: a bucketed quantile is within 0.25% of a value of its rank
_MAX_BUCKETS = 4096  # buckets per sign (a range of ~e^20 in values), then the nearest zero fold upwards
_MAX_INDEX = 200_000  # bucket indices clipped here: beyond any finite double's (|log_gamma(v)| < 150,000)


class Numbers:
    """Numeric values: count, NaNs, zeros, min, max, sum and sum of squares exactly; quantiles from value counts.

    The counts are a function of the values' multiset only, whatever the blocks and the order of merges, so
    ``statistics.pb`` is the same bytes for any split of the work (a KLL sketch's random compactions were not):
    each distinct value with its count while ``EXACT_NUMBERS`` or fewer (quantiles exact, as a KLL sketch's
    in exact mode), then log-spaced buckets (DDSketch's: a quantile within 0.25% of the value, not of the rank),
    at most ``_MAX_BUCKETS`` a sign, the smallest magnitudes folded into the lowest kept bucket. Folding commutes
    with merging. Sums stay as added: exact for integers, for other floats the same given the same blocks in the
    same order (a shard's records in its own order).
    """

    def __init__(self) -> None:
        self.count = 0
        self.nan = 0
        self.zeros = 0
        self.minimum = np.inf
        self.maximum = -np.inf
        self.total = 0.0
        self.total_sq = 0.0
        self.keys = np.zeros(0, np.float64)  # distinct values ascending, or bucket keys once ``bucketed``
        self.weights = np.zeros(0, np.int64)  # how many values each key stands for
        self.bucketed = False

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
        if self.bucketed:
            self._take(*_distinct(_bucket_keys(floats).astype(np.int64)), bucketed=True)
        else:  # + 0.0: -0.0 is 0.0 (one key, one sign)
            self._take(*_distinct(values if _small_integers(values.dtype) else floats + 0.0), bucketed=False)

    def merge(self, other: "Numbers") -> None:
        self.count += other.count
        self.nan += other.nan
        self.zeros += other.zeros
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        self.total += other.total
        self.total_sq += other.total_sq
        self._take(other.keys, other.weights, bucketed=other.bucketed)

    def _take(self, keys: np.ndarray, weights: np.ndarray, *, bucketed: bool) -> None:
        if self.bucketed or bucketed:
            mine = self.keys if self.bucketed else _bucket_keys(self.keys)
            theirs = keys if bucketed else _bucket_keys(keys)
            self.keys, self.weights = _fold(*_add_counts(np.concatenate([mine, theirs]),
                                                         np.concatenate([self.weights, weights])))
            self.bucketed = True
            return
        self.keys, self.weights = _add_counts(np.concatenate([self.keys, keys]),
                                              np.concatenate([self.weights, weights]))
        if self.keys.size > EXACT_NUMBERS:
            self.keys, self.weights = _fold(*_add_counts(_bucket_keys(self.keys), self.weights))
            self.bucketed = True

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        return float(np.sqrt(max(0.0, self.total_sq / self.count - self.mean ** 2))) if self.count else 0.0

    def _sorted_view(self) -> tuple[np.ndarray, np.ndarray]:
        """(values ascending, cumulative counts): the values themselves, or the buckets' middles clipped to
        [minimum, maximum]."""
        values = np.clip(_bucket_values(self.keys), self.minimum, self.maximum) if self.bucketed else self.keys
        return values, np.cumsum(self.weights)

    def quantiles(self, fractions: Iterable[float]) -> list[float]:
        """The value of each rank in ``fractions``, as a KLL sketch's ``get_quantiles`` gives it (the first
        value of more than ``fraction * count`` values at or below it)."""
        if not self.count:
            return []
        values, cumulative = self._sorted_view()
        ranks = np.array([int(fraction * self.count) for fraction in fractions], np.int64)
        at = np.minimum(np.searchsorted(cumulative, ranks, side="right"), len(values) - 1)
        return [float(v) for v in values[at]]

    def counts_below(self, edges: list[float]) -> list[float]:
        """Number of values below each of ``edges`` (sorted), as a KLL sketch's CDF times the count gives it."""
        if not self.count:
            return [0.0] * len(edges)
        values, cumulative = self._sorted_view()
        at = np.searchsorted(values, np.asarray(edges, np.float64), side="left")
        below = np.concatenate([[0], cumulative])[at]
        return [int(b) / self.count * self.count for b in below.tolist()]


def _small_integers(dtype: np.dtype) -> bool:
    """Whether values of ``dtype`` are integers that ``int64`` holds (counted by ``np.bincount``)."""
    return dtype.kind in "bi" or (dtype.kind == "u" and dtype.itemsize < 8)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A block's (distinct values ascending, as float64; their counts): by ``np.bincount`` for integers of a
    span not much larger than the block (a few ns a value, not a sort), else by ``np.unique``."""
    if _small_integers(values.dtype):
        ints = values.astype(np.int64, copy=False)
        low = int(ints.min())
        if int(ints.max()) - low <= 4 * ints.size + 1024:
            counts = np.bincount(ints - low)
            present = np.flatnonzero(counts)
            return (present + low).astype(np.float64), counts[present]
    distinct, counts = np.unique(values, return_counts=True)
    return distinct.astype(np.float64, copy=False), counts.astype(np.int64, copy=False)


def _add_counts(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal keys' weights summed: (distinct keys ascending, their weights)."""
    distinct, where = np.unique(keys, return_inverse=True)
    return distinct, np.bincount(where, weights, len(distinct)).astype(np.int64)


def _bucket_keys(values: np.ndarray) -> np.ndarray:
    """Each value's bucket: 0 for zero, else +-(1 + _MAX_INDEX + ceil(log_gamma |v|)), ordered as the values."""
    with np.errstate(divide="ignore"):
        index = np.clip(np.ceil(np.log(np.abs(values)) / np.log(_GAMMA)), -_MAX_INDEX, _MAX_INDEX)
    return np.where(values == 0, 0.0, np.sign(values) * (index + _MAX_INDEX + 1))


def _bucket_values(keys: np.ndarray) -> np.ndarray:
    """The middle of each bucket (DDSketch's 2 gamma^i / (gamma + 1): within 0.25% of any value in it)."""
    with np.errstate(over="ignore"):
        middle = 2.0 * np.power(_GAMMA, np.abs(keys) - _MAX_INDEX - 1) / (_GAMMA + 1.0)
    return np.where(keys == 0, 0.0, np.sign(keys) * middle)


def _fold(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most ``_MAX_BUCKETS`` buckets a sign: the smallest magnitudes' weights added to the smallest kept
    (a function of the multiset: the kept buckets of a merge are the union's largest, whatever folded before)."""
    weights = weights.copy()
    keep = np.ones(len(keys), bool)
    for side in (keys > 0, keys < 0):
        where = np.flatnonzero(side)
        if len(where) > _MAX_BUCKETS:
            ordered = where if keys[where[0]] > 0 else where[::-1]  # by magnitude, smallest first
            folded, kept = ordered[:-_MAX_BUCKETS], ordered[-_MAX_BUCKETS]
            weights[kept] += weights[folded].sum()
            keep[folded] = False
    return keys[keep], weights[keep]


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

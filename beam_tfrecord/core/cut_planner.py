"""The planner: a ``DatasetPlan`` from mergeable summaries alone, in two refinement rounds.

The plan equals the one made with every record sorted in one place. See docs/performance.md, "How a dataset
is written" (plan, then write; balance).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from beam_tfrecord.core.hashing import HASH_SPACE
from beam_tfrecord.core.sharding import DatasetPlan, ShardingConfig, ShardSpec, SplitConfig, SplitPlan
from beam_tfrecord.core.summary import BucketGrid, Cut, CutTarget, HashHistogram, refine_bucket
from beam_tfrecord.errors import PipelineInvariantError, ShardingError


@dataclasses.dataclass(frozen=True)
class Edge:
    """A point in hash order: ``records`` records of ``num_bytes`` framed bytes have hashes below ``hash``."""

    hash: int
    records: int
    num_bytes: int


@dataclasses.dataclass(frozen=True)
class CutRequests:
    """What a refinement round asks of the workers: the records of these buckets, for these targets."""

    grid: BucketGrid
    targets: tuple[CutTarget, ...]

    @functools.cached_property
    def buckets(self) -> np.ndarray:
        """Requested buckets, ascending (int64)."""
        return np.unique(np.array([t.bucket for t in self.targets], dtype=np.int64))

    @functools.cached_property
    def _by_bucket(self) -> dict[int, tuple[CutTarget, ...]]:
        by_bucket: dict[int, list[CutTarget]] = {}
        for target in self.targets:
            by_bucket.setdefault(target.bucket, []).append(target)
        return {bucket: tuple(targets) for bucket, targets in by_bucket.items()}

    def targets_of(self, bucket: int) -> tuple[CutTarget, ...]:
        return self._by_bucket.get(bucket, ())


@dataclasses.dataclass(frozen=True, eq=False)
class _Round:
    histogram: HashHistogram
    splits: SplitConfig
    sharding: ShardingConfig
    targets: tuple[CutTarget, ...]

    @property
    def requests(self) -> CutRequests:
        return CutRequests(self.histogram.grid, self.targets)

    @functools.cached_property
    def _cumulative(self) -> tuple[np.ndarray, np.ndarray]:
        return self.histogram.cumulative()

    def edge(self, cut: Cut) -> Edge:
        records, num_bytes = self._cumulative
        return Edge(cut.hash, int(records[cut.bucket]) + cut.records_before,
                    int(num_bytes[cut.bucket]) + cut.bytes_before)

    def _answered(self, cuts: Sequence[Cut]) -> dict[int, Cut]:
        by_id = {cut.target_id: cut for cut in cuts}
        missing = sorted({t.target_id for t in self.targets} - set(by_id))
        if missing or len(by_id) != len(cuts):
            raise PipelineInvariantError("plan", f"refinement answered {sorted(by_id)}, expected targets {missing} "
                                                 "too, once each")
        return by_id


@dataclasses.dataclass(frozen=True, eq=False)
class SplitRound(_Round):
    """Round one: the histogram and the split boundaries to find (count splits only)."""

    def split_edges(self, cuts: Sequence[Cut]) -> list[tuple[str, Edge, Edge]]:
        """[(name, lo, hi)] of every split, exact, from the histogram and the round's cuts."""
        records, num_bytes = self.histogram.cumulative()
        grid = self.histogram.grid
        end = Edge(HASH_SPACE, int(records[-1]), int(num_bytes[-1]))
        if self.splits.is_ratio:
            def at(hash_value: int) -> Edge:
                j = grid.index_of_start(hash_value)
                return end if j >= grid.num_buckets else Edge(hash_value, int(records[j]), int(num_bytes[j]))
            return [(name, at(lo), at(hi)) for name, lo, hi in self.splits.ratio_bounds()]
        by_id = self._answered(cuts)
        edges = []
        lo = Edge(0, 0, 0)
        for i, spec in enumerate(self.splits.specs):
            hi = self.edge(by_id[i]) if i in by_id else end
            if hi.records < lo.records:  # an empty split after a boundary that moved over equal hashes
                hi = lo
            edges.append((spec.name, lo, hi))
            lo = hi
        return edges


@dataclasses.dataclass(frozen=True, eq=False)
class ShardRound(_Round):
    """Round two: exact split edges and the shard boundaries to find.

    Attributes:
        split_edges: [(name, lo, hi)] per split.
        shard_counts: the number of shards each split is cut into (before empty ones are dropped).
    """

    split_edges: tuple[tuple[str, Edge, Edge], ...] = ()
    shard_counts: tuple[int, ...] = ()

    def finish(self, cuts: Sequence[Cut]) -> DatasetPlan:
        """The plan, from the round's cuts."""
        by_id = self._answered(cuts)
        plans = []
        target_id = 0
        for (name, lo, hi), count in zip(self.split_edges, self.shard_counts):
            inner = [self.edge(by_id[target_id + k]) for k in range(count - 1)]
            target_id += max(count - 1, 0)
            plans.append(_split_plan(name, lo, hi, inner, self.sharding))
        return DatasetPlan(tuple(plans))


def _empty_shards(name: str, first: int, count: int, at_hash: int) -> tuple[ShardSpec, ...]:
    """Shards ``first`` to ``count - 1`` of a split, planned empty (an empty hash range at ``at_hash``)."""
    return tuple(ShardSpec(split=name, index=i, count=count, hash_lo=at_hash, hash_hi=at_hash, num_records=0,
                           num_record_bytes=0) for i in range(first, count))


def _split_plan(name: str, lo: Edge, hi: Edge, inner: Sequence[Edge], config: ShardingConfig) -> SplitPlan:
    # As Beam's WriteToTFRecord: num_shards files per split when it is set, else at least one; the
    # shards the records cannot fill (fewer records than shards, or records larger than a shard's
    # share) are empty files after those that hold records.
    wanted = config.num_shards or 1
    if hi.records == lo.records:
        return SplitPlan(name, lo.hash, hi.hash, (), _empty_shards(name, 0, wanted, hi.hash))
    edges = [lo]
    for edge in inner:  # a boundary that moved onto its neighbour leaves no shard between them
        if edges[-1].records < edge.records < hi.records:
            edges.append(edge)
    edges.append(hi)
    filled = len(edges) - 1
    count = max(filled, wanted)
    shards = tuple(ShardSpec(split=name, index=i, count=count, hash_lo=a.hash, hash_hi=b.hash,
                             num_records=b.records - a.records, num_record_bytes=b.num_bytes - a.num_bytes,
                             num_filled=filled)
                   for i, (a, b) in enumerate(itertools.pairwise(edges)))
    largest = max(s.num_record_bytes for s in shards)
    if largest > config.cap:
        if config.num_shards is not None:
            raise ShardingError(f"split {name!r}: {config.num_shards} shards would hold up to {largest} bytes "
                                f"each, over max_shard_bytes {config.cap}; raise num_shards or the cap")
        raise ShardingError(f"split {name!r}: records with equal key hashes exceed max_shard_bytes "
                            f"{config.cap} together ({largest} bytes)")
    return SplitPlan(name, lo.hash, hi.hash, shards, _empty_shards(name, filled, count, hi.hash))


def _shard_count(name: str, num_records: int, num_bytes: int, largest: int, config: ShardingConfig) -> int:
    """Shards for a split. The midpoint rule keeps each within ``num_bytes / S + largest`` bytes,
    so unless the count is fixed, S is raised until that bound is under the hard cap."""
    if config.num_shards is not None:
        return min(config.num_shards, num_records)
    wanted = max(1, math.ceil(num_bytes / config.target_shard_bytes))
    room = config.cap - largest - 1
    wanted = max(wanted, math.ceil(num_bytes / room)) if room > 0 else num_records
    return min(wanted, num_records)


def start_plan(histogram: HashHistogram, splits: SplitConfig, sharding: ShardingConfig) -> SplitRound:
    """Round one of planning: which split boundaries must be found exactly (none for ratio splits).

    Raises:
        ShardingError: a record over the hard cap, or count splits the input cannot fill.
    """
    if histogram.grid != splits.bucket_grid():
        raise ShardingError("the histogram was not made on this split config's bucket grid")
    if histogram.largest > sharding.cap:
        raise ShardingError(f"a record of {histogram.largest} bytes exceeds max_shard_bytes {sharding.cap}")
    if splits.is_ratio:
        return SplitRound(histogram, splits, sharding, ())
    total = histogram.num_records
    fixed = sum(s.count for s in splits.specs if s.count is not None)
    if fixed > total or (all(s.count is not None for s in splits.specs) and fixed != total):
        raise ShardingError(f"split counts {splits.to_text()} need {fixed} records in total, the input has "
                            f"{total}")
    records, _ = histogram.cumulative()
    targets = []
    rank = 0
    for i, spec in enumerate(splits.specs[:-1]):
        rank += spec.count if spec.count is not None else total - fixed
        if rank < total:  # a boundary at the very end needs no cut
            bucket = int(np.searchsorted(records, rank, side="right")) - 1
            targets.append(CutTarget(i, bucket, rank=rank - int(records[bucket])))
    return SplitRound(histogram, splits, sharding, tuple(targets))


def plan_shards(split_round: SplitRound, cuts: Sequence[Cut]) -> ShardRound:
    """Round two of planning: exact split sizes from round one's cuts, and the shard boundaries to find."""
    histogram = split_round.histogram
    _, num_bytes = histogram.cumulative()
    doubled = 2 * num_bytes
    split_edges = split_round.split_edges(cuts)
    targets: list[CutTarget] = []
    counts = []
    for name, lo, hi in split_edges:
        records, total = hi.records - lo.records, hi.num_bytes - lo.num_bytes
        count = _shard_count(name, records, total, histogram.largest, split_round.sharding) if records else 0
        counts.append(count)
        for k in range(1, count):
            # Record r opens shard >= k iff 2 * (bytes before r in the split) + size_r >= ceil(2 k total / S).
            position2 = 2 * lo.num_bytes + -(-2 * k * total // count)
            bucket = min(int(np.searchsorted(doubled, position2, side="right")) - 1, histogram.grid.num_buckets - 1)
            targets.append(CutTarget(len(targets), bucket, position2=position2 - int(doubled[bucket])))
    return ShardRound(histogram, split_round.splits, split_round.sharding, tuple(targets),
                      split_edges=tuple(split_edges), shard_counts=tuple(counts))


def refine_locally(requests: CutRequests, hashes: np.ndarray, framed_sizes: np.ndarray) -> list[Cut]:
    """Answers a round's requests from records held in one place (tests, small inputs)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    sizes = np.asarray(framed_sizes, dtype=np.int64)
    buckets = requests.grid.bucket_of(hashes)
    cuts = []
    for bucket in requests.buckets.tolist():
        mine = buckets == bucket
        cuts += refine_bucket(requests.grid, bucket, hashes[mine], sizes[mine], requests.targets_of(bucket))
    return cuts


def plan_dataset(hashes: np.ndarray, framed_sizes: np.ndarray, splits: SplitConfig,
                 config: ShardingConfig) -> DatasetPlan:
    """Plans splits and shards from every record's hash and size, held in one place.

    The same rounds the pipeline runs across workers (histogram, split cuts, shard cuts), answered
    locally; the pipeline and this function give equal plans for the same records.

    Args:
        hashes: uint64 key hash of every record, in any order.
        framed_sizes: framed TFRecord size of every record (data + 16 bytes), aligned with hashes.
        splits: how to divide records into splits.
        config: shard sizing.

    Returns:
        A DatasetPlan whose shards tile each split's hash range (a split of no record has none), and
        the empty shards that make each split's count (``SplitPlan.empty_shards``).
    """
    hashes = np.asarray(hashes, dtype=np.uint64)
    sizes = np.asarray(framed_sizes, dtype=np.int64)
    if hashes.shape != sizes.shape:
        raise ShardingError(f"hashes {hashes.shape} and sizes {sizes.shape} differ in length")
    histogram = HashHistogram.of(splits.bucket_grid(), hashes, sizes)
    split_round = start_plan(histogram, splits, config)
    shard_round = plan_shards(split_round, refine_locally(split_round.requests, hashes, sizes))
    return shard_round.finish(refine_locally(shard_round.requests, hashes, sizes))

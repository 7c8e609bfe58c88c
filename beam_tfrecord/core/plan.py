"""Shard planning: which records go to which split and shard, from mergeable summaries alone.

Plan, then write, without ever holding every record on one worker. The planner starts from a
``HashHistogram`` (records and framed bytes per hash bucket, merged across workers) and asks
for the few buckets where a boundary falls to be looked at exactly (``refine_bucket``), in two
rounds: split boundaries (only count splits need them: ratio splits are unions of buckets), then
shard boundaries, whose byte targets depend on the splits' exact sizes. Memory: the histogram
(~1 MB) plus one small item per boundary, whatever the number of records.

Records are ordered by hash (a deterministic pseudo-random order, so sorted input never gives
class-pure shards); a split is a hash range (ratio splits) or a rank range (exact counts); each
split is cut into shards by the midpoint rule: a record goes to shard ``floor(midpoint * S /
split bytes)``, so every shard holds ``split bytes / S`` to within one record, exactly as if all
records were sorted in one place. A shard is a hash range, so a writer can pull exactly its
records from hash-sorted spill runs, or a runner's shuffle can bring them together by key.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from beam_tfrecord.core.summary import HASH_SPACE, BucketGrid, Cut, CutTarget, HashHistogram, refine_bucket
from beam_tfrecord.errors import ShardingError

MiB = 2**20
DEFAULT_TARGET_SHARD_BYTES = 128 * MiB


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """One split: a name and either a fraction of the records or an exact count.

    Attributes:
        name: split name (letters, digits, underscore).
        fraction: share of the hash space, for ratio splits.
        count: exact number of records, for count splits; None with fraction None means "the rest".
    """

    name: str
    fraction: float | None = None
    count: int | None = None


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    """How records are divided into splits.

    Ratio splits (all fractions) are stable: a record's split depends only on its key's hash, so
    adding records on a refresh never moves an existing one. Count splits (exact counts, at most
    one "rest") rank records by hash, so added records can shift the boundary.
    """

    specs: tuple[SplitSpec, ...]

    def __post_init__(self) -> None:
        specs = tuple(self.specs)
        object.__setattr__(self, "specs", specs)
        if not specs:
            raise ShardingError("at least one split is needed")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ShardingError(f"split names must be unique, got {names}")
        for spec in specs:
            if not spec.name.replace("_", "").isalnum():
                raise ShardingError(f"split name {spec.name!r} must be letters, digits and underscores")
            if spec.fraction is not None and spec.count is not None:
                raise ShardingError(f"split {spec.name!r}: give a fraction or a count, not both")
        if self.is_ratio:
            total = sum(s.fraction for s in specs)  # type: ignore[misc]
            if any(s.fraction <= 0 for s in specs) or not math.isclose(total, 1.0, abs_tol=1e-9):  # type: ignore
                raise ShardingError(f"split fractions must be positive and sum to 1, got "
                                    f"{[(s.name, s.fraction) for s in specs]}")
        else:
            if any(s.fraction is not None for s in specs):
                raise ShardingError("do not mix fractions and counts in one split config")
            if sum(s.count is None for s in specs) > 1:
                raise ShardingError("at most one split may take 'the rest' (*)")
            if any(s.count is not None and s.count < 0 for s in specs):
                raise ShardingError("split counts must be >= 0")

    @property
    def is_ratio(self) -> bool:
        return all(s.fraction is not None for s in self.specs)

    @classmethod
    def single(cls, name: str = "train") -> "SplitConfig":
        return cls((SplitSpec(name, fraction=1.0),))

    @classmethod
    def parse(cls, text: str) -> "SplitConfig":
        """Parses ``train=0.8,validation=0.1,test=0.1`` or ``train=*,validation=1000,test=1000``."""
        specs = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep:
                raise ShardingError(f"split {part!r}: expected NAME=FRACTION, NAME=COUNT or NAME=*")
            value = value.strip()
            if value == "*":
                specs.append(SplitSpec(name.strip()))
            elif value.isdigit():
                specs.append(SplitSpec(name.strip(), count=int(value)))
            else:
                try:
                    specs.append(SplitSpec(name.strip(), fraction=float(value)))
                except ValueError as err:
                    raise ShardingError(f"split {part!r}: {value!r} is not a fraction, count or *") from err
        return cls(tuple(specs))

    def ratio_bounds(self) -> list[tuple[str, int, int]]:
        """[(name, hash_lo, hash_hi)] of ratio splits, tiling [0, 2**64) in split order."""
        bounds: list[tuple[str, int, int]] = []
        cumulative = 0.0
        lo = 0
        for i, spec in enumerate(self.specs):
            cumulative += spec.fraction  # type: ignore[operator]
            hi = HASH_SPACE if i == len(self.specs) - 1 else min(HASH_SPACE, int(cumulative * HASH_SPACE))
            bounds.append((spec.name, lo, hi))
            lo = hi
        return bounds

    def bucket_grid(self) -> BucketGrid:
        """The planning grid: the uniform buckets plus ratio split boundaries (so no split cuts a bucket)."""
        return BucketGrid.with_bounds([lo for _, lo, _ in self.ratio_bounds()] if self.is_ratio else [])

    def to_text(self) -> str:
        return ",".join(f"{s.name}={s.fraction!r}" if s.fraction is not None
                        else f"{s.name}={'*' if s.count is None else s.count}" for s in self.specs)


@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    """How big shards are.

    Attributes:
        target_shard_bytes: aim for shards of about this many (uncompressed, framed) bytes.
        max_shard_bytes: hard cap; no shard exceeds it unless one record alone does (such records
            are rejected before planning). Default: twice the target.
        num_shards: if set, exactly this many shards per split (fewer only if a split has fewer
            records) instead of sizing by target; it must still respect the cap.
    """

    target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES
    max_shard_bytes: int | None = None
    num_shards: int | None = None

    def __post_init__(self) -> None:
        if self.target_shard_bytes < 1:
            raise ShardingError(f"target_shard_bytes must be >= 1, got {self.target_shard_bytes}")
        if self.max_shard_bytes is None:
            object.__setattr__(self, "max_shard_bytes", 2 * self.target_shard_bytes)
        if self.max_shard_bytes < self.target_shard_bytes:  # type: ignore[operator]
            raise ShardingError(f"max_shard_bytes ({self.max_shard_bytes}) must be >= target_shard_bytes "
                                f"({self.target_shard_bytes})")
        if self.num_shards is not None and not 1 <= self.num_shards <= 99999:
            raise ShardingError(f"num_shards must be in [1, 99999], got {self.num_shards}")

    @property
    def cap(self) -> int:
        return int(self.max_shard_bytes)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """One planned shard: the hash range [hash_lo, hash_hi) of one split."""

    split: str
    index: int
    count: int
    hash_lo: int
    hash_hi: int
    num_records: int
    num_record_bytes: int


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    name: str
    hash_lo: int
    hash_hi: int
    shards: tuple[ShardSpec, ...]

    @property
    def num_records(self) -> int:
        return sum(s.num_records for s in self.shards)

    @property
    def num_record_bytes(self) -> int:
        return sum(s.num_record_bytes for s in self.shards)


@dataclasses.dataclass(frozen=True)
class DatasetPlan:
    splits: tuple[SplitPlan, ...]

    @functools.cached_property
    def shards(self) -> tuple[ShardSpec, ...]:
        return tuple(shard for split in self.splits for shard in split.shards)

    @functools.cached_property
    def shard_starts(self) -> np.ndarray:
        """uint64 ``hash_lo`` of every shard, ascending."""
        return np.array([shard.hash_lo for shard in self.shards], dtype=np.uint64)

    def shard_numbers(self, hashes: np.ndarray) -> np.ndarray:
        """The position in ``shards`` of the shard holding each hash (shards tile the hash space
        in order; empty splits have no shards and, by construction, no records)."""
        numbers = np.searchsorted(self.shard_starts, np.asarray(hashes, dtype=np.uint64), side="right") - 1
        if len(numbers) and int(numbers.min()) < 0:
            raise ShardingError(f"hash {int(np.asarray(hashes).min())} is below every planned shard")
        return numbers


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
            raise ShardingError(f"refinement answered {sorted(by_id)}, expected targets {missing} too, once each")
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

    def finish(self, cuts: Sequence[Cut]) -> "DatasetPlan":
        """The plan, from the round's cuts."""
        by_id = self._answered(cuts)
        plans = []
        target_id = 0
        for (name, lo, hi), count in zip(self.split_edges, self.shard_counts):
            inner = [self.edge(by_id[target_id + k]) for k in range(count - 1)]
            target_id += max(count - 1, 0)
            plans.append(_split_plan(name, lo, hi, inner, self.sharding))
        return DatasetPlan(tuple(plans))


def _split_plan(name: str, lo: Edge, hi: Edge, inner: Sequence[Edge], config: ShardingConfig) -> SplitPlan:
    if hi.records == lo.records:
        return SplitPlan(name, lo.hash, hi.hash, ())
    edges = [lo]
    for edge in inner:  # a boundary that moved onto its neighbour leaves an empty shard: dropped
        if edges[-1].records < edge.records < hi.records:
            edges.append(edge)
    edges.append(hi)
    count = len(edges) - 1
    shards = tuple(ShardSpec(split=name, index=i, count=count, hash_lo=a.hash, hash_hi=b.hash,
                             num_records=b.records - a.records, num_record_bytes=b.num_bytes - a.num_bytes)
                   for i, (a, b) in enumerate(zip(edges, edges[1:])))
    largest = max(s.num_record_bytes for s in shards)
    if largest > config.cap:
        if config.num_shards is not None:
            raise ShardingError(f"split {name!r}: {config.num_shards} shards would hold up to {largest} bytes "
                                f"each, over max_shard_bytes {config.cap}; raise num_shards or the cap")
        raise ShardingError(f"split {name!r}: records with equal key hashes exceed max_shard_bytes "
                            f"{config.cap} together ({largest} bytes)")
    return SplitPlan(name, lo.hash, hi.hash, shards)


def _shard_count(name: str, num_records: int, num_bytes: int, largest: int, config: ShardingConfig) -> int:
    """Shards for a split. The midpoint rule keeps each within ``num_bytes / S + largest`` bytes,
    so unless the count is fixed, S is raised until that bound is under the hard cap."""
    if config.num_shards is not None:
        return min(config.num_shards, num_records)
    wanted = max(1, math.ceil(num_bytes / config.target_shard_bytes))
    room = config.cap - largest - 1
    if room > 0:
        wanted = max(wanted, math.ceil(num_bytes / room))
    else:
        wanted = num_records
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
    targets = []
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
        A DatasetPlan whose shards tile each split's hash range; a split may have zero shards.
    """
    hashes = np.asarray(hashes, dtype=np.uint64)
    sizes = np.asarray(framed_sizes, dtype=np.int64)
    if hashes.shape != sizes.shape:
        raise ShardingError(f"hashes {hashes.shape} and sizes {sizes.shape} differ in length")
    histogram = HashHistogram.of(splits.bucket_grid(), hashes, sizes)
    split_round = start_plan(histogram, splits, config)
    shard_round = plan_shards(split_round, refine_locally(split_round.requests, hashes, sizes))
    return shard_round.finish(refine_locally(shard_round.requests, hashes, sizes))



def split_of(key_hash_value: int, plan: DatasetPlan) -> str:
    """The split whose hash range holds a hash (ratio and count splits alike, once planned)."""
    for split in plan.splits:
        if split.hash_lo <= key_hash_value < split.hash_hi:
            return split.name
    raise ShardingError(f"hash {key_hash_value} is outside every split range")


def balance_spread(shard_bytes: Sequence[int]) -> float:
    """(largest - smallest) / largest over all shards but the smallest one, 0.0 for < 3 shards.

    The planner guarantees every shard is within one record of total/num_shards; "all but at most
    one" leaves room for the single short remainder shard a fixed count can produce.
    """
    if len(shard_bytes) < 3:
        return 0.0 if len(shard_bytes) < 2 else (max(shard_bytes) - min(shard_bytes)) / max(shard_bytes)
    kept = sorted(shard_bytes)[1:]
    return (kept[-1] - kept[0]) / kept[-1]

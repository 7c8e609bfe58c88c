"""Shard planning: which records go to which split and shard, from hashes and sizes alone.

Plan, then write. Every record is known here only by its salted key hash and its framed size
(16 bytes a record, tiny), so the plan for millions of records fits in a few tens of MB. Records
are ordered by hash (a deterministic pseudo-random order, so sorted input never gives
class-pure shards); a split is a hash range (ratio splits) or a rank range (exact counts);
each split is cut into shards of nearly equal bytes. A shard is a hash range too, so a shard
writer can pull exactly its records from any number of hash-sorted spill runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from beam_tfrecord.errors import ShardingError

HASH_SPACE = 2**64
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

    @property
    def shards(self) -> tuple[ShardSpec, ...]:
        return tuple(shard for split in self.splits for shard in split.shards)


def _split_bounds(hashes: np.ndarray, splits: SplitConfig) -> list[tuple[str, int, int]]:
    """[(name, hash_lo, hash_hi)] tiling [0, 2**64) in split order. ``hashes`` is sorted."""
    bounds: list[tuple[str, int, int]] = []
    if splits.is_ratio:
        cumulative = 0.0
        lo = 0
        for i, spec in enumerate(splits.specs):
            cumulative += spec.fraction  # type: ignore[operator]
            hi = HASH_SPACE if i == len(splits.specs) - 1 else min(HASH_SPACE, int(cumulative * HASH_SPACE))
            bounds.append((spec.name, lo, hi))
            lo = hi
        return bounds
    fixed = sum(s.count for s in splits.specs if s.count is not None)
    if fixed > len(hashes) or (all(s.count is not None for s in splits.specs) and fixed != len(hashes)):
        raise ShardingError(f"split counts {splits.to_text()} need {fixed} records in total, the input has "
                            f"{len(hashes)}")
    rank = 0
    lo = 0
    for i, spec in enumerate(splits.specs):
        rank += spec.count if spec.count is not None else len(hashes) - fixed
        hi = HASH_SPACE if i == len(splits.specs) - 1 or rank >= len(hashes) else int(hashes[rank])
        bounds.append((spec.name, lo, max(lo, hi)))
        lo = max(lo, hi)
    return bounds


def _cut(sizes: np.ndarray, num_shards: int) -> np.ndarray:
    """Start index of each shard so that shards hold nearly equal bytes (each record goes to the
    shard that holds its midpoint). Empty shards are dropped."""
    total = float(sizes.sum())
    midpoints = np.cumsum(sizes, dtype=np.float64) - sizes / 2.0
    shard_of = np.minimum((midpoints * num_shards / total).astype(np.int64), num_shards - 1)
    return np.flatnonzero(np.diff(shard_of, prepend=-1))


def _plan_split(name: str, hash_lo: int, hash_hi: int, hashes: np.ndarray, sizes: np.ndarray,
                config: ShardingConfig) -> SplitPlan:
    if len(hashes) == 0:
        return SplitPlan(name, hash_lo, hash_hi, ())
    largest = int(sizes.max())
    if largest > config.cap:
        raise ShardingError(f"split {name!r}: a record of {largest} bytes exceeds max_shard_bytes {config.cap}")
    total = int(sizes.sum())
    wanted = config.num_shards or max(1, math.ceil(total / config.target_shard_bytes))
    num_shards = min(wanted, len(hashes))
    while True:
        starts = _cut(sizes, num_shards)
        # Shard boundaries are hashes; equal hashes never straddle a boundary.
        edges = [hash_lo] + [int(hashes[i]) for i in starts[1:]] + [hash_hi]
        edges = sorted(set(edges), key=edges.index)
        positions = np.searchsorted(hashes, np.array(edges[1:-1], dtype=np.uint64), side="left")
        index_edges = [0, *positions.tolist(), len(hashes)]
        cumulative = np.concatenate(([0], np.cumsum(sizes)))
        shard_bytes = [int(cumulative[b] - cumulative[a]) for a, b in zip(index_edges, index_edges[1:])]
        if max(shard_bytes) <= config.cap:
            break
        if config.num_shards is not None:
            raise ShardingError(f"split {name!r}: {config.num_shards} shards would hold up to {max(shard_bytes)} "
                                f"bytes each, over max_shard_bytes {config.cap}; raise num_shards or the cap")
        if num_shards >= len(hashes):
            raise ShardingError(f"split {name!r}: records with equal key hashes exceed max_shard_bytes together")
        num_shards += 1
    count = len(edges) - 1
    shards = tuple(
        ShardSpec(split=name, index=i, count=count, hash_lo=edges[i], hash_hi=edges[i + 1],
                  num_records=index_edges[i + 1] - index_edges[i], num_record_bytes=shard_bytes[i])
        for i in range(count)
    )
    return SplitPlan(name, hash_lo, hash_hi, shards)


def plan_dataset(hashes: np.ndarray, framed_sizes: np.ndarray, splits: SplitConfig,
                 config: ShardingConfig) -> DatasetPlan:
    """Plans splits and shards.

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
    order = np.argsort(hashes, kind="stable")
    hashes, sizes = hashes[order], sizes[order]
    plans = []
    for name, lo, hi in _split_bounds(hashes, splits):
        a = int(np.searchsorted(hashes, np.uint64(lo), side="left"))
        b = len(hashes) if hi >= HASH_SPACE else int(np.searchsorted(hashes, np.uint64(hi), side="left"))
        plans.append(_plan_split(name, lo, hi, hashes[a:b], sizes[a:b], config))
    return DatasetPlan(tuple(plans))


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

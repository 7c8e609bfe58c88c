"""Shard planning values: split and sharding configuration, and the plan they lead to.

A plan is a value you can print and test: splits and shards as hash ranges (``cut_planner`` makes it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from beam_tfrecord.core.hashing import HASH_SPACE
from beam_tfrecord.core.summary import BucketGrid
from beam_tfrecord.core.units import MiB
from beam_tfrecord.errors import PipelineInvariantError, ShardingError

DEFAULT_TARGET_SHARD_BYTES = 128 * MiB
# With WriteToTFRecord's count and no cap, a shard may be as large as the data needs (its behaviour); still a
# cap, so that a single oversized record is refused rather than planned.
COUNTED_SHARD_CAP_BYTES = 1 << 40


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
        num_shards: if set, exactly this many shards per split instead of sizing by target, of
            balanced bytes; those the records cannot fill (fewer records than shards, or records
            larger than a shard's share) are empty files (``SplitPlan.empty_shards``). It must still
            respect the cap.
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

    @classmethod
    def of_beam_count(cls, num_shards: int, *, target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
                      max_shard_bytes: int | None = None) -> ShardingConfig:
        """``beam.io.WriteToTFRecord``'s ``num_shards``, where 0 means "sized by bytes" (``num_shards=None`` here).

        With a count and no ``max_shard_bytes`` shards are not capped (``COUNTED_SHARD_CAP_BYTES``), as Beam's are not.
        """
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 0:
            raise ShardingError(f"num_shards must be an int >= 0 (0: as many as target_shard_bytes gives), "
                                f"got {num_shards!r}")
        if num_shards and max_shard_bytes is None:
            max_shard_bytes = max(COUNTED_SHARD_CAP_BYTES, target_shard_bytes)
        return cls(target_shard_bytes=target_shard_bytes, max_shard_bytes=max_shard_bytes,
                   num_shards=num_shards or None)


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """One planned shard: the hash range [hash_lo, hash_hi) of one split.

    ``count`` is the split's number of shards (its file names' ``-of-NNNNN``); ``num_filled`` how
    many of them hold records (None: all), the shards a live progress display waits for.
    """

    split: str
    index: int
    count: int
    hash_lo: int
    hash_hi: int
    num_records: int
    num_record_bytes: int
    num_filled: int | None = None


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """One split's shards.

    Attributes:
        shards: the shards that hold records, tiling [hash_lo, hash_hi) in index order.
        empty_shards: the shards planned empty, after those (indices ``len(shards)`` on): with
            ``num_shards`` set, as many as the records cannot fill (fewer records than shards,
            or records larger than a shard's share); otherwise one when the split has no record.
            No record is routed to them; each is still written (an empty file) and published,
            as Beam's ``WriteToTFRecord`` writes ``num_shards`` files, at least one.
    """

    name: str
    hash_lo: int
    hash_hi: int
    shards: tuple[ShardSpec, ...]
    empty_shards: tuple[ShardSpec, ...] = ()

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
        """The shards that hold records, in hash order: a record's shard number is its position here."""
        return tuple(shard for split in self.splits for shard in split.shards)

    @functools.cached_property
    def empty_shards(self) -> tuple[ShardSpec, ...]:
        """The shards planned empty (``SplitPlan.empty_shards``), written at publication."""
        return tuple(shard for split in self.splits for shard in split.empty_shards)

    @functools.cached_property
    def shard_starts(self) -> np.ndarray:
        """uint64 ``hash_lo`` of every shard, ascending."""
        return np.array([shard.hash_lo for shard in self.shards], dtype=np.uint64)

    def shard_numbers(self, hashes: np.ndarray) -> np.ndarray:
        """The position in ``shards`` of the shard holding each hash (shards tile the hash space
        in order; empty splits have no shards and, by construction, no records)."""
        numbers = np.searchsorted(self.shard_starts, np.asarray(hashes, dtype=np.uint64), side="right") - 1
        if len(numbers) and int(numbers.min()) < 0:
            raise PipelineInvariantError("plan", f"hash {int(np.asarray(hashes).min())} is below every planned shard")
        return numbers


def balance_spread(shard_bytes: Sequence[int]) -> float:
    """(largest - smallest) / largest over all shards but the smallest one, 0.0 for < 3 shards.

    The planner guarantees every shard is within one record of total/num_shards; "all but at most
    one" leaves room for the single short remainder shard a fixed count can produce.
    """
    if len(shard_bytes) < 3:
        return 0.0 if len(shard_bytes) < 2 else (max(shard_bytes) - min(shard_bytes)) / max(shard_bytes)
    kept = sorted(shard_bytes)[1:]
    return (kept[-1] - kept[0]) / kept[-1]

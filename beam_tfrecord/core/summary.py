"""Mergeable summaries of records for planning: a fixed hash-bucket histogram and exact cuts in a bucket.

Histograms add up in any order; only buckets where a boundary falls are looked at record by record.
See docs/performance.md, "How a dataset is written".
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import cast

import numpy as np

from beam_tfrecord.core.hashing import HASH_SPACE
from beam_tfrecord.errors import ShardingError

# 65,536 buckets (~1 MB dense, sparse when pickled): a bucket where a boundary falls holds ~records / 65,536.
# Bucket edges are this grid plus ratio splits' hash boundaries, so a ratio split is a union of buckets.
BUCKET_BITS = 16


@dataclasses.dataclass(frozen=True, eq=False)
class BucketGrid:
    """Hash buckets: bucket ``j`` holds hashes in ``[starts[j], starts[j + 1])`` (the last ends at 2**64).

    Attributes:
        starts: ascending uint64 bucket starts, the first 0.
    """

    starts: np.ndarray

    @classmethod
    def with_bounds(cls, bounds: Sequence[int] = ()) -> "BucketGrid":
        """The uniform grid of ``2**BUCKET_BITS`` buckets plus extra bucket starts ``bounds``.

        One shared, read-only grid per set of bounds and process: every unpickled histogram refers to it.
        """
        return _grid_with_bounds(tuple(sorted({int(b) for b in bounds if 0 < b < HASH_SPACE})))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BucketGrid) and np.array_equal(self.starts, other.starts)

    def __reduce__(self) -> tuple:
        # Pickled as its extra bounds (a few integers), not 512 KiB of starts: it travels with every
        # histogram and every round's requests.
        uniform = (self.starts & np.uint64(2 ** (64 - BUCKET_BITS) - 1)) == 0
        return BucketGrid.with_bounds, (tuple(int(b) for b in self.starts[~uniform].tolist()),)

    def __hash__(self) -> int:
        return hash(self.starts.tobytes())

    @property
    def num_buckets(self) -> int:
        return len(self.starts)

    def bucket_of(self, hashes: np.ndarray) -> np.ndarray:
        """The bucket of each hash (int64)."""
        return np.searchsorted(self.starts, np.asarray(hashes, dtype=np.uint64), side="right").astype(np.int64) - 1

    def start(self, bucket: int) -> int:
        return int(self.starts[bucket])

    def end(self, bucket: int) -> int:
        return HASH_SPACE if bucket + 1 >= len(self.starts) else int(self.starts[bucket + 1])

    def index_of_start(self, hash_value: int) -> int:
        """The bucket that starts exactly at ``hash_value`` (``num_buckets`` for 2**64)."""
        if hash_value >= HASH_SPACE:
            return self.num_buckets
        j = int(np.searchsorted(self.starts, np.uint64(hash_value), side="left"))
        if j >= self.num_buckets or int(self.starts[j]) != hash_value:
            raise ShardingError(f"hash {hash_value} is not a bucket start of this grid")
        return j


@functools.lru_cache(maxsize=64)
def _grid_with_bounds(extra: tuple[int, ...]) -> BucketGrid:
    uniform = np.arange(2**BUCKET_BITS, dtype=np.uint64) << np.uint64(64 - BUCKET_BITS)
    starts = np.unique(np.concatenate([uniform, np.array(extra, dtype=np.uint64)]))
    starts.setflags(write=False)
    return BucketGrid(starts)


@dataclasses.dataclass(eq=False)
class HashHistogram:
    """Record counts and framed bytes per bucket of a grid, and the largest record. Adds up.

    Attributes:
        grid: the buckets.
        counts: int64 records per bucket.
        sizes: int64 framed bytes per bucket.
        largest: framed size of the largest record (0 when empty).
    """

    grid: BucketGrid
    counts: np.ndarray
    sizes: np.ndarray
    largest: int = 0

    @classmethod
    def empty(cls, grid: BucketGrid) -> "HashHistogram":
        return cls(grid, np.zeros(grid.num_buckets, np.int64), np.zeros(grid.num_buckets, np.int64))

    @classmethod
    def of(cls, grid: BucketGrid, hashes: np.ndarray, framed_sizes: np.ndarray) -> "HashHistogram":
        """The histogram of records given by hash and framed size (any order)."""
        sizes = np.asarray(framed_sizes, dtype=np.int64)
        if len(hashes) != len(sizes):
            raise ShardingError(f"{len(hashes)} hashes and {len(sizes)} sizes differ in length")
        if len(sizes) and int(sizes.min()) < 0:
            raise ShardingError(f"framed sizes must be >= 0, got {int(sizes.min())}")
        buckets = grid.bucket_of(hashes)
        counts = np.bincount(buckets, minlength=grid.num_buckets).astype(np.int64)
        # Float weights are exact while a bucket's bytes stay under 2**53 (8 PiB) per call.
        byte_sums = np.bincount(buckets, weights=sizes, minlength=grid.num_buckets).astype(np.int64)
        return cls(grid, counts, byte_sums, int(sizes.max()) if len(sizes) else 0)

    def add_records(self, hashes: np.ndarray, framed_sizes: np.ndarray) -> "HashHistogram":
        """Adds records (in place, without a dense temporary: cheap for a few) and returns the histogram."""
        sizes = np.asarray(framed_sizes, dtype=np.int64)
        if len(hashes) != len(sizes):
            raise ShardingError(f"{len(hashes)} hashes and {len(sizes)} sizes differ in length")
        if not len(sizes):
            return self
        if int(sizes.min()) < 0:
            raise ShardingError(f"framed sizes must be >= 0, got {int(sizes.min())}")
        buckets = self.grid.bucket_of(hashes)
        np.add.at(self.counts, buckets, 1)
        np.add.at(self.sizes, buckets, sizes)
        self.largest = max(self.largest, int(sizes.max()))
        return self

    def add(self, other: "HashHistogram") -> "HashHistogram":
        """Adds ``other`` into this histogram (in place) and returns it."""
        if other.grid is not self.grid and other.grid != self.grid:
            raise ShardingError("histograms over different bucket grids cannot be merged")
        self.counts += other.counts
        self.sizes += other.sizes
        self.largest = max(self.largest, other.largest)
        return self

    @property
    def num_records(self) -> int:
        return int(self.counts.sum())

    @property
    def num_bytes(self) -> int:
        return int(self.sizes.sum())

    def cumulative(self) -> tuple[np.ndarray, np.ndarray]:
        """(records, bytes) before each bucket, ``num_buckets + 1`` entries each (the last: totals)."""
        return (np.concatenate(([0], np.cumsum(self.counts))).astype(np.int64),
                np.concatenate(([0], np.cumsum(self.sizes))).astype(np.int64))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, HashHistogram) and self.grid == other.grid and self.largest == other.largest
                and np.array_equal(self.counts, other.counts) and np.array_equal(self.sizes, other.sizes))

    def __getstate__(self) -> dict:
        # Sparse on the wire: a worker that encoded a few thousand records sends kilobytes, not 1 MB.
        used = np.flatnonzero(self.counts).astype(np.int32)
        return {"grid": self.grid, "used": used, "counts": self.counts[used], "sizes": self.sizes[used],
                "largest": self.largest}

    def __setstate__(self, state: dict) -> None:
        grid = state["grid"]
        self.grid = grid
        self.counts = np.zeros(grid.num_buckets, np.int64)
        self.sizes = np.zeros(grid.num_buckets, np.int64)
        self.counts[state["used"]] = state["counts"]
        self.sizes[state["used"]] = state["sizes"]
        self.largest = state["largest"]


@dataclasses.dataclass(frozen=True)
class CutTarget:
    """A boundary to find inside one bucket; exactly one of ``rank`` and ``position2`` is set.

    Attributes:
        target_id: which boundary of the plan this is.
        bucket: the bucket it falls in.
        rank: cut before the record of this rank in the bucket (hash order): count splits.
        position2: cut before the first record whose doubled midpoint, ``2 * bytes before it in the
            bucket + its size``, is at least this: byte-balanced shards (the doubling keeps it integral).
    """

    target_id: int
    bucket: int
    rank: int | None = None
    position2: int | None = None

    def __post_init__(self) -> None:
        if (self.rank is None) == (self.position2 is None):
            raise ShardingError(f"cut target {self.target_id}: give a rank or a position, not both or neither")


@dataclasses.dataclass(frozen=True)
class Cut:
    """A boundary found in one bucket: records below it have hashes < ``hash``.

    Attributes:
        target_id: the boundary it answers.
        bucket: its bucket.
        hash: the first hash above the cut (a bucket edge when the cut is at one).
        records_before: records of the bucket below the cut.
        bytes_before: their framed bytes.
    """

    target_id: int
    bucket: int
    hash: int
    records_before: int
    bytes_before: int


def refine_bucket(grid: BucketGrid, bucket: int, hashes: np.ndarray, framed_sizes: np.ndarray,
                  targets: Sequence[CutTarget]) -> list[Cut]:
    """Finds ``targets`` exactly among one bucket's records (all of them, from every worker, any order).

    Records are ordered by (hash, size), so the answer does not depend on where they came from;
    records with equal hashes never straddle a cut (it moves before the first of them).
    """
    hashes = np.asarray(hashes, dtype=np.uint64)
    sizes = np.asarray(framed_sizes, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    if len(order) > 1 and bool((np.diff(hashes[order]) == 0).any()):
        order = np.lexsort((sizes, hashes))  # equal hashes: by size, never by arrival order
    hashes, sizes = hashes[order], sizes[order]
    if len(hashes) and (grid.bucket_of(hashes[[0, -1]]) != bucket).any():
        raise ShardingError(f"records outside bucket {bucket} were sent to refine it")
    before = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    midpoints2 = 2 * before[:-1] + sizes
    n = len(hashes)
    cuts = []
    for target in targets:
        if target.bucket != bucket:
            raise ShardingError(f"cut target {target.target_id} is for bucket {target.bucket}, not {bucket}")
        if target.rank is not None:
            i = min(max(target.rank, 0), n)
        else:
            i = int(np.searchsorted(midpoints2, cast(int, target.position2), side="left"))  # set: see CutTarget
        if 0 < i < n:
            i = int(np.searchsorted(hashes, hashes[i], side="left"))  # equal hashes stay together
        if i == 0:
            cut_hash = grid.start(bucket)
        elif i == n:
            cut_hash = grid.end(bucket)
        else:
            cut_hash = int(hashes[i])
        cuts.append(Cut(target.target_id, bucket, cut_hash, i, int(before[i])))
    return cuts

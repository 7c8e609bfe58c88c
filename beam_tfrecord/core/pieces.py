"""Shard pieces: a large shard cut by hash sub-range for several writers, then joined (pure: no Beam, no storage).

The pieces concatenate to the shard one writer would write; only uncompressed TFRecord can be joined
(``concatenable``). See docs/performance.md, "The shard phase with fewer shards than workers".
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.core.units import MiB
from beam_tfrecord.errors import WriterOptionError

DEFAULT_MIN_PIECE_BYTES = 16 * MiB  # a smaller piece saves less than the join's extra read and write costs
PIECES_COUNTER = "shard_pieces_written"  # the Beam counter of the pieces written (a job's summary reads it)


@dataclasses.dataclass(frozen=True)
class ShardWriters:
    """How many writers the shard phase keeps busy, and the smallest piece worth a task of its own.

    Attributes:
        writers: the workers writing shards; 1: one writer per shard, never pieces (the shuffle fan-in's way).
        min_piece_bytes: no shard is cut into pieces smaller than this (the join reads and writes the
            shard's bytes once more: a small piece saves less than that costs).
    """

    writers: int = 1
    min_piece_bytes: int = DEFAULT_MIN_PIECE_BYTES

    def __post_init__(self) -> None:
        if self.writers < 1:
            raise WriterOptionError(f"shard_writers must be >= 1, got {self.writers}")
        if self.min_piece_bytes < 1:
            raise WriterOptionError(f"min_piece_bytes must be >= 1, got {self.min_piece_bytes}")


@dataclasses.dataclass(frozen=True)
class PieceSpec:
    """One planned piece of a shard: the records with hash in [hash_lo, hash_hi) of ``shard``'s range.

    Attributes:
        shard: the planned shard the piece belongs to.
        index: the piece's place in the shard (0 first).
        count: how many pieces the shard is cut into.
        hash_lo, hash_hi: the piece's hash range.
        num_records: records in the piece.
        num_record_bytes: their TFRecord-framed bytes (the piece file's size).
    """

    shard: ShardSpec
    index: int
    count: int
    hash_lo: int
    hash_hi: int
    num_records: int
    num_record_bytes: int

    def as_shard_spec(self) -> ShardSpec:
        """The piece as a shard spec of its own range and counts (what its writer checks it against)."""
        return dataclasses.replace(self.shard, hash_lo=self.hash_lo, hash_hi=self.hash_hi,
                                   num_records=self.num_records, num_record_bytes=self.num_record_bytes)

    def filename(self, shard_filename: str) -> str:
        """The piece's fixed file name (the same in a re-run, so a re-run writes the same file)."""
        return f"{shard_filename}.piece-{self.index:05d}-of-{self.count:05d}"


def concatenable(compression: Compression, file_format: FileFormat) -> bool:
    """Whether shards of this compression and format are the concatenation of their pieces' files."""
    return file_format.stores_framed_records and compression is Compression.NONE


def pieces_per_shard(shard_bytes: Sequence[int], *, writers: int, min_piece_bytes: int) -> list[int]:
    """How many pieces each shard is cut into: about ``shard_bytes * writers / total`` (so each writer
    gets a share of the bytes), never fewer than one, more than ``writers``, or pieces smaller than
    ``min_piece_bytes``. Shards of about equal size at least as many as ``writers`` stay whole."""
    total = sum(shard_bytes)
    if writers <= 1 or total <= 0:
        return [1] * len(shard_bytes)
    return [max(1, min(-(-size * writers // total), size // max(min_piece_bytes, 1), writers))
            for size in shard_bytes]


def cut_pieces(shard: ShardSpec, hashes: np.ndarray, framed_sizes: np.ndarray, pieces: int) -> tuple[PieceSpec, ...]:
    """The shard cut into about ``pieces`` pieces of equal bytes, at hash boundaries.

    Args:
        shard: the planned shard.
        hashes: the key hash of every record in the shard (any order).
        framed_sizes: each record's framed size, in the order of ``hashes``.
        pieces: pieces wanted; fewer come out when records sharing a hash (or one large record)
            leave no boundary near a cut. One piece: the shard whole.

    Memory: 16 bytes per record of the shard (a sort of its hashes and sizes).
    """
    order = np.argsort(hashes, kind="stable")
    hashes = np.asarray(hashes, dtype=np.uint64)[order]
    ends = np.cumsum(np.asarray(framed_sizes, dtype=np.int64)[order])
    total = int(ends[-1]) if len(ends) else 0
    positions = [0]
    for k in range(1, pieces):
        target = total * k // pieces
        after = int(np.searchsorted(ends, target, side="left")) + 1  # the records that reach the target
        if after >= len(hashes):
            break
        # Records sharing a hash stay in one piece: the cut moves back before them or on after them.
        nearest = [at for at in (int(np.searchsorted(hashes, hashes[after], side="left")),
                                 int(np.searchsorted(hashes, hashes[after - 1], side="right")))
                   if positions[-1] < at < len(hashes)]
        if nearest:
            positions.append(min(nearest, key=lambda at: abs(int(ends[at - 1]) - target)))
    positions.append(len(hashes))
    count = len(positions) - 1
    result = []
    for index, (a, b) in enumerate(itertools.pairwise(positions)):
        lo = shard.hash_lo if index == 0 else int(hashes[a])
        hi = shard.hash_hi if index == count - 1 else int(hashes[b])
        before = int(ends[a - 1]) if a else 0
        result.append(PieceSpec(shard=shard, index=index, count=count, hash_lo=lo, hash_hi=hi, num_records=b - a,
                                num_record_bytes=(int(ends[b - 1]) if b else 0) - before))
    return tuple(result)

"""Shard passes: the live runs of one shard that a reader takes in one pass over its file.

A shard with deleted records is one ``ReadSegment`` per live run (``slicing.resolve_split``); read run by run, a
sequential shard would be walked from its start once per run (k deletions: k + 1 walks). A pass reads the file's
records ``[start, stop)`` once and drops the deleted ones between its runs, so a version with deletion vectors
reads as fast as its compacted twin. Every reader reads a plan's passes (``ReadPlan.passes``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.formats import ShardReader
from beam_tfrecord.reader.order.slicing import ReadSegment, sub_range


@dataclasses.dataclass(frozen=True)
class ShardPass:
    """Runs of one shard read in one pass: the file's records ``[start, stop)`` but those between the runs.

    Attributes:
        segments: the runs, in file order, all of one shard; only deleted records lie between two of them.
    """

    segments: tuple[ReadSegment, ...]

    def __post_init__(self) -> None:
        if not self.segments:
            raise ReaderError("a shard pass reads at least one segment")

    @property
    def shard(self) -> ShardInfo:
        return self.segments[0].shard

    @property
    def start(self) -> int:
        """The file's first record read."""
        return self.segments[0].skip

    @property
    def stop(self) -> int:
        """The file's record after the last one read."""
        return self.segments[-1].skip + self.segments[-1].take

    @property
    def num_records(self) -> int:
        """Records the pass returns."""
        return sum(segment.take for segment in self.segments)

    @property
    def reaches_end(self) -> bool:
        """Whether the pass reads to the file's last record (so the file's count is checked)."""
        return self.segments[-1].reaches_end

    @property
    def whole(self) -> bool:
        """Whether the pass returns every record of the file."""
        return self.start == 0 and self.reaches_end and len(self.segments) == 1

    @functools.cached_property
    def dropped(self) -> np.ndarray:
        """The records read but not returned (the deleted ones between runs), relative to ``start`` (int64)."""
        gaps = [np.arange(before.skip + before.take, after.skip, dtype=np.int64)
                for before, after in zip(self.segments, self.segments[1:])]
        return np.concatenate(gaps) - self.start if gaps else np.zeros(0, dtype=np.int64)

    def keep(self) -> np.ndarray | None:
        """Whether each record read, ``[start, stop)``, is returned (bool); None when all are."""
        if len(self.segments) == 1:
            return None
        keep = np.ones(self.stop - self.start, dtype=bool)
        keep[self.dropped] = False
        return keep

    def after(self, first: int) -> "ShardPass":
        """The same pass from its returned record ``first`` on (``first`` < ``num_records``)."""
        return ShardPass(sub_range(self.segments, first, self.num_records))


def _joins(before: ReadSegment, after: ReadSegment) -> bool:
    """Whether ``after`` continues ``before``'s pass: the same shard, later in it, only deleted records between."""
    if before.shard is not after.shard and before.shard != after.shard:
        return False
    end = before.skip + before.take
    if after.skip == end:
        return True
    deletions = before.shard.deletions
    return (after.skip > end and deletions is not None
            and deletions.positions.range_cardinality(end, after.skip) == after.skip - end)


def shard_passes(segments: Sequence[ReadSegment]) -> tuple[ShardPass, ...]:
    """The segments, in order, with consecutive runs of one shard that only deletions part joined into passes."""
    groups: list[list[ReadSegment]] = []
    for segment in segments:
        if groups and _joins(groups[-1][-1], segment):
            groups[-1].append(segment)
        else:
            groups.append([segment])
    return tuple(ShardPass(tuple(group)) for group in groups)


def pass_blocks(reader: ShardReader, shard_pass: ShardPass) -> Iterator[RecordBlock]:
    """A pass's records in blocks: ``reader`` walks the file's ``[start, stop)`` once (checked as it checks every
    read), and the dropped records are cut out of each block."""
    keep = shard_pass.keep()
    at = 0
    for block in reader.iter_blocks(shard_pass.start, shard_pass.stop):
        if keep is not None:
            kept = keep[at:at + len(block)]
            at += len(block)
            if not kept.all():
                block = block.select(kept)
        if len(block):
            yield block


def pass_records(reader: ShardReader, shard_pass: ShardPass) -> Iterator[tuple[bytes, int]]:
    """A pass's (record, offset), as ``reader.iter_records`` gives them, walking the file's ``[start, stop)`` once."""
    keep = shard_pass.keep()
    records = reader.iter_records(shard_pass.start, shard_pass.stop)
    if keep is None:
        yield from records
        return
    kept = keep.tolist()
    for number, record in enumerate(records):  # to the reader's end: a read that reaches the file's end checks it
        if kept[number]:
            yield record

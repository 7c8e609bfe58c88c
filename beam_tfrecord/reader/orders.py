"""The order one dataset's records take in an epoch: a pure function of (plan, seed, epoch), read by range.

Exact resume needs every position of an epoch's order to name one record whatever the number
of readers, so the order is computed, never the side effect of a buffer filled as records
arrive. Three orders, each readable from any position ``[lo, hi)``:

* ``StoredOrder`` (no shuffle): the records as the split expression lists them, streamed.
* ``PermutedOrder`` (shuffle, random-access format such as ArrayRecord): one seeded permutation
  of all the records (8 bytes per record), read by index in blocks.
* ``WindowedOrder`` (shuffle, sequential format such as TFRecord): what tf.data's
  ``interleave`` + ``shuffle`` do, made a function of the position. Shards (the plan's
  segments) are permuted and taken ``CYCLE_SHARDS`` at a time; window ``t`` of such a cycle
  holds chunk ``t`` (``shuffle_buffer // CYCLE_SHARDS`` records) of each of its shards, and its
  records are permuted by a seed of their own. A reader streams the cycle's shards side by
  side, so each shard is read once, front to back; memory is one window (about
  ``shuffle_buffer`` records). Examples next to each other come from up to ``CYCLE_SHARDS``
  shards, not from the whole split: a weaker shuffle than a global permutation, as tf.data's is.
  Starting in the middle of a cycle (a resume, or a rank's first window) reads its shards from
  their start up to the window (TFRecord has no index).

Each order also reads ``[lo, hi)`` in blocks (``iter_blocks``, ``core.blocks.RecordBlock``), for the
block decoder (``block_decode``): a stored run straight from the format's block reader, a
permutation's records a read block at a time, a window's records gathered into blocks.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Generator, Iterator, Sequence

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.reader.random_access import RandomAccessRecords
from beam_tfrecord.reader.read_plan import ReadPlan
from beam_tfrecord.reader.slicing import ReadSegment, sub_range

GATHERED_RECORDS = 1024  # records gathered into one block when an order is not a stored run
CYCLE_SHARDS = 16  # shards read side by side in a windowed shuffle (tf.data's interleave cycle)
Record = tuple[bytes, str, int]  # (serialized record, shard path, offset in the shard)


def generator(*seed_parts: int) -> np.random.Generator:
    """A NumPy generator from several ints (seed, epoch, dataset, window...), the same in every process."""
    return np.random.Generator(np.random.PCG64([part & (2**63 - 1) for part in seed_parts]))


class RecordOrder(abc.ABC):
    """One dataset's records in one epoch's order."""

    def __init__(self, plan: ReadPlan, *, verify: bool) -> None:
        self.plan = plan
        self.verify = verify
        self.num_records = plan.num_records

    @abc.abstractmethod
    def iter_range(self, lo: int, hi: int) -> Iterator[Record]:
        """The records at positions ``[lo, hi)`` of this order."""

    def iter_blocks(self, lo: int, hi: int) -> Iterator[RecordBlock]:
        """The records at positions ``[lo, hi)``, in order, in blocks (gathered from ``iter_range`` here)."""
        records = self.iter_range(lo, hi)
        try:
            while chunk := list(itertools.islice(records, GATHERED_RECORDS)):
                yield gathered(chunk)
        finally:
            records.close()  # type: ignore[attr-defined]

    def _iter_segment(self, segment: ReadSegment) -> Iterator[Record]:
        path = self.plan.path(segment)
        with self.plan.open_shard(segment, verify=self.verify) as reader:
            for record, offset in reader.iter_records(segment.skip, segment.skip + segment.take):
                yield record, path, offset


class StoredOrder(RecordOrder):
    """The records in the order the split expression lists them."""

    def iter_range(self, lo: int, hi: int) -> Iterator[Record]:
        for segment in sub_range(self.plan.segments, lo, hi):
            yield from self._iter_segment(segment)

    def iter_blocks(self, lo: int, hi: int) -> Iterator[RecordBlock]:
        """A stored run read straight in the format's blocks (TFRecord: framing walked a buffer at a time)."""
        for segment in sub_range(self.plan.segments, lo, hi):
            with self.plan.open_shard(segment, verify=self.verify) as reader:
                yield from reader.iter_blocks(segment.skip, segment.skip + segment.take)


class PermutedOrder(RecordOrder):
    """A seeded permutation of every record (random-access formats)."""

    def __init__(self, plan: ReadPlan, *, verify: bool, seed_parts: Sequence[int]) -> None:
        super().__init__(plan, verify=verify)
        self._permutation = generator(*seed_parts).permutation(self.num_records)

    def iter_range(self, lo: int, hi: int) -> Iterator[Record]:
        records = RandomAccessRecords(self.plan)
        try:
            yield from records.iter_positions(self._permutation[lo:hi])
        finally:
            records.close()

    def iter_blocks(self, lo: int, hi: int) -> Iterator[RecordBlock]:
        records = RandomAccessRecords(self.plan)
        try:
            for found in records.iter_blocks(self._permutation[lo:hi]):
                yield gathered(found)
        finally:
            records.close()


class WindowedOrder(RecordOrder):
    """Shuffled shard order, shards read ``CYCLE_SHARDS`` at a time, records permuted per window."""

    def __init__(self, plan: ReadPlan, *, verify: bool, seed_parts: Sequence[int], shuffle_buffer: int) -> None:
        super().__init__(plan, verify=verify)
        self._seed_parts = tuple(seed_parts)
        segments = [plan.segments[i] for i in generator(*seed_parts).permutation(len(plan.segments)).tolist()]
        cycle = max(1, min(CYCLE_SHARDS, len(segments)))
        self._chunk = max(1, shuffle_buffer // cycle)
        self._cycles = [segments[i:i + cycle] for i in range(0, len(segments), cycle)]
        windows: list[tuple[int, int]] = []  # (cycle, chunk number)
        sizes: list[int] = []
        for number, group in enumerate(self._cycles):
            takes = np.array([segment.take for segment in group], dtype=np.int64)
            for t in range(-(-int(takes.max()) // self._chunk)):
                windows.append((number, t))
                sizes.append(int(np.clip(takes - t * self._chunk, 0, self._chunk).sum()))
        self._windows = windows
        self._starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    def _from(self, segment: ReadSegment, first: int) -> Generator[Record, None, None]:
        if first < segment.take:
            yield from self._iter_segment(ReadSegment(segment.shard, segment.skip + first, segment.take - first))

    def iter_range(self, lo: int, hi: int) -> Iterator[Record]:
        number = int(np.searchsorted(self._starts, lo, side="right")) - 1
        open_cycle, streams = -1, list[Generator[Record, None, None]]()
        try:
            while number < len(self._windows) and self._starts[number] < hi:
                cycle, t = self._windows[number]
                if cycle != open_cycle:  # open the cycle's shards at this window's chunk
                    for stream in streams:
                        stream.close()
                    streams = [self._from(segment, t * self._chunk) for segment in self._cycles[cycle]]
                    open_cycle = cycle
                window: list[Record] = []
                for segment, stream in zip(self._cycles[cycle], streams):
                    window.extend(itertools.islice(stream, max(0, min(self._chunk, segment.take - t * self._chunk))))
                start = int(self._starts[number])
                order = generator(*self._seed_parts, number).permutation(len(window))
                for index in order[max(lo - start, 0):min(hi - start, len(window))].tolist():
                    yield window[index]
                number += 1
        finally:
            for stream in streams:
                stream.close()


def gathered(records: Sequence[Record]) -> RecordBlock:
    """Records of any shards as one block (each keeps its shard and offset, for errors)."""
    return RecordBlock.of_records("", [record for record, _, _ in records], [offset for _, _, offset in records],
                                  paths=[path for _, path, _ in records])


def make_order(plan: ReadPlan, *, shuffle: bool, seed_parts: Sequence[int], shuffle_buffer: int,
               verify: bool) -> RecordOrder:
    """The order of a dataset's records in one epoch (``seed_parts``: seed, epoch, dataset number)."""
    if not shuffle:
        return StoredOrder(plan, verify=verify)
    if plan.format.random_access:
        return PermutedOrder(plan, verify=verify, seed_parts=seed_parts)
    return WindowedOrder(plan, verify=verify, seed_parts=seed_parts, shuffle_buffer=shuffle_buffer)

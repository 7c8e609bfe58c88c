"""The order one dataset's records take in an epoch: a pure function of (plan, seed, epoch), read by range.

Every position names one record whatever the number of readers (exact resume). The three orders: docs/reading.md,
"Mixing datasets, and resuming an epoch exactly".
"""

from __future__ import annotations

import abc
import contextlib
import itertools
from collections.abc import Generator, Iterator, Sequence

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.reader.order.passes import ShardPass, pass_blocks, pass_records, shard_passes
from beam_tfrecord.reader.order.random_access import RandomAccessRecords
from beam_tfrecord.reader.order.read_plan import ReadPlan
from beam_tfrecord.reader.order.slicing import sub_range
from beam_tfrecord.remote_reads.fetched import FetchedShard
from beam_tfrecord.remote_reads.fetcher import ShardFetcher
from beam_tfrecord.remote_reads.options import RemoteReads

GATHERED_RECORDS = 1024  # records gathered into one block when an order is not a stored run
CYCLE_SHARDS = 16  # shards read side by side in a windowed shuffle (tf.data's interleave cycle)
Record = tuple[bytes, str, int]  # (serialized record, shard path, offset in the shard)


def generator(*seed_parts: int) -> np.random.Generator:
    """A NumPy generator from several ints (seed, epoch, dataset, window...), the same in every process."""
    return np.random.Generator(np.random.PCG64([part & (2**63 - 1) for part in seed_parts]))


class RecordOrder(abc.ABC):
    """One dataset's records in one epoch's order."""

    def __init__(self, plan: ReadPlan, *, verify: bool, reads: RemoteReads | None = None) -> None:
        self.plan = plan
        self.verify = verify
        self.reads = reads or RemoteReads()
        self.num_records = plan.num_records

    def _fetching(self, passes: Sequence[ShardPass],
                  side_by_side: Sequence[Sequence[int]] = ()) -> contextlib.AbstractContextManager[ShardFetcher | None]:
        """A fetcher of the passes' shards in this order (None for local shards), closed after the block."""
        fetcher = self.plan.fetcher(passes, self.reads, side_by_side=side_by_side)
        return fetcher if fetcher is not None else contextlib.nullcontext()

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

    def _iter_pass(self, shard_pass: ShardPass, fetched: FetchedShard | None) -> Iterator[Record]:
        path = self.plan.path(shard_pass)
        with self.plan.open_shard(shard_pass, verify=self.verify, fetched=fetched) as reader:
            for record, offset in pass_records(reader, shard_pass):
                yield record, path, offset


def _open(fetcher: ShardFetcher | None, number: int) -> FetchedShard | None:
    return fetcher.open(number) if fetcher is not None else None


class StoredOrder(RecordOrder):
    """The records in the order the split expression lists them."""

    def iter_range(self, lo: int, hi: int) -> Iterator[Record]:
        passes = shard_passes(sub_range(self.plan.segments, lo, hi))
        with self._fetching(passes) as fetcher:
            for number, shard_pass in enumerate(passes):
                yield from self._iter_pass(shard_pass, _open(fetcher, number))

    def iter_blocks(self, lo: int, hi: int) -> Iterator[RecordBlock]:
        """A stored run read straight in the format's blocks (TFRecord: framing walked a buffer at a time)."""
        passes = shard_passes(sub_range(self.plan.segments, lo, hi))
        with self._fetching(passes) as fetcher:
            for number, shard_pass in enumerate(passes):
                with self.plan.open_shard(shard_pass, verify=self.verify, fetched=_open(fetcher, number)) as reader:
                    yield from pass_blocks(reader, shard_pass)


class PermutedOrder(RecordOrder):
    """A seeded permutation of every record (random-access formats)."""

    def __init__(self, plan: ReadPlan, *, verify: bool, reads: RemoteReads | None,
                 seed_parts: Sequence[int]) -> None:
        super().__init__(plan, verify=verify, reads=reads)
        self._permutation = generator(*seed_parts).permutation(self.num_records)

    def iter_range(self, lo: int, hi: int) -> Iterator[Record]:
        records = RandomAccessRecords(self.plan, reads=self.reads)
        try:
            yield from records.iter_positions(self._permutation[lo:hi])
        finally:
            records.close()

    def iter_blocks(self, lo: int, hi: int) -> Iterator[RecordBlock]:
        records = RandomAccessRecords(self.plan, reads=self.reads)
        try:
            for found in records.iter_blocks(self._permutation[lo:hi]):
                yield gathered(found)
        finally:
            records.close()


class WindowedOrder(RecordOrder):
    """Shuffled shard order, shards read ``CYCLE_SHARDS`` at a time, records permuted per window.

    The unit shuffled and read side by side is a pass (``passes``): a shard with deleted records is walked once.
    """

    def __init__(self, plan: ReadPlan, *, verify: bool, reads: RemoteReads | None, seed_parts: Sequence[int],
                 shuffle_buffer: int) -> None:
        super().__init__(plan, verify=verify, reads=reads)
        self._seed_parts = tuple(seed_parts)
        passes = [plan.passes[i] for i in generator(*seed_parts).permutation(len(plan.passes)).tolist()]
        cycle = max(1, min(CYCLE_SHARDS, len(passes)))
        self._chunk = max(1, shuffle_buffer // cycle)
        self._cycles = [passes[i:i + cycle] for i in range(0, len(passes), cycle)]
        windows: list[tuple[int, int]] = []  # (cycle, chunk number)
        sizes: list[int] = []
        for number, group in enumerate(self._cycles):
            takes = np.array([shard_pass.num_records for shard_pass in group], dtype=np.int64)
            for t in range(-(-int(takes.max()) // self._chunk)):
                windows.append((number, t))
                sizes.append(int(np.clip(takes - t * self._chunk, 0, self._chunk).sum()))
        self._windows = windows
        self._starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    def _from(self, shard_pass: ShardPass, first: int, fetcher: ShardFetcher | None,
              number: int) -> Generator[Record, None, None]:
        """A pass from its record ``first`` on (``number``: its shard in the fetcher's list)."""
        if first < shard_pass.num_records:
            yield from self._iter_pass(shard_pass.after(first), _open(fetcher, number))

    def iter_range(self, lo: int, hi: int) -> Iterator[Record]:
        number = int(np.searchsorted(self._starts, lo, side="right")) - 1
        if number >= len(self._windows):
            return
        first_cycle = self._windows[number][0]
        cycles = self._cycles[first_cycle:]
        ends = list(itertools.accumulate(len(group) for group in cycles))  # a cycle's shards in the fetcher's list
        side_by_side = [range(end - len(group), end) for group, end in zip(cycles, ends)]
        with self._fetching([shard_pass for group in cycles for shard_pass in group], side_by_side) as fetcher:
            yield from self._windows_from(number, lo, hi, fetcher, first_cycle, side_by_side)

    def _windows_from(self, number: int, lo: int, hi: int, fetcher: ShardFetcher | None, first_cycle: int,
                      side_by_side: Sequence[range]) -> Iterator[Record]:
        """The records at ``[lo, hi)``, from window ``number`` on (``iter_range``)."""
        open_cycle, streams = -1, list[Generator[Record, None, None]]()
        try:
            while number < len(self._windows) and self._starts[number] < hi:
                cycle, t = self._windows[number]
                if cycle != open_cycle:  # open the cycle's shards at this window's chunk
                    for stream in streams:
                        stream.close()
                    listed = side_by_side[cycle - first_cycle]
                    streams = [self._from(shard_pass, t * self._chunk, fetcher, listed[i])
                               for i, shard_pass in enumerate(self._cycles[cycle])]
                    open_cycle = cycle
                window: list[Record] = []
                for shard_pass, stream in zip(self._cycles[cycle], streams):
                    window.extend(itertools.islice(stream, max(0, min(self._chunk,
                                                                      shard_pass.num_records - t * self._chunk))))
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
               verify: bool, reads: RemoteReads | None = None) -> RecordOrder:
    """The order of a dataset's records in one epoch (``seed_parts``: seed, epoch, dataset number; ``reads``:
    how ``gs://`` shards are fetched, default ``RemoteReads()``)."""
    if not shuffle:
        return StoredOrder(plan, verify=verify, reads=reads)
    if plan.format.random_access:
        return PermutedOrder(plan, verify=verify, reads=reads, seed_parts=seed_parts)
    return WindowedOrder(plan, verify=verify, reads=reads, seed_parts=seed_parts, shuffle_buffer=shuffle_buffer)

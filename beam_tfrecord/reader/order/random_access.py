"""Random access to an ArrayRecord dataset, and the true global shuffle it allows.

Positions are read in blocks, one call per shard, and come back in the order asked.
See docs/reading.md, "ArrayRecord".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.formats import ShardReader
from beam_tfrecord.reader.order.read_plan import ReadPlan
from beam_tfrecord.remote_reads.fetcher import ShardFetcher
from beam_tfrecord.remote_reads.options import RemoteReads

BLOCK_RECORDS = 256


class RandomAccessRecords:
    """The records of a read plan's segments, by position, for ArrayRecord datasets.

    Args:
        plan: a read plan over an ArrayRecord dataset (usually all workers' records: the global
            shuffle deals them out itself).
        reads: how ``gs://`` shards are fetched (each is copied whole to a local file when first
            read; the fetcher reads ahead in the plan's order of shards).
    """

    def __init__(self, plan: ReadPlan, *, reads: RemoteReads | None = None) -> None:
        if not plan.format.random_access:
            raise ReaderError(f"random access needs array_record shards; {plan.dataset_dir!r} holds "
                              f"{plan.manifest.file_format.value} shards (rebuild with --file_format array_record)")
        self._plan = plan
        self._segments = plan.segments
        self._ends = np.cumsum([s.take for s in plan.segments], dtype=np.int64)
        # Each segment's pass: the fetcher lists each shard once however many deleted records split it into runs.
        self._passes = plan.passes
        self._pass_of = np.repeat(np.arange(len(self._passes)), [len(p.segments) for p in self._passes]).tolist()
        self._readers: dict[str, ShardReader] = {}  # by full path: versions of a root may share a file name
        self._reads = reads or RemoteReads()
        self._fetcher: ShardFetcher | None = None
        self._fetching = False  # the fetcher was made (None: the shards are local)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def _reader(self, segment_number: int) -> ShardReader:
        segment = self._segments[segment_number]
        path = self._plan.path(segment)
        if path not in self._readers:
            if not self._fetching:
                self._fetcher, self._fetching = self._plan.fetcher(self._passes, self._reads), True
            fetched = self._fetcher.open(self._pass_of[segment_number]) if self._fetcher is not None else None
            self._readers[path] = self._plan.open_shard(segment, fetched=fetched)
        return self._readers[path]

    def read(self, positions: Sequence[int] | np.ndarray) -> list[tuple[bytes, str, int]]:
        """(record, shard path, index in the shard) of each position, in the order given."""
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) and (positions.min() < 0 or positions.max() >= len(self)):
            raise ReaderError(f"positions must be in [0, {len(self)}), got {positions.min()}..{positions.max()}")
        segment_numbers = np.searchsorted(self._ends, positions, side="right")
        starts = self._ends[segment_numbers] - [self._segments[n].take for n in segment_numbers.tolist()]
        out: list[tuple[bytes, str, int] | None] = [None] * len(positions)
        for number in np.unique(segment_numbers).tolist():
            where = np.flatnonzero(segment_numbers == number)
            indices = (positions[where] - starts[where] + self._segments[number].skip).tolist()
            reader = self._reader(number)
            for slot, index, record in zip(where.tolist(), indices, reader.read(indices)):
                out[slot] = (record, reader.path, index)
        return out  # type: ignore[return-value]

    def iter_positions(self, positions: np.ndarray) -> Iterator[tuple[bytes, str, int]]:
        """Reads ``positions`` in blocks of ``BLOCK_RECORDS``, yielding one record at a time."""
        for block in self.iter_blocks(positions):
            yield from block

    def iter_blocks(self, positions: np.ndarray) -> Iterator[list[tuple[bytes, str, int]]]:
        """Reads ``positions`` in blocks of ``BLOCK_RECORDS``: the (record, shard path, index) of each."""
        for begin in range(0, len(positions), BLOCK_RECORDS):
            yield self.read(positions[begin:begin + BLOCK_RECORDS])

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher, self._fetching = None, False

"""Statistics while the shards are written: each shard writer summarizes its records, publication merges them.

A shard (or piece) writer decodes its records a block at a time (``reader.decode.block_decode``) into
``statistics.SplitStatistics`` and leaves them beside its file (``<shard>.statistics``); the split of a record
is known only once planned, so this is the first stage that can count per split. No record is read twice.
Records that arrive serialized are summarized by feature name and kind instead (``statistics.inferred``).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.framing import FOOTER_BYTES, HEADER_BYTES
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.reader.decode.block_decode import BlockDecoder
from beam_tfrecord.statistics.accumulator import SplitStatistics, merge_by_split
from beam_tfrecord.statistics.inferred import InferredStatistics
from beam_tfrecord.statistics.tfmd import statistics_proto

STATISTICS_SUFFIX = ".statistics"
BYTES_PER_SUMMARY = 8 << 20  # records decoded and summarized at once: a float sum depends on where blocks end
_NO_HEADER, _NO_FOOTER = bytes(HEADER_BYTES), bytes(FOOTER_BYTES)


class ShardStatistics:
    """One shard's statistics, fed its records as the writer writes them (framed, or as parts); without a
    ``decoder``, of records whose schema is inferred at publish."""

    def __init__(self, schema: Schema, split: str, decoder: BlockDecoder | None, path: str) -> None:
        self.stats: SplitStatistics | InferredStatistics = \
            SplitStatistics(split, schema) if decoder is not None else InferredStatistics(split)
        self._decoder = decoder
        self._path = path
        # Framed records, or blocks of them, held (views into the writer's read buffers, which are reused only once
        # no view is left: ``storage.buffers``) until a summary's worth is joined; and each record's framed size.
        self._pending: list[bytes | memoryview] = []
        self._framed_sizes: list[int] = []
        self.pending_bytes = 0

    def add_framed(self, framed: bytes | memoryview) -> None:
        self.add_block(framed, [len(framed)])

    def add_block(self, block: bytes | memoryview, framed_sizes: list[int]) -> None:
        """Adds the records of ``block``, framed one after the other, ``framed_sizes`` long each; summarizes what
        it holds once that reaches ``BYTES_PER_SUMMARY``. A summary's records are those the first ``add_framed``
        to reach it would take (a writer that hands blocks over ends them there: ``beam.shards``), so its bytes
        are the same however they came."""
        self._pending.append(block)
        self._framed_sizes += framed_sizes
        self.pending_bytes += len(block)
        if self.pending_bytes >= BYTES_PER_SUMMARY:
            self.flush()

    def add_parts(self, parts: list[bytes], size: int) -> None:
        self.add_framed(b"".join([_NO_HEADER, *parts, _NO_FOOTER]))

    def flush(self) -> None:
        """Summarizes the records held (one block)."""
        if not self._pending:
            return
        framed = np.array(self._framed_sizes, np.int64)
        buffer = np.frombuffer(b"".join(self._pending), np.uint8)  # one block of bytes: itself, not a copy
        starts = np.cumsum(framed) - framed + HEADER_BYTES
        block = RecordBlock(self._path, buffer, starts, framed - HEADER_BYTES - FOOTER_BYTES, starts - HEADER_BYTES)
        self._pending, self._framed_sizes, self.pending_bytes = [], [], 0
        if isinstance(self.stats, InferredStatistics):
            self.stats.add_records(block.record(i) for i in range(len(framed)))
        elif self._decoder is not None:
            self.stats.add_columns(self._decoder.decode(block), len(framed))

    def write(self, shard_temp_path: str) -> None:
        """Leaves the statistics beside the shard's temp file (before the shard counts as finished)."""
        self.flush()
        storage.write_bytes_atomic(shard_temp_path + STATISTICS_SUFFIX,
                                   pickle.dumps(self.stats, protocol=pickle.HIGHEST_PROTOCOL))


def gather_statistics(shards_dir: str, schema: Schema, splits: Sequence[str]) -> Any:
    """The dataset's ``DatasetFeatureStatisticsList``, merged from the files every shard and piece writer left
    in ``shards_dir`` (and its ``pieces``), one dataset per split of ``splits`` (an empty one for a split of
    no record)."""
    parts: list[SplitStatistics] = []
    for folder in (shards_dir, storage.join(shards_dir, "pieces")):
        for path, _ in sorted(storage.list_files(storage.join(folder, "*" + STATISTICS_SUFFIX))):
            part = pickle.loads(storage.read_bytes(path))
            parts.append(part.to_split(schema) if isinstance(part, InferredStatistics) else part)
    merged = merge_by_split(parts)
    return statistics_proto([merged.get(split) or SplitStatistics(split, schema) for split in splits])

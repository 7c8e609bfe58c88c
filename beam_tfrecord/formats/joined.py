"""A base shard read with its column files: every record joined with its rows, in any shard format.

Record ``i`` of the base shard and row ``i`` of each column file (``core.columns``) are one example: concatenated
bytes are a valid Example holding all their features (``core.example_parts``). Blocks carry the rows as aligned
``RecordBlock.parts`` (no copy; decoders decode each part on its own). With renamed or dropped features, or for a
writer (compaction), records are folded into the bytes a build with the final schema writes. Every reader that
opens shards through ``ReadPlan.open_shard`` joins columns this way. See docs/columns.md, "Reading".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.columns import ColumnFile
from beam_tfrecord.core.example_parts import fold
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.dataset import LoadedDataset
from beam_tfrecord.errors import CorruptShardError, ReaderError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.formats.base import ShardCount, ShardFormat, ShardReader


@dataclasses.dataclass(frozen=True)
class StoredNames:
    """How the names stored in a version's files become its schema's: what ``fold`` needs.

    Attributes:
        logical_names: stored name -> logical name, for renamed features.
        dropped: stored names no longer in the schema.
    """

    logical_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dropped: frozenset[str] = frozenset()

    @classmethod
    def of(cls, manifest: Manifest) -> "StoredNames":
        return cls({stored: logical for logical, stored in manifest.physical_names.items()},
                   frozenset(manifest.dropped_features))

    @property
    def identity(self) -> bool:
        """Whether the stored names are the schema's (nothing renamed or dropped)."""
        return not self.logical_names and not self.dropped


def joined_record(parts: Sequence[bytes], names: StoredNames, *, folded: bool = False, where: str) -> bytes:
    """One example from a base record and its column rows: their bytes joined (one valid Example), or folded into a
    build's bytes (``core.example_parts.fold``) when ``folded`` or when the version renames or drops features."""
    if not folded and names.identity:
        return b"".join(parts)
    return fold(parts, logical_names=names.logical_names, dropped=names.dropped, where=where)


def column_shard(shard: ShardInfo, column: ColumnFile) -> ShardInfo:
    """A column file as its format's reader takes a shard: its name, size, checksum, place; the base's count."""
    return dataclasses.replace(shard, filename=column.filename, num_bytes=column.num_bytes, crc32c=column.crc32c,
                               stored_in=column.stored_in, dali_index=None, deletions=None, columns=())


def needs_join(shard: ShardInfo, names: StoredNames) -> bool:
    """Whether a shard's records must go through ``JoinedShardReader`` (column files, or names to map)."""
    return bool(shard.columns) or not names.identity


class JoinedShardReader(ShardReader):
    """Reads a base shard and its column files side by side (see the module docstring).

    Args:
        base: the base shard's reader.
        columns: one reader per column file, in the shard's ``columns`` order (this reader closes them all).
        names: the version's renames and drops.
        folded: give every record as ``core.example_parts.fold`` makes it (a build's bytes), not joined.
    """

    def __init__(self, base: ShardReader, columns: Sequence[ShardReader], *, names: StoredNames,
                 folded: bool) -> None:
        self.path = base.path
        self._base = base
        self._columns = tuple(columns)
        self._names = names
        self._folded = folded or not names.identity

    def _one(self, parts: Sequence[bytes], offset: int) -> bytes:
        return joined_record(parts, self._names, folded=self._folded, where=f"{self.path} at offset {offset}")

    def iter_records(self, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        rows = [column.iter_records(start, stop) for column in self._columns]
        for record, offset in self._base.iter_records(start, stop):
            yield self._one([record, *(self._next_row(column, row) for column, row in zip(self._columns, rows))],
                            offset), offset
        for column, row in zip(self._columns, rows):  # each to its end: a read to the file's end checks its count
            if next(row, None) is not None:
                raise self._misaligned(column, "more")

    def iter_blocks(self, start: int, stop: int, *, block_records: int = 1024) -> Iterator[RecordBlock]:
        if self._folded:
            yield from super().iter_blocks(start, stop, block_records=block_records)
            return
        aligned = [_Rows(column.iter_blocks(start, stop, block_records=block_records)) for column in self._columns]
        for block in self._base.iter_blocks(start, stop, block_records=block_records):
            at = 0
            while at < len(block):  # cut where any column file's blocks end: every part a slice, no copy
                count = len(block) - at
                for column, rows in zip(self._columns, aligned):
                    count = rows.available(count)
                    if not count:
                        raise self._misaligned(column, "fewer")
                yield dataclasses.replace(block.slice(at, at + count), parts=tuple(rows.take(count)
                                                                                    for rows in aligned))
                at += count
        for column, rows in zip(self._columns, aligned):
            if not rows.finished():
                raise self._misaligned(column, "more")

    def read(self, indices: Sequence[int]) -> list[bytes]:
        rows = [column.read(indices) for column in self._columns]
        return [self._one([record, *(r[n] for r in rows)], index)
                for n, (record, index) in enumerate(zip(self._base.read(indices), indices))]

    def count(self) -> ShardCount:
        """The base shard's count; each column file is read whole too and must hold as many records."""
        counted = self._base.count()
        for column in self._columns:
            found = column.count().num_records
            if found != counted.num_records:
                raise self._misaligned(column, f"{found} records against the base shard's {counted.num_records}:")
        return counted

    def _next_row(self, column: ShardReader, rows: Iterator[tuple[bytes, int]]) -> bytes:
        row = next(rows, None)
        if row is None:
            raise self._misaligned(column, "fewer")
        return row[0]

    def _misaligned(self, column: ShardReader, what: str) -> CorruptShardError:
        return CorruptShardError(column.path, f"{what} rows than its base shard {self.path!r} has records: a column "
                                              "file must be aligned record by record with its base shard")

    def close(self) -> None:
        for reader in (self._base, *self._columns):
            reader.close()


class _Rows:
    """A stream of blocks handed out as slices (no copy) of at most what one block still holds."""

    def __init__(self, blocks: Iterator[RecordBlock]) -> None:
        self._blocks = blocks
        self._held: RecordBlock | None = None
        self._at = 0

    def available(self, wanted: int) -> int:
        """How many of ``wanted`` rows the next ``take`` can give from one block (0: the stream has ended)."""
        while self._held is None or self._at == len(self._held):
            self._held, self._at = next(self._blocks, None), 0
            if self._held is None:
                return 0
        return min(wanted, len(self._held) - self._at)

    def take(self, count: int) -> RecordBlock:
        """The next ``count`` rows (``available`` said they are in the block held)."""
        if self._held is None:
            raise ReaderError("a column file's rows were taken before available() found them")
        piece = self._held.slice(self._at, self._at + count)
        self._at += count
        return piece

    def finished(self) -> bool:
        """Whether no row is left (the stream is read to its end, so a reader checks its count there)."""
        if self._held is not None and self._at < len(self._held):
            return False
        return all(not len(block) for block in self._blocks)


def open_joined(file_format: ShardFormat, path: str, shard: ShardInfo, column_paths: Sequence[str], *,
                compression: Compression, names: StoredNames, verify: bool = True, folded: bool = False,
                base: ShardReader | None = None) -> JoinedShardReader:
    """A ``JoinedShardReader`` of ``shard`` at ``path`` and its column files at ``column_paths`` (in the shard's
    ``columns`` order); ``base``: the base shard's reader when already open (fetched), else opened here."""
    base = base or file_format.open_reader(path, shard, compression=compression, verify=verify)
    columns: list[ShardReader] = []
    try:
        for column, column_path in zip(shard.columns, column_paths, strict=True):
            columns.append(file_format.open_reader(column_path, column_shard(shard, column), compression=compression,
                                                   verify=verify))
    except BaseException:
        for reader in (base, *columns):
            reader.close()
        raise
    return JoinedShardReader(base, columns, names=names, folded=folded)


def open_listed(dataset: LoadedDataset, shard: ShardInfo, *, verify: bool = True,
                folded: bool = False) -> ShardReader:
    """A reader of a shard a loaded version lists, wherever it is stored, its column files joined (and its names
    mapped) when it has any: what a reader of one shard at a time (statistics, compaction) opens."""
    manifest = dataset.manifest
    file_format = shard_format(manifest.file_format)
    names = StoredNames.of(manifest)
    if not (folded or needs_join(shard, names)):
        return file_format.open_reader(dataset.shard_path(shard), shard, compression=manifest.compression,
                                       verify=verify)
    return open_joined(file_format, dataset.shard_path(shard), shard,
                       [dataset.shard_path(column_shard(shard, column)) for column in shard.columns],
                       compression=manifest.compression, names=names, verify=verify, folded=folded)

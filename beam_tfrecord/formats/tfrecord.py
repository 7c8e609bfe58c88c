"""TFRecord shards: the records one after the other, each framed (length, CRCs), read front to back.

A read that reaches the shard's end checks its record count against the manifest.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.blocks import RecordBlock, split_frames
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.framing import (
    FOOTER_BYTES,
    FRAMING_BYTES,
    HEADER_BYTES,
    frame_parts_of_parts,
    iter_records,
)
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.dataset import split_path
from beam_tfrecord.errors import CorruptShardError, MissingShardError
from beam_tfrecord.formats.base import ShardCount, ShardFormat, ShardReader, ShardWriter, TFDataFiles
from beam_tfrecord.formats.mapping import map_whole
from beam_tfrecord.remote_reads.fetched import FetchedShard
from beam_tfrecord.storage import direct_io

WRITE_CHUNK_BYTES = 4 << 20  # framed records joined into one write
JOIN_MAX_RECORD_BYTES = 64 << 10  # larger records, or parts of one, are written without a copy
READ_BLOCK_BYTES = 4 << 20  # bytes read at once by ``iter_blocks`` (more when one record is larger)
_LENGTH_BYTES = 8


class TFRecordShardWriter(ShardWriter):
    """Writes a TFRecord shard, (optionally) compressing it and hashing the stored bytes."""

    def __init__(self, path: str, *, compression: Compression, direct: bool) -> None:
        self._writer = storage.HashingWriter(direct_io.open_write(path, direct=direct), compression)
        self._pending: list[bytes | memoryview] = []
        self._pending_bytes = 0

    def append_framed(self, framed: bytes | memoryview) -> None:
        self._pending.append(framed)
        self._pending_bytes += len(framed)
        if self._pending_bytes >= WRITE_CHUNK_BYTES:
            self._flush()

    def append_framed_block(self, block: bytes, framed_sizes: list[int]) -> None:
        self.append_framed(block)  # the file is the framed records one after the other: the block as it is

    def append(self, record: bytes) -> None:
        self.append_parts((record,), len(record))

    def append_parts(self, parts: Sequence[bytes], record_bytes: int) -> None:
        """Appends the record that ``parts`` make joined, framed, without joining its large parts."""
        header, footer = frame_parts_of_parts(parts, record_bytes)
        self._pending.append(header)
        self._pending_bytes += len(header)
        for part in parts:
            if len(part) < JOIN_MAX_RECORD_BYTES:
                self._pending.append(part)
                self._pending_bytes += len(part)
            else:  # large: written as it is, without a copy
                self._writer.write(b"".join(self._pending))
                self._writer.write(part)
                self._pending, self._pending_bytes = [], 0
        self._pending.append(footer)
        self._pending_bytes += len(footer)
        if self._pending_bytes >= WRITE_CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        self._writer.write(b"".join(self._pending))
        self._pending, self._pending_bytes = [], 0

    def close(self) -> tuple[str, int]:
        self._flush()
        return self._writer.close(), self._writer.num_bytes


class TFRecordShardReader(ShardReader):
    """Reads a TFRecord shard front to back; offsets are byte offsets in the (uncompressed) record stream."""

    def __init__(self, path: str, shard: ShardInfo, *, compression: Compression, verify: bool,
                 fetched: FetchedShard | None = None) -> None:
        if fetched is None and not storage.exists(path):  # a fetched shard's first range says so itself
            raise MissingShardError(path)
        self.path = path
        self._shard = shard
        self._compression = compression
        self._verify = verify
        self._fetched = fetched

    def _open_stream(self) -> BinaryIO:
        if self._fetched is None:
            return storage.open_read(self.path, self._compression)
        return storage.decompressed(self._fetched.stream(), self._compression)

    def _open_windows(self) -> "_MappedWindows | _ReadWindows | _ChunkWindows":
        if self._compression is Compression.NONE:
            local = self.path if self._fetched is None else self._fetched.cached
            if local is not None and not storage.is_remote(local):
                return _MappedWindows(local)
            if self._fetched is not None:
                return _ChunkWindows(self._fetched.chunks())
        return _ReadWindows(self._open_stream())

    def close(self) -> None:
        if self._fetched is not None:
            self._fetched.close()

    def iter_records(self, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        listed = self._shard.num_records
        reaches_end = stop == listed  # then the count is checked: reading goes on to the end
        offset = 0
        index = 0
        with self._open_stream() as handle:
            for record in iter_records(handle, name=self.path, verify=self._verify):
                if index == stop:
                    raise CorruptShardError(self.path, f"more records than the {listed} the manifest lists", offset)
                if index >= start:
                    yield record, offset
                offset += len(record) + FRAMING_BYTES
                index += 1
                if index == stop and not reaches_end:
                    return
        if index < stop:
            raise CorruptShardError(self.path, f"ended after {index} records; the manifest lists {listed}", offset)

    def iter_blocks(self, start: int, stop: int, *, block_records: int = 1024) -> Iterator[RecordBlock]:
        """Walks ``READ_BLOCK_BYTES`` of the stream at a time (``core.blocks.split_frames``).

        A local uncompressed shard is mapped into memory (no copy); others are read in chunks.
        Blocks hold the whole records of each window (``block_records`` is not used). The checks
        and errors are ``iter_records``'s: CRCs of every record walked, truncation, and the count
        against the manifest when the read reaches the shard's end.
        """
        listed = self._shard.num_records
        reaches_end = stop == listed
        index = offset = 0  # records walked, and the stream offset of the next window
        want = READ_BLOCK_BYTES
        with self._open_windows() as source:
            while True:
                view = source.window(offset, want)
                block, used = split_frames(view, name=self.path, base_offset=offset, verify=self._verify)
                if used < len(view) and len(view) < want:  # the stream ended inside a record
                    raise CorruptShardError(self.path, _truncation(view[used:].tobytes()), offset + used)
                if reaches_end and index + len(block) > stop:
                    raise CorruptShardError(self.path, f"more records than the {listed} the manifest lists",
                                            int(block.offsets[stop - index]))
                low, high = max(start - index, 0), min(stop - index, len(block))
                if low < high:
                    yield block.slice(low, high)
                index += len(block)
                offset += used
                if (index >= stop and not reaches_end) or len(view) < want:
                    break
                want = READ_BLOCK_BYTES if used else 2 * want  # a record larger than the window: widen it
        if index < stop:
            raise CorruptShardError(self.path, f"ended after {index} records; the manifest lists {listed}", offset)

    def count(self) -> ShardCount:
        records = record_bytes = 0
        with self._open_stream() as stream:
            for data in iter_records(stream, name=self.path, verify=self._verify):
                records += 1
                record_bytes += len(data) + FRAMING_BYTES
        return ShardCount(records, record_bytes)


class _MappedWindows:
    """Windows of a local file mapped into memory: views, no copies (kept alive by the blocks using them)."""

    def __init__(self, path: str) -> None:
        self._view = map_whole(path)  # names its file: a DataLoader worker's batch refers to it (``mapped_file``)

    def window(self, offset: int, size: int) -> np.ndarray:
        return self._view[offset:offset + size]

    def __enter__(self) -> "_MappedWindows":
        return self

    def __exit__(self, *exc: object) -> None:
        """The mapping closes when the last view of it is gone."""


class _ChunkWindows:
    """Windows of a fetched shard's ranges (``FetchedShard.chunks``): views of a range when a window
    lies inside one, else the rest of one joined with as much of the next as the window takes (not the
    whole next range: 4 MiB copied per range boundary, not the 8 MiB range)."""

    def __init__(self, chunks: Iterator[bytes | memoryview]) -> None:
        self._chunks = chunks
        self._held = np.empty(0, dtype=np.uint8)  # the last window's bytes: a view of a range, or joined
        self._offset = 0  # the stream offset of ``_held``
        self._chunk = self._held  # the last range taken, and its stream offset
        self._chunk_offset = 0

    def window(self, offset: int, size: int) -> np.ndarray:
        begin = offset - self._offset
        if begin + size <= len(self._held):
            return self._held[begin:begin + size]
        if offset >= self._chunk_offset:  # all in the last range taken (``_held`` ends inside it)
            parts = [self._chunk[offset - self._chunk_offset:]]
        else:
            parts = [self._held[begin:self._chunk_offset - self._offset], self._chunk]
        held = self._chunk_offset + len(self._chunk) - offset
        while held < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._chunk, self._chunk_offset = np.frombuffer(chunk, dtype=np.uint8), offset + held
            parts.append(self._chunk[:size - held])
            held += len(parts[-1])
        parts = [part for part in parts if len(part)]
        self._held = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else self._chunk[:0]
        self._offset = offset
        return self._held[:size]

    def __enter__(self) -> "_ChunkWindows":
        return self

    def __exit__(self, *exc: object) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


class _ReadWindows:
    """Windows of a stream (remote or compressed) read in chunks: each window is a new buffer."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._pending = b""
        self._offset = 0  # the stream offset of ``_pending``

    def window(self, offset: int, size: int) -> np.ndarray:
        pending = self._pending[offset - self._offset:]
        parts = [pending]
        held = len(pending)
        while held < size:
            chunk = self._handle.read(size - held)
            if not chunk:
                break
            parts.append(chunk)
            held += len(chunk)
        self._pending, self._offset = b"".join(parts), offset
        return np.frombuffer(self._pending, dtype=np.uint8)

    def __enter__(self) -> "_ReadWindows":
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


def _truncation(tail: bytes) -> str:
    """What is wrong with the bytes left at a stream's end (as ``core.framing.iter_records`` says it)."""
    if len(tail) < HEADER_BYTES:
        return f"truncated record header ({len(tail)} of {HEADER_BYTES} bytes)"
    (length,) = struct.unpack_from("<Q", tail)
    return (f"truncated record (expected {length + FOOTER_BYTES} bytes after the header, "
            f"got {len(tail) - HEADER_BYTES})")


@functools.lru_cache(maxsize=8)  # a worker reads several ranges of the same shards
def record_offsets(path: str, shard: ShardInfo) -> tuple[int, ...]:
    """Byte offset of each record of an uncompressed shard: from its DALI index when it has one, else
    from a scan of its framing (8-byte lengths; no data read). Checks the count and size against ``shard``.

    Raises:
        CorruptShardError: naming the shard, when its framing or index disagrees with the manifest.
    """
    if shard.dali_index is not None:
        lines = storage.read_bytes(storage.join(split_path(path)[0], shard.dali_index)).split()
        offsets = tuple(int(v) for v in lines[0::2])
        end = offsets[-1] + int(lines[-1]) if offsets else 0
    else:
        found, end = [], 0
        with storage.open_read(path) as stream:
            while header := stream.read(HEADER_BYTES):
                if len(header) < HEADER_BYTES:
                    raise CorruptShardError(path, f"truncated record header ({len(header)} of {HEADER_BYTES} bytes)",
                                            end)
                found.append(end)
                end += HEADER_BYTES + int.from_bytes(header[:_LENGTH_BYTES], "little") + 4
                stream.seek(end)
        offsets = tuple(found)
    if len(offsets) != shard.num_records or end != shard.num_bytes:
        raise CorruptShardError(path, f"{len(offsets)} records in {end} bytes, manifest says {shard.num_records} in "
                                      f"{shard.num_bytes}")
    return offsets


class TFRecordFormat(ShardFormat):
    """Sequential shards, read by every reader (tf.data reads them natively)."""

    file_format = FileFormat.TFRECORD
    random_access = False
    readers = ("read_dataset", "read_numpy", "TFRecordIterableDataset", "ReadTFRecordDataset")

    def open_writer(self, path: str, *, compression: Compression, direct_io: bool) -> ShardWriter:
        return TFRecordShardWriter(path, compression=compression, direct=direct_io)

    def read_range(self, path: str, shard: ShardInfo, *, compression: Compression, start: int,
                   stop: int) -> Iterator[tuple[int, bytes]]:
        """Both CRCs of each record checked; an uncompressed shard is read from record ``start``'s offset
        (``record_offsets``), a compressed one from its start."""
        if start >= stop:
            return
        compressed = compression is not Compression.NONE
        with storage.open_read(path, compression) as stream:
            if not compressed:
                stream.seek(record_offsets(path, shard)[start])
            index = start if not compressed else 0
            for data in iter_records(stream, name=path):
                if index >= start:  # a compressed stream is read from its start
                    yield index, data
                index += 1
                if index >= stop:
                    return
        raise CorruptShardError(path, f"{index} records, manifest says {shard.num_records}")

    def tf_data_files(self, compression: Compression) -> TFDataFiles:
        return TFDataFiles("TFRecordDataset", compression.value)

    def open_reader(self, path: str, shard: ShardInfo, *, compression: Compression,
                    verify: bool = True, fetched: FetchedShard | None = None) -> ShardReader:
        return TFRecordShardReader(path, shard, compression=compression, verify=verify, fetched=fetched)

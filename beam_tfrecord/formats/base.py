"""What every shard format provides: a writer, a reader, and the facts the readers ask about it.

Records are counted and sized in TFRecord framing whatever the format. To add a format: ``formats/__init__.py``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.framing import unframed
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.errors import ReaderError

if TYPE_CHECKING:
    from beam_tfrecord.remote_reads.fetched import FetchedShard


@dataclasses.dataclass(frozen=True)
class ShardCount:
    """What a full read of a shard found.

    Attributes:
        num_records: records in the file.
        num_record_bytes: their size in TFRecord framing (data + 16 bytes each).
    """

    num_records: int
    num_record_bytes: int


@dataclasses.dataclass(frozen=True)
class TFDataFiles:
    """How tf.data reads a format's files with a dataset of its own: ``tf.data.<dataset>(paths, compression_type=...)``.

    Attributes:
        dataset: the ``tf.data`` dataset class that reads the files, by name (formats do not import TensorFlow).
        compression_type: its ``compression_type`` argument.
    """

    dataset: str
    compression_type: str


class ShardWriter(abc.ABC):
    """Appends records to one new shard file, replacing any earlier attempt at the same path."""

    @abc.abstractmethod
    def append(self, record: bytes) -> None:
        """Appends one record's data."""

    def append_framed(self, framed: bytes | memoryview) -> None:
        """Appends one record given in TFRecord framing (as the encoded entries hold it)."""
        self.append(bytes(unframed(framed)))

    def append_framed_block(self, block: bytes, framed_sizes: list[int]) -> None:
        """Appends the records of ``block``, framed one after the other, ``framed_sizes`` long each (a shard
        writer's batch of small records: one call per block, not per record)."""
        view = memoryview(block)
        start = 0
        for size in framed_sizes:
            self.append_framed(view[start:start + size])
            start += size

    def append_parts(self, parts: Sequence[bytes], record_bytes: int) -> None:
        """Appends the record that ``parts`` make joined (``record_bytes`` long)."""
        self.append(b"".join(parts))

    @abc.abstractmethod
    def close(self) -> tuple[str, int]:
        """Finishes the file; returns the CRC32C (8 hex digits) and size of the bytes stored."""


class ShardReader(abc.ABC):
    """Reads one shard the manifest lists, checked against its ``ShardInfo``.

    Attributes:
        path: the shard's path (named in every error).
    """

    path: str

    @abc.abstractmethod
    def iter_records(self, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        """Yields (record, offset) for records ``[start, stop)``.

        The offset says where the record is, for errors and decoders: a byte offset in the
        record stream for a sequential format, the record's index for a random-access one.

        Raises:
            CorruptShardError: on damaged records, or when a read that reaches the shard's end
                finds more or fewer records than the manifest lists.
        """

    def iter_blocks(self, start: int, stop: int, *, block_records: int = 1024) -> Iterator[RecordBlock]:
        """Yields records ``[start, stop)`` in blocks (see ``core.blocks``), checked as ``iter_records`` checks them.

        This default groups ``iter_records``; a format that can read many records at once overrides it.
        """
        records: list[bytes] = []
        offsets: list[int] = []
        for record, offset in self.iter_records(start, stop):
            records.append(record)
            offsets.append(offset)
            if len(records) == block_records:
                yield RecordBlock.of_records(self.path, records, np.array(offsets, dtype=np.int64))
                records, offsets = [], []
        if records:
            yield RecordBlock.of_records(self.path, records, np.array(offsets, dtype=np.int64))

    @abc.abstractmethod
    def count(self) -> ShardCount:
        """Reads the whole shard, checking what the format can check, and counts it."""

    def read(self, indices: Sequence[int]) -> list[bytes]:
        """The records at ``indices``, in that order (formats with ``random_access`` only)."""
        raise ReaderError(f"{self.path!r}: its format has no random access by record index")

    def close(self) -> None:  # noqa: B027  (a reader that opens files per read holds nothing)
        """Releases what the reader holds open."""

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class ShardFormat(abc.ABC):
    """One shard format: how its files are written and read.

    Attributes:
        file_format: the manifest's name for it (the registry's key).
        random_access: readers can read a record by index (what a true global shuffle needs).
        readers: this package's readers that read it, named as a user calls them.
    """

    file_format: ClassVar[FileFormat]
    random_access: ClassVar[bool]
    readers: ClassVar[tuple[str, ...]]

    @abc.abstractmethod
    def open_writer(self, path: str, *, compression: Compression, direct_io: bool) -> ShardWriter:
        """A writer of a new shard at ``path`` (local or remote).

        Args:
            path: where to write (a temporary name; publication renames it).
            compression: stream compression (only ``Compression.NONE`` unless the format has
                ``stream_compression``).
            direct_io: bypass the page cache for local files where the format's writer can.
        """

    def read_range(self, path: str, shard: ShardInfo, *, compression: Compression, start: int,
                   stop: int) -> Iterator[tuple[int, bytes]]:
        """``(index, record)`` of records ``start`` to ``stop``, read from where record ``start`` begins: the
        record ranges of ``ReadTFRecordDataset`` (formats whose ``readers`` list it).

        Raises:
            ReaderError: the format has no such reads.
            CorruptShardError: naming the shard, on damaged records or fewer records than listed.
        """
        raise ReaderError(f"{path!r}: {self.file_format.value} shards are not read in record ranges; read them with "
                          f"{' or '.join(self.readers)}")

    def tf_data_files(self, compression: Compression) -> TFDataFiles | None:
        """How tf.data reads these files itself; None when it has no reader for them (``read_dataset``
        then feeds it the records of ``open_reader``, in blocks)."""
        return None

    @abc.abstractmethod
    def open_reader(self, path: str, shard: ShardInfo, *, compression: Compression,
                    verify: bool = True, fetched: FetchedShard | None = None) -> ShardReader:
        """A reader of the shard ``shard`` at ``path``.

        Args:
            path: the shard's full path.
            shard: its manifest entry (record count and CRC32C to check against).
            compression: the manifest's compression.
            verify: check every record's checksums where that costs extra (a format that always
                checks them ignores it).
            fetched: the shard's bytes as a ``shard_fetch.ShardFetcher`` gives them (parallel ranged
                reads, or the local cache); the reader closes it. None: read ``path`` through ``storage``.

        Raises:
            MissingShardError: the shard is not on storage.
            CorruptShardError: the file is not a readable shard of this format.
        """

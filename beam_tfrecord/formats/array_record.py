"""ArrayRecord shards: written and read with the ``array-record`` package, with random access by index.

One record per chunk (``group_size:1``), so reading record *i* decodes only it. The package takes local paths
only: a ``gs://`` shard goes through a local file. See docs/reading.md, "ArrayRecord".
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.errors import (
    BeamTFRecordError,
    CorruptShardError,
    MissingShardError,
    ReaderError,
    WriterOptionError,
)
from beam_tfrecord.formats.base import ShardCount, ShardFormat, ShardReader, ShardWriter
from beam_tfrecord.remote_reads.fetched import FetchedShard

WRITER_OPTIONS = "group_size:1"
READ_BLOCK_RECORDS = 256  # records per read call of a range
COUNT_BLOCK_RECORDS = 1024  # records per read call when counting a whole shard


_RIEGELI_STARTED_IN: int | None = None  # the process whose first ArrayRecord read or write started riegeli's cleaner


def _module(path: str, error: type[BeamTFRecordError]) -> Any:
    """The package's module, to read or write the shard at ``path``; ``error`` (a reader's or a writer's) when it
    is not installed, or when this process was forked from one that had already read or written ArrayRecord.

    riegeli's background cleaner (a thread and a mutex, started by a process's first ArrayRecord read or write)
    does not survive ``fork``: a forked DataLoader worker opening a shard crashed now and then with a segmentation
    fault (``absl::Mutex::UnlockSlow`` from ``riegeli::BackgroundCleaner``, in a core dump). Refused with the
    remedy before riegeli is touched, rather than a crash some of the time.
    """
    global _RIEGELI_STARTED_IN
    try:
        from array_record.python import array_record_module
    except ImportError as err:
        raise error("array_record shards need the array-record package: "
                    "pip install 'beam-tfrecord[array_record]'") from err
    if _RIEGELI_STARTED_IN not in (None, os.getpid()):
        raise error(f"{path}: this process was forked from process {_RIEGELI_STARTED_IN} after that one had read or "
                    "written ArrayRecord, and riegeli's background thread does not survive a fork (a segmentation "
                    "fault, now and then). Start such workers without fork: DataLoader(..., "
                    "multiprocessing_context='forkserver') or 'spawn' (docs/reading.md, \"ArrayRecord and forked "
                    "workers\")")
    _RIEGELI_STARTED_IN = os.getpid()
    return array_record_module


def riegeli_runs_here() -> bool:
    """Whether this process has read or written ArrayRecord: riegeli's cleaner runs, and a forked child of it
    could not use ArrayRecord (``_module``)."""
    return os.getpid() == _RIEGELI_STARTED_IN


class ArrayRecordShardWriter(ShardWriter):
    """Writes one ArrayRecord shard to ``path`` (local or remote), replacing any earlier attempt.

    Raises:
        WriterOptionError: the array-record package is not installed.
    """

    def __init__(self, path: str) -> None:
        module = _module(path, WriterOptionError)
        self._path = path
        self._remote = storage.is_remote(path)
        if self._remote:
            handle, self._local = tempfile.mkstemp(suffix=".array_record")
            os.close(handle)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._local = path
        self._writer = module.ArrayRecordWriter(self._local, WRITER_OPTIONS)

    def append(self, record: bytes) -> None:
        self._writer.write(record)

    def write(self, record: bytes | memoryview) -> None:
        """Appends one record (the name the writer had before the formats package)."""
        self._writer.write(bytes(record))

    def close(self) -> tuple[str, int]:
        """Finishes the file (uploading it when remote); returns its CRC32C (8 hex digits) and size."""
        self._writer.close()
        checksum = storage.crc32c_and_size(self._local)
        if self._remote:
            try:
                storage.copy_file(self._local, self._path)
            finally:
                os.remove(self._local)
        return checksum


@functools.lru_cache(maxsize=1)
def _cache_dir() -> str:
    return tempfile.mkdtemp(prefix="beam-tfrecord-array-record-")


def local_copy(path: str, crc32c: str) -> str:
    """A local path holding the shard at ``path``: the path itself, or a checked copy of a remote one."""
    if not storage.is_remote(path):
        return path
    local = os.path.join(_cache_dir(), f"{crc32c}-{os.path.basename(path)}")
    if not os.path.exists(local):
        partial = f"{local}.partial-{os.getpid()}"
        storage.copy_file(path, partial)
        found, _ = storage.crc32c_and_size(partial)
        if found != crc32c:
            os.remove(partial)
            raise CorruptShardError(path, f"file CRC32C {found} differs from the manifest's {crc32c}")
        os.replace(partial, local)
    return local


class ArrayRecordShardReader(ShardReader):
    """Random access to the records of one ArrayRecord shard; offsets are record indices.

    The format checks its chunk hashes on every read, so there is no ``verify`` to turn off.

    Args:
        path: the shard, local or remote.
        crc32c: its CRC32C from the manifest (checks a remote copy).
        num_records: its record count from the manifest; a different count is a CorruptShardError.
        fetched: the shard as a ``ShardFetcher`` gives it (its local file, in memory while the fetcher's
            bound allows: ``FetchedShard.memory_file``; closed with the reader).
    """

    def __init__(self, path: str, *, crc32c: str, num_records: int, fetched: FetchedShard | None = None) -> None:
        self.path = path
        self._fetched = fetched
        if fetched is None and not storage.exists(path):
            raise MissingShardError(path)
        module = _module(path, ReaderError)
        try:
            local = fetched.memory_file() if fetched is not None else local_copy(path, crc32c)
            try:
                self._reader = module.ArrayRecordReader(local)
                found = self._reader.num_records()
            except (RuntimeError, ValueError, OSError) as err:
                raise CorruptShardError(path, f"not a readable ArrayRecord file: {err}") from err
        except BaseException:
            if fetched is not None:
                fetched.close()  # its private copy, and what it would still fetch
            raise
        if found != num_records:
            raise CorruptShardError(path, f"{found} records, manifest says {num_records}")
        self.num_records = num_records

    def read(self, indices: Sequence[int]) -> list[bytes]:
        """The records at ``indices`` (in that order)."""
        try:
            return self._reader.read(list(indices))
        except (RuntimeError, ValueError) as err:
            raise CorruptShardError(self.path, f"reading records {list(indices)[:5]}...: {err}") from err

    def read_range(self, start: int, stop: int) -> list[bytes]:
        """Records ``[start, stop)``, read sequentially."""
        if start >= stop:
            return []
        try:
            return self._reader.read(start, stop)
        except (RuntimeError, ValueError) as err:
            raise CorruptShardError(self.path, f"reading records {start}..{stop}: {err}") from err

    def iter_records(self, start: int, stop: int) -> Iterator[tuple[bytes, int]]:
        for begin in range(start, stop, READ_BLOCK_RECORDS):
            end = min(begin + READ_BLOCK_RECORDS, stop)
            yield from zip(self.read_range(begin, end), range(begin, end))

    def iter_blocks(self, start: int, stop: int, *, block_records: int = 1024) -> Iterator[RecordBlock]:
        for begin in range(start, stop, block_records):
            end = min(begin + block_records, stop)
            yield RecordBlock.of_records(self.path, self.read_range(begin, end), np.arange(begin, end))

    def count(self) -> ShardCount:
        """The count was checked when opened; reading every record checks its chunk hashes."""
        record_bytes = 0
        for begin in range(0, self.num_records, COUNT_BLOCK_RECORDS):
            records = self.read_range(begin, min(begin + COUNT_BLOCK_RECORDS, self.num_records))
            record_bytes += sum(len(r) + FRAMING_BYTES for r in records)
        return ShardCount(self.num_records, record_bytes)

    def close(self) -> None:
        self._reader.close()
        if self._fetched is not None:
            self._fetched.close()


class ArrayRecordFormat(ShardFormat):
    """Random-access shards, for a true global shuffle in every reader (tf.data is fed by this reader)."""

    file_format = FileFormat.ARRAY_RECORD
    random_access = True
    readers = ("read_dataset", "read_numpy", "TFRecordIterableDataset")

    def open_writer(self, path: str, *, compression: Compression, direct_io: bool) -> ShardWriter:
        """Compression is inside the format (the manifest checks it is NONE); ``direct_io`` does not apply."""
        return ArrayRecordShardWriter(path)

    def open_reader(self, path: str, shard: ShardInfo, *, compression: Compression,
                    verify: bool = True, fetched: FetchedShard | None = None) -> ShardReader:
        return ArrayRecordShardReader(path, crc32c=shard.crc32c, num_records=shard.num_records, fetched=fetched)

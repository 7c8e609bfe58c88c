"""Streams over an object store's ranged reads and part uploads, shared by the ``s3://`` and Azure backends.

Invariant: a ``PartedUpload`` commits its object only when closed without an error (else nothing appears).
See docs/operations.md#storage.
"""

from __future__ import annotations

import abc
import io
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, BinaryIO, cast

_LOG = logging.getLogger(__name__)
PART_BYTES = 16 << 20  # one uploaded part and one read-buffer fill (S3 parts: >= 5 MiB but the last)


class _RangedRaw(io.RawIOBase):
    """A seekable raw stream of ``size`` bytes read with ``read_range(start, stop)``."""

    def __init__(self, read_range: Callable[[int, int], bytes], size: int) -> None:
        super().__init__()
        self._read_range = read_range
        self._size = size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        stop = min(self._size, self._position + len(view))
        if stop <= self._position:
            return 0
        data = self._read_range(self._position, stop)
        view[:len(data)] = data
        self._position += len(data)
        return len(data)


def unquoted(etag: str) -> str:
    """An ETag without the quotes the stores put around it (S3 ``"<md5>"``, Azure ``"0x8D..."``)."""
    return etag.strip('"')


def ranged_stream(read_range: Callable[[int, int], bytes], size: int) -> BinaryIO:
    """A buffered, seekable reader of an object of ``size`` bytes, fetched ``PART_BYTES`` at a time."""
    return cast(BinaryIO, io.BufferedReader(_RangedRaw(read_range, size), buffer_size=PART_BYTES))


class PartedUpload(io.BufferedIOBase, abc.ABC):
    """A writable stream sent in parts of ``PART_BYTES``; one request when it all fits in one part.

    Subclasses send a part, put a whole small object, commit the parts, and abort.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._buffer = bytearray()
        self._parts = 0

    @abc.abstractmethod
    def _send_part(self, number: int, data: bytes) -> None:
        """Uploads part ``number`` (0, 1...), not yet visible."""

    @abc.abstractmethod
    def _put_whole(self, data: bytes) -> None:
        """Writes the whole object in one request (no part was sent)."""

    @abc.abstractmethod
    def _commit(self, parts: int) -> None:
        """Makes parts ``0..parts-1`` the object, in one step."""

    @abc.abstractmethod
    def _abort(self) -> None:
        """Drops the parts sent (nothing is committed)."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # bytes-like
        self._buffer += data
        while len(self._buffer) >= 2 * PART_BYTES:  # keep one part back: the last may be short
            self._send(bytes(self._buffer[:PART_BYTES]))
            del self._buffer[:PART_BYTES]
        return len(memoryview(data).cast("B"))

    def _send(self, data: bytes) -> None:
        self._send_part(self._parts, data)
        self._parts += 1

    def flush(self) -> None:
        pass  # only close() commits an object

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._parts == 0 and len(self._buffer) <= PART_BYTES:
                self._put_whole(bytes(self._buffer))
            else:
                for start in range(0, len(self._buffer), PART_BYTES):
                    self._send(bytes(self._buffer[start:start + PART_BYTES]))
                self._commit(self._parts)
        finally:
            self._buffer = bytearray()
            super().close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
            return
        if self._parts:
            try:
                self._abort()
            except Exception as err:  # the block's own error is the one to raise; parts left expire or are listed
                _LOG.warning("could not abort the upload of %s: %s", self.path, err)
        self._buffer = bytearray()
        super().close()

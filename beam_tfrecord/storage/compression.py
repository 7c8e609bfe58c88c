"""Compression on any store's byte stream: decompressing readers and the hashing (compressing) writer.

The checksum a ``HashingWriter`` returns covers exactly the bytes stored, whatever the store.
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import Any, BinaryIO, cast

import google_crc32c

from beam_tfrecord.core.naming import Compression

_ZLIB_WBITS = {Compression.GZIP: 31, Compression.ZLIB: 15}


class _ZlibReader(io.RawIOBase):
    """A readable stream of the zlib-format (RFC 1950) data in ``raw``, decompressed as it is read."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(_ZLIB_WBITS[Compression.ZLIB])
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending and not self._inflate.eof:
            chunk = self._raw.read(1 << 20)
            self._pending = self._inflate.decompress(chunk) if chunk else self._inflate.flush()
            if not chunk and not self._pending:
                if not self._inflate.eof:
                    raise EOFError("compressed file ended before the end-of-stream marker was reached")
                break
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


def decompressed(raw: Any, compression: Compression) -> BinaryIO:
    """A readable stream of the bytes of ``raw`` (a readable file object) decompressed as they are read."""
    if compression is Compression.GZIP:
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))
    if compression is Compression.ZLIB:
        return io.BufferedReader(_ZlibReader(raw), 1 << 20)
    return cast(BinaryIO, raw)


class HashingWriter:
    """Writes (optionally compressing) to a raw handle, hashing and counting the stored bytes.

    Compression is done here with zlib rather than by Beam's compressed file wrapper so that
    the checksum covers exactly the bytes on storage. zlib's gzip header carries no name and a
    zero timestamp, so the same records always give the same file.
    """

    def __init__(self, raw: BinaryIO, compression: Compression) -> None:
        self._raw = raw
        self._digest = google_crc32c.Checksum()
        self.num_bytes = 0
        self._compressor = (zlib.compressobj(6, zlib.DEFLATED, _ZLIB_WBITS[compression])
                            if compression is not Compression.NONE else None)

    def _store(self, data: bytes) -> None:
        if data:
            self._digest.update(data)
            self.num_bytes += len(data)
            self._raw.write(data)

    def write(self, data: bytes) -> None:
        self._store(self._compressor.compress(data) if self._compressor else data)

    def close(self) -> str:
        """Flushes, closes the raw handle and returns the CRC32C (8 hex digits) of the stored bytes."""
        if self._compressor:
            self._store(self._compressor.flush())
        self._raw.close()
        return self._digest.hexdigest().decode("ascii")

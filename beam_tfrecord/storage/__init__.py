"""Storage: local paths and ``gs://`` behave the same, without Apache Beam or TensorFlow.

Three backends, chosen by the path's scheme:

- local paths: the ``os`` module;
- ``gs://``: google-cloud-storage directly (``beam_tfrecord.storage.gcs``: one client per process, explicit
  retries, preconditioned writes), so the readers work where Beam is not installed. Copies and
  deletes are one request per object: local emulators (fake-gcs-server) answer JSON-API batch
  requests with an empty body;
- any other scheme (``s3://``, ``hdfs://``...): Beam's ``FileSystems``, imported on first use.

Globs follow Beam's rules: ``*`` and ``?`` stay within a path segment, ``**`` crosses them.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import re
import shutil
import uuid
import zlib
from typing import Any, BinaryIO, cast

import google_crc32c

from beam_tfrecord.core.naming import Compression
from beam_tfrecord.storage import gcs
from beam_tfrecord.storage.disk_space import raise_typed_when_full

_ZLIB_WBITS = {Compression.GZIP: 31, Compression.ZLIB: 15}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_GLOB_CHARS = re.compile(r"[*?\[]")
_COPY_CHUNK_BYTES = 8 << 20  # moved at a time by ``copy_file`` to or from an object store


def scheme(path: str) -> str | None:
    """``"gs"`` for ``gs://bucket/x``; None for a local path."""
    match = _SCHEME.match(path)
    return match.group(1).lower() if match else None


def is_remote(path: str) -> bool:
    return scheme(path) is not None


def gcs_blob(path: str) -> Any:
    """The google-cloud-storage ``Blob`` of a ``gs://`` path (for preconditioned writes)."""
    return gcs.blob(path)


def _beam() -> Any:
    from apache_beam.io.filesystems import FileSystems  # other schemes need the [beam] extra

    return FileSystems


def join(base: str, *parts: str) -> str:
    if not is_remote(base):
        return os.path.join(base, *parts)
    out = base
    for part in parts:
        out = f"{out.rstrip('/')}/{part.lstrip('/')}"
    return out


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    if scheme(path) == "gs":
        return gcs.exists(path)
    return bool(_beam().exists(path))


def _open_raw_read(path: str) -> BinaryIO:
    if not is_remote(path):
        return open(path, "rb")
    if scheme(path) == "gs":
        return cast(BinaryIO, gcs.open_read(path))
    from apache_beam.io.filesystem import CompressionTypes

    return _beam().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    """A whole file's bytes."""
    if not is_remote(path):
        with open(path, "rb", buffering=0) as handle:
            return handle.readall()
    if scheme(path) == "gs":
        return gcs.read_bytes(path)
    with _open_raw_read(path) as handle:
        return handle.read()


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


def open_read(path: str, compression: Compression = Compression.NONE) -> BinaryIO:
    """Opens a file for reading, decompressing as it goes."""
    return decompressed(_open_raw_read(path), compression)


def decompressed(raw: Any, compression: Compression) -> BinaryIO:
    """A readable stream of the bytes of ``raw`` (a readable file object) decompressed as they are read."""
    if compression is Compression.GZIP:
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))
    if compression is Compression.ZLIB:
        return io.BufferedReader(_ZlibReader(raw), 1 << 20)
    return raw


def open_write(path: str) -> BinaryIO:
    """Opens a file for writing raw bytes (parent folders are created as needed).

    On gs:// the upload replaces exactly the generation found when opened (see ``gcs.GcsWriter``).
    """
    if not is_remote(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return open(path, "wb")
    if scheme(path) == "gs":
        return cast(BinaryIO, gcs.GcsWriter(path))
    from apache_beam.io.filesystem import CompressionTypes

    return _beam().create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes ``data`` to a temporary name next to ``path``, then renames it into place."""
    temp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    if scheme(path) == "gs":
        gcs.upload_new(temp, data)  # a fresh name: one request, ifGenerationMatch=0
    elif not is_remote(path):
        with raise_typed_when_full(path, len(data), partial=temp), open_write(temp) as handle:
            handle.write(data)
    else:
        with open_write(temp) as handle:
            handle.write(data)
    rename([temp], [path])


def make_dirs(path: str) -> None:
    """Creates a local directory and its parents if missing (object stores have no directories)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)  # exist_ok: two jobs may make it at once


def rename(sources: list[str], destinations: list[str]) -> None:
    """Renames files, replacing existing destinations (GCS: copy over, then delete the source).

    A GCS copy replaces its destination in one step, so a renamed-over pointer file (``LATEST``)
    is never missing (``gcs.rename``: preconditioned, retried). Across filesystems or schemes (a
    ``temp_dir`` on another disk than the output, or local with a ``gs://`` output) a file is copied
    over its destination in one replacement (``_copy_over``), then the source is deleted.
    """
    for source, destination in zip(sources, destinations, strict=True):
        if not is_remote(source) and not is_remote(destination):
            os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
            try:
                os.replace(source, destination)
                continue
            except OSError as err:
                if err.errno != errno.EXDEV:  # EXDEV: another filesystem, copied below
                    raise
        elif scheme(source) == scheme(destination) == "gs":
            gcs.rename(source, destination)
            continue
        elif scheme(source) == scheme(destination):
            _beam().rename([source], [destination])
            continue
        _copy_over(source, destination)
        delete_if_exists([source])


def _copy_over(source: str, destination: str) -> None:
    """Copies ``source`` over ``destination`` in one replacement: a local copy is made beside it under
    a temporary name, then renamed over it; an upload to an object store replaces it when it ends."""
    if is_remote(destination):
        copy_file(source, destination)
        return
    temp = f"{destination}.tmp-{uuid.uuid4().hex[:12]}"
    needed_bytes = 0 if is_remote(source) else os.path.getsize(source)
    with raise_typed_when_full(destination, needed_bytes, partial=temp):
        copy_file(source, temp)
    os.replace(temp, destination)


def copy_file(source: str, destination: str) -> None:
    """Copies a file's bytes to ``destination`` (local or remote, either way; parent folders made)."""
    if not is_remote(source) and not is_remote(destination):
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
        shutil.copyfile(source, destination)  # the kernel copies (copy_file_range / sendfile)
        return
    with open_read(source) as reader, open_write(destination) as writer:
        shutil.copyfileobj(reader, writer, _COPY_CHUNK_BYTES)


def delete_if_exists(paths: list[str]) -> None:
    for path in paths:
        if not is_remote(path):
            if os.path.lexists(path):
                os.remove(path)
        elif scheme(path) == "gs":
            gcs.delete(path)  # already gone is the state asked for
        elif _beam().exists(path):
            _beam().delete([path])


def delete_tree(path: str) -> None:
    """Deletes a directory and everything under it; a missing directory is fine."""
    directory = path.rstrip("/")
    if not is_remote(directory):
        if os.path.isdir(directory):
            shutil.rmtree(directory)
        return
    delete_if_exists([p for p, _ in list_files(directory + "/**")])


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Beam's glob rules as a regular expression: ``*``/``?`` within a segment, ``**`` across."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            body = pattern[i:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(char))
    return re.compile("".join(out))


def literal_prefix(pattern: str) -> str:
    """The part of a glob before its first wildcard (all of it when it has none)."""
    match = _GLOB_CHARS.search(pattern)
    return pattern[:match.start()] if match else pattern


def list_files(pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
    """(path, size in bytes) of every file matching a glob, sorted by path.

    Args:
        pattern: a path with glob characters (see ``glob_regex``).
        include_broken: also list local entries that cannot be sized (dangling symbolic links,
            files that vanish while listed), with size -1, so a caller can report them.
    """
    literal = literal_prefix(pattern)
    regex = glob_regex(pattern)
    if not is_remote(pattern):
        return _list_local(literal, regex, include_broken=include_broken)
    if scheme(pattern) == "gs":
        bucket, prefix = gcs.split(literal)
        found = ((f"gs://{bucket}/{name}", size) for name, size in gcs.list_objects(bucket, prefix))
        return sorted((path, size) for path, size in found if regex.fullmatch(path))
    result = _beam().match([pattern])[0]
    return sorted((m.path, m.size_in_bytes) for m in result.metadata_list)


def _list_local(literal: str, regex: re.Pattern[str], *, include_broken: bool) -> list[tuple[str, int]]:
    if os.path.isfile(literal) or os.path.islink(literal):
        candidates = [literal]
    else:
        root = literal if literal.endswith(os.sep) or os.path.isdir(literal) else os.path.dirname(literal)
        candidates = [os.path.join(folder, name) for folder, _, names in os.walk(root or ".") for name in names]
        if not root:  # a pattern relative to the working directory: match "x.csv", not "./x.csv"
            candidates = [os.path.relpath(path) for path in candidates]
    out = []
    for path in candidates:
        if not regex.fullmatch(path):
            continue
        try:
            out.append((path, os.path.getsize(path)))
        except OSError:
            if include_broken:
                out.append((path, -1))
    return sorted(out)


def crc32c_and_size(path: str, chunk_bytes: int = 8 << 20) -> tuple[str, int]:
    """CRC32C (8 hex digits) and size of a file as stored."""
    digest = google_crc32c.Checksum()
    size = 0
    with _open_raw_read(path) as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest().decode("ascii"), size


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

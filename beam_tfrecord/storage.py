"""Storage helpers over Beam's ``FileSystems``, so local paths and ``gs://`` behave the same."""

from __future__ import annotations

import functools
import os
import uuid
import zlib
from typing import BinaryIO

import google_crc32c
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_tfrecord.core.naming import Compression

_BEAM_COMPRESSION = {
    Compression.NONE: CompressionTypes.UNCOMPRESSED,
    Compression.GZIP: CompressionTypes.GZIP,
    Compression.ZLIB: CompressionTypes.DEFLATE,  # Beam's DEFLATE is the zlib format TensorFlow calls ZLIB
}
_ZLIB_WBITS = {Compression.GZIP: 31, Compression.ZLIB: 15}


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def read_bytes(path: str) -> bytes:
    """A whole file's bytes. Local paths are read directly: ``FileSystems.open`` costs ~10 µs
    per call in filesystem lookup, which shows when shard writers read thousands of files."""
    if FileSystems.get_scheme(path) is None:
        with open(path, "rb", buffering=0) as handle:
            return handle.readall()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return handle.read()


def open_read(path: str, compression: Compression = Compression.NONE) -> BinaryIO:
    """Opens a file for reading, decompressing as it goes."""
    return FileSystems.open(path, compression_type=_BEAM_COMPRESSION[compression])


def open_write(path: str) -> BinaryIO:
    """Opens a file for writing raw bytes (parent folders are created as needed)."""
    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes ``data`` to a temporary name next to ``path``, then renames it into place."""
    temp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    with open_write(temp) as handle:
        handle.write(data)
    rename([temp], [path])


@functools.lru_cache(maxsize=1)
def _gcs():
    """One GCS client per process, for single-object copy and delete.

    Beam's ``GcsFileSystem.rename``/``delete`` send JSON-API *batch* requests, which local GCS
    emulators (fake-gcs-server) answer with an empty multipart body; one request per object
    works on both real GCS and the emulator. A copy also replaces its destination in one step,
    so a renamed-over pointer file (``LATEST``) is never missing.
    """
    from apache_beam.io.gcp.gcsio import GcsIO  # needs the [gcp] extra only when gs:// is used

    return GcsIO()


def gcs_blob(path: str):
    """The google-cloud-storage Blob of a gs:// path, through Beam's client (for preconditioned writes)."""
    from apache_beam.io.gcp.gcsio import parse_gcs_path

    bucket, name = parse_gcs_path(path)
    return _gcs().client.bucket(bucket).blob(name)


def _is_gcs(path: str) -> bool:
    return FileSystems.get_scheme(path) == "gs"


def make_dirs(path: str) -> None:
    """Creates a local directory and its parents if missing (object stores have no directories)."""
    if FileSystems.get_scheme(path) is None:
        os.makedirs(path, exist_ok=True)  # exist_ok: two jobs may make it at once


def rename(sources: list[str], destinations: list[str]) -> None:
    """Renames files, replacing existing destinations (GCS: copy over, then delete the source)."""
    if not sources:
        return
    if _is_gcs(sources[0]):
        for source, destination in zip(sources, destinations, strict=True):
            _gcs().rename(source, destination)
        return
    FileSystems.rename(sources, destinations)


def delete_if_exists(paths: list[str]) -> None:
    present = [p for p in paths if FileSystems.exists(p)]
    if present and _is_gcs(present[0]):
        for path in present:
            _gcs().delete(path)
    elif present:
        FileSystems.delete(present)


def delete_tree(path: str) -> None:
    """Deletes a directory and everything under it; a missing directory is fine."""
    directory = path.rstrip("/")
    if FileSystems.get_scheme(directory) == "gs":
        matched = FileSystems.match([directory + "/**"])[0].metadata_list
        delete_if_exists([m.path for m in matched])
    elif FileSystems.exists(directory):
        FileSystems.delete([directory])  # the local filesystem removes a directory tree


def list_files(pattern: str) -> list[tuple[str, int]]:
    """(path, size in bytes) of every file matching a glob, sorted by path."""
    result = FileSystems.match([pattern])[0]
    return sorted((m.path, m.size_in_bytes) for m in result.metadata_list)


def crc32c_and_size(path: str, chunk_bytes: int = 8 << 20) -> tuple[str, int]:
    """CRC32C (8 hex digits) and size of a file as stored."""
    digest = google_crc32c.Checksum()
    size = 0
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
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

"""Storage: every path behaves the same, whatever its store; no Apache Beam or TensorFlow needed.

``backend_for(path)`` gives the path's ``backend.StorageBackend``, chosen by its scheme from ``_BACKENDS``
(local paths: ``local``; ``gs://``: ``gcs_backend``; ``s3://``: ``s3``; Azure: ``azure_blob``; any other:
Beam's ``FileSystems``). The functions here ask it once per path and do what crosses stores. Adding a store:
one module with its ``StorageBackend`` subclass, one line in ``_BACKENDS``, and a fixture for it in
``tests/storage/test_backend_contract.py`` (the contract every backend passes). See docs/operations.md#storage.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import BinaryIO

import google_crc32c

from beam_tfrecord.core.naming import Compression
from beam_tfrecord.storage.azure_blob import AzureBlobBackend
from beam_tfrecord.storage.backend import COPY_CHUNK_BYTES, StorageBackend, StoredFile, VersionedBytes
from beam_tfrecord.storage.beam_filesystems import BeamFileSystemsBackend
from beam_tfrecord.storage.compression import HashingWriter, decompressed
from beam_tfrecord.storage.deadlines import StoreDeadlines
from beam_tfrecord.storage.disk_space import raise_typed_when_full
from beam_tfrecord.storage.gcs_backend import GcsBackend
from beam_tfrecord.storage.local import LocalBackend
from beam_tfrecord.storage.paths import glob_escape, glob_regex, is_remote, join, literal_prefix, scheme
from beam_tfrecord.storage.s3 import S3Backend

_AZURE = AzureBlobBackend()
_BACKENDS: dict[str | None, StorageBackend] = {
    None: LocalBackend(), "gs": GcsBackend(), "s3": S3Backend(),
    "az": _AZURE, "abfs": _AZURE, "abfss": _AZURE, "azfs": _AZURE,  # fsspec's, and Apache Beam's with the account
}
_FALLBACK = BeamFileSystemsBackend()  # any scheme without its own backend


def backend_for(path: str) -> StorageBackend:
    """The backend of ``path``'s store (its scheme; None: local)."""
    return _BACKENDS.get(scheme(path), _FALLBACK)


def exists(path: str) -> bool:
    return backend_for(path).exists(path)


def read_bytes(path: str) -> bytes:
    """A whole file's bytes."""
    return backend_for(path).read_bytes(path)


def read_bytes_or_none(path: str) -> bytes | None:
    """A whole file's bytes, or None if there is none, in one request (local, gs://, s3://, Azure; Beam's
    other filesystems ask ``exists`` first)."""
    return backend_for(path).read_bytes_or_none(path)


def raise_if_bucket_missing(path: str) -> None:
    """Raises ``BucketNotFoundError`` when ``path``'s bucket is not there (where a store's "not found" left it
    open: after ``read_bytes_or_none`` found nothing)."""
    backend_for(path).raise_if_bucket_missing(path)


def open_read(path: str, compression: Compression = Compression.NONE) -> BinaryIO:
    """Opens a file for reading, decompressing as it goes."""
    return decompressed(backend_for(path).open_read(path), compression)


def open_write(path: str) -> BinaryIO:
    """Opens a file for writing raw bytes (parent folders are created as needed).

    On gs:// the upload replaces exactly the generation found when opened (see ``gcs.GcsWriter``).
    """
    return backend_for(path).open_write(path)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes ``data`` to a temporary name next to ``path``, then renames it into place."""
    temp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    with raise_typed_when_full(path, len(data), partial=temp):
        backend_for(temp).write_new(temp, data)
    rename([temp], [path])


def make_dirs(path: str) -> None:
    """Creates a local directory and its parents if missing (object stores have no directories)."""
    backend_for(path).make_dirs(path)


def create_if_absent(path: str, data: bytes) -> bool:
    """Creates ``path`` holding ``data`` only if nothing is there, atomically; whether this call created it."""
    return backend_for(path).create_if_absent(path, data)


def read_versioned(path: str) -> VersionedBytes | None:
    """The bytes at ``path`` and their version (for ``delete_if_unchanged``); None if there is none."""
    return backend_for(path).read_versioned(path)


def delete_if_unchanged(path: str, read: VersionedBytes) -> None:
    """Deletes ``path`` only if it still holds what ``read_versioned`` gave (else leaves it)."""
    backend_for(path).delete_if_unchanged(path, read)


def rename(sources: list[str], destinations: list[str]) -> None:
    """Renames files, replacing existing destinations (GCS: copy over, then delete the source).

    A GCS copy replaces its destination in one step, so a renamed-over pointer file (``LATEST``)
    is never missing (``gcs.rename``: preconditioned, retried). Across filesystems or schemes (a
    ``temp_dir`` on another disk than the output, or local with a ``gs://`` output) a file is copied
    over its destination in one replacement (``_copy_over``), then the source is deleted.
    """
    for source, destination in zip(sources, destinations, strict=True):
        if scheme(source) == scheme(destination) and backend_for(source).rename(source, destination):
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
    if scheme(source) == scheme(destination):
        backend_for(source).copy(source, destination)
        return
    with open_read(source) as reader, open_write(destination) as writer:
        shutil.copyfileobj(reader, writer, COPY_CHUNK_BYTES)


def delete_if_exists(paths: list[str]) -> None:
    for path in paths:
        backend_for(path).delete(path)


def delete_tree(path: str) -> None:
    """Deletes a directory and everything under it; a missing directory is fine."""
    directory = path.rstrip("/")
    backend_for(directory).delete_tree(directory)


def list_files(pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
    """(path, size in bytes) of every file matching a glob, sorted by path.

    Args:
        pattern: a path with glob characters (see ``glob_regex``).
        include_broken: also list local entries that cannot be sized (dangling symbolic links,
            files that vanish while listed), with size -1, so a caller can report them.
    """
    return backend_for(pattern).list_files(pattern, include_broken=include_broken)


def list_details(pattern: str, *, include_broken: bool = False) -> list[StoredFile]:
    """Every file matching a glob with its size, update time and content token, sorted by path.

    As Beam's ``FileSystems.match``: a pattern ending in ``/`` lists that folder's files; one without
    wildcards is that one path when it exists (even a local directory). ``include_broken``: as
    ``list_files``' (entries that cannot be sized come with size -1 and no token).
    """
    if pattern.endswith("/"):
        pattern += "*"
    backend = backend_for(pattern)
    if literal_prefix(pattern) == pattern:
        found = backend.stat(pattern)
        return [found] if found is not None else []
    return backend.list_details(pattern, include_broken=include_broken)


def crc32c_and_size(path: str, chunk_bytes: int = 8 << 20) -> tuple[str, int]:
    """CRC32C (8 hex digits) and size of a file as stored."""
    digest = google_crc32c.Checksum()
    size = 0
    with backend_for(path).open_read(path) as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest().decode("ascii"), size


__all__ = [
    "HashingWriter", "StorageBackend", "StoreDeadlines", "StoredFile", "VersionedBytes", "backend_for", "copy_file",
    "crc32c_and_size", "create_if_absent", "decompressed", "delete_if_exists", "delete_if_unchanged",
    "delete_tree", "exists", "glob_escape", "glob_regex", "is_remote", "join", "list_details", "list_files",
    "literal_prefix", "make_dirs", "open_read", "open_write", "raise_if_bucket_missing", "read_bytes",
    "read_bytes_or_none", "read_versioned", "rename", "scheme",
    "write_bytes_atomic",
]

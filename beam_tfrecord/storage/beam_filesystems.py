"""Any other scheme (``s3://``, ``hdfs://``...): Apache Beam's ``FileSystems``, imported on first use.

The one storage module that imports Beam (the ``[beam]`` extra). It has no conditional writes and
no content tokens. See docs/operations.md#storage.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

from beam_tfrecord.storage.backend import StorageBackend, StoredFile, VersionedBytes


def _beam() -> Any:
    from apache_beam.io.filesystems import FileSystems  # other schemes need the [beam] extra

    return FileSystems


def _uncompressed() -> Any:
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def _stored(meta: Any) -> StoredFile:
    return StoredFile(meta.path, int(meta.size_in_bytes), float(meta.last_updated_in_seconds), None)


class BeamFileSystemsBackend(StorageBackend):
    """Whatever Beam's ``FileSystems`` serves for the path's scheme."""

    lists_tokens = False

    def exists(self, path: str) -> bool:
        return bool(_beam().exists(path))

    def open_read(self, path: str) -> BinaryIO:
        return _beam().open(path, compression_type=_uncompressed())

    def read_bytes(self, path: str) -> bytes:
        with self.open_read(path) as handle:
            return handle.read()

    def read_bytes_or_none(self, path: str) -> bytes | None:
        return self.read_bytes(path) if self.exists(path) else None  # Beam's not-found error differs by filesystem

    def open_write(self, path: str) -> BinaryIO:
        return _beam().create(path, compression_type=_uncompressed())

    def list_files(self, pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
        return sorted((found.path, found.size_bytes) for found in self.list_details(pattern))

    def list_details(self, pattern: str, *, include_broken: bool = False) -> list[StoredFile]:
        return sorted((_stored(meta) for meta in _beam().match([pattern])[0].metadata_list), key=lambda f: f.path)

    def stat(self, path: str) -> StoredFile | None:
        return _stored(_beam().metadata(path)) if self.exists(path) else None

    def delete(self, path: str) -> None:
        if self.exists(path):
            _beam().delete([path])

    def rename(self, source: str, destination: str) -> bool:
        _beam().rename([source], [destination])
        return True

    def create_if_absent(self, path: str, data: bytes) -> bool:
        raise io.UnsupportedOperation(f"{path}: Beam's FileSystems have no conditional create (local and gs:// do)")

    def read_versioned(self, path: str) -> VersionedBytes | None:
        return VersionedBytes(self.read_bytes(path), None) if self.exists(path) else None

    def delete_if_unchanged(self, path: str, read: VersionedBytes) -> None:
        raise io.UnsupportedOperation(f"{path}: Beam's FileSystems have no conditional delete (local and gs:// do)")

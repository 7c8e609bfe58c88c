"""``gs://``: the ``GcsBackend``; ranged reads through obstore, every other request through ``storage.gcs``
(google-cloud-storage: retried, preconditioned writes, generations).

Content tokens are ``"<size>:g<generation>"`` (every upload makes a new generation), stored in existing
input indexes: never change them. See docs/operations.md#storage.
"""

from __future__ import annotations

import datetime
import time
from typing import Any, BinaryIO, cast

from beam_tfrecord.storage import gcs, obstore_reads
from beam_tfrecord.storage.backend import RangedView, StorageBackend, StoredFile, VersionedBytes
from beam_tfrecord.storage.deadlines import StoreDeadlines, current_deadlines
from beam_tfrecord.storage.paths import glob_regex, literal_prefix


def _updated_seconds(updated: datetime.datetime | None) -> float:
    """An object's update time in seconds, computed as Beam's ``GcsIO._updated_to_seconds`` does (refresh
    fingerprints stored in existing manifests were made with this formula, local-time quirk included)."""
    if updated is None:
        return 0.0
    return time.mktime(updated.timetuple()) - time.timezone + updated.microsecond / 1000000.0


def _stored(path: str, found: Any) -> StoredFile:
    size = int(found.size or 0)
    return StoredFile(path, size, _updated_seconds(found.updated), f"{size}:g{int(found.generation)}")


@gcs.STORE.translating()
class GcsBackend(StorageBackend):
    """Google Cloud Storage: ranged reads through obstore, the rest through google-cloud-storage (one client each)."""

    fetched_in_ranges = True

    def exists(self, path: str) -> bool:
        return gcs.exists(path)

    def open_read(self, path: str) -> BinaryIO:
        return cast(BinaryIO, gcs.open_read(path))

    def read_bytes(self, path: str) -> bytes:
        return gcs.read_bytes(path)

    def read_bytes_or_none(self, path: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        try:
            return gcs.read_bytes(path)
        except NotFound:
            return None  # object or bucket: ``raise_if_bucket_missing`` tells, where nothing was found

    def raise_if_bucket_missing(self, path: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            gcs.client().get_bucket(gcs.split(path)[0], retry=None, timeout=gcs.timeout())
        except NotFound as err:
            raise gcs.STORE.bucket_not_found(path) from err
        except Exception:  # the question's own failure (unreachable...): the caller reports what it found
            return

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        return bytes(obstore_reads.gcs_ranges(1, current_deadlines())(path, start, stop))

    def ranged_reader(self, connections: int, *, deadlines: StoreDeadlines | None = None) -> RangedView:
        # this process's store of ``connections`` per bucket
        return obstore_reads.gcs_ranges(connections, deadlines or current_deadlines())

    def open_write(self, path: str) -> BinaryIO:
        return cast(BinaryIO, gcs.GcsWriter(path))

    def write_new(self, path: str, data: bytes) -> None:
        gcs.upload_new(path, data)  # a fresh name: one request, ifGenerationMatch=0

    def _matching(self, pattern: str) -> list[tuple[str, Any]]:
        regex = glob_regex(pattern)
        bucket, prefix = gcs.split(literal_prefix(pattern))
        found = ((f"gs://{bucket}/{blob.name}", blob) for blob in gcs.list_blobs(bucket, prefix))
        return sorted(((path, blob) for path, blob in found if regex.fullmatch(path)), key=lambda pair: pair[0])

    def list_files(self, pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
        return [(path, int(blob.size or 0)) for path, blob in self._matching(pattern)]

    def list_details(self, pattern: str, *, include_broken: bool = False) -> list[StoredFile]:
        return [_stored(path, blob) for path, blob in self._matching(pattern)]

    def stat(self, path: str) -> StoredFile | None:
        found = gcs.get_blob(path)
        return _stored(path, found) if found is not None else None

    def delete(self, path: str) -> None:
        gcs.delete(path)  # already gone is the state asked for

    def rename(self, source: str, destination: str) -> bool:
        gcs.rename(source, destination)  # one atomic replacement of the destination, then the delete
        return True

    def create_if_absent(self, path: str, data: bytes) -> bool:
        return gcs.create_if_absent(path, data)

    def read_versioned(self, path: str) -> VersionedBytes | None:
        found = gcs.read_with_generation(path)
        return VersionedBytes(*found) if found is not None else None

    def delete_if_unchanged(self, path: str, read: VersionedBytes) -> None:
        gcs.delete_if_generation(path, None if read.version is None else int(read.version))

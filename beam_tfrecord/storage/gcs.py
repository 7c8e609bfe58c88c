"""``gs://`` through google-cloud-storage: every call retried, every write with a precondition that makes
its retry safe.

A retry that fails its precondition (412) may have met its own first try, whose answer was lost: it
is done when the object holds exactly the bytes this call wrote. A delete that finds nothing is done.
Why, and the table of calls and preconditions: docs/operations.md#retries-and-preconditions.
"""

from __future__ import annotations

import base64
import functools
import io
import logging
import os
from types import TracebackType
from typing import Any

import google_crc32c

from beam_tfrecord.storage import obstore_reads
from beam_tfrecord.storage.deadlines import current_deadlines
from beam_tfrecord.storage.store_errors import Diagnosis, Failure, Store, connection_detail, first_line

_LOG = logging.getLogger(__name__)
OCTET_STREAM = "application/octet-stream"
CHUNK_BYTES = 16 << 20  # resumable upload chunk and read buffer, as Beam's GCS client uses


def retry_policy() -> Any:
    """The retry of every call: google-cloud-storage's own default, given up once the process's
    ``StoreDeadlines.retry_seconds`` have passed (its own default: 120 s)."""
    from google.cloud.storage.retry import DEFAULT_RETRY  # imported on first gs:// use

    return DEFAULT_RETRY.with_timeout(current_deadlines().retry_seconds)


def timeout() -> tuple[float, float]:
    """Every request's (connect, answer) time limits: the process's ``StoreDeadlines``."""
    limits = current_deadlines()
    return limits.connect_seconds, limits.request_seconds


def split(path: str) -> tuple[str, str]:
    """(bucket, object name) of ``gs://bucket/name``."""
    bucket, _, name = path[len("gs://"):].partition("/")
    if not bucket:
        raise ValueError(f"{path!r} names no bucket; expected gs://BUCKET/OBJECT")
    return bucket, name


def client() -> Any:
    """One client per process and ``STORAGE_EMULATOR_HOST`` (which points it at an emulator). A forked child makes
    its own: the connections of its parent's client are not its to use."""
    return _client_for(os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"))


@functools.lru_cache(maxsize=4)
def _client_for(pid: int, emulator: str | None) -> Any:
    from google.cloud.storage import Client

    del pid, emulator  # the cache's key: the client reads the emulator from the environment when it is made
    return Client()


def blob(path: str) -> Any:
    """The ``Blob`` of a ``gs://`` path (no request made)."""
    bucket, name = split(path)
    return client().bucket(bucket).blob(name)


def generation_of(path: str) -> int:
    """The generation of the object at ``path``; 0 if there is none (``ifGenerationMatch=0`` means "absent")."""
    bucket, name = split(path)
    found = client().bucket(bucket).get_blob(name, retry=retry_policy(), timeout=timeout())
    return int(found.generation) if found is not None else 0


def crc32c_base64(data: bytes) -> str:
    """CRC32C as GCS reports it: base64 of the big-endian 4 bytes."""
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode("ascii")


def holds(path: str, crc32c: str, size: int) -> bool:
    """Whether the object at ``path`` holds exactly these bytes (base64 CRC32C, size)."""
    bucket, name = split(path)
    found = client().bucket(bucket).get_blob(name, retry=retry_policy(), timeout=timeout())
    return found is not None and found.crc32c == crc32c and int(found.size or 0) == size


def _status(err: BaseException) -> int | None:
    """The HTTP status of a failed call, as the JSON API calls raise it or as a resumable upload's requests do."""
    from google.api_core.exceptions import GoogleAPICallError
    from google.cloud.storage.exceptions import InvalidResponse

    if isinstance(err, GoogleAPICallError):
        return int(err.code) if err.code is not None else None
    if isinstance(err, InvalidResponse):
        return getattr(err.response, "status_code", None)
    return None


def bucket_missing(path: str) -> bool:
    """Whether the bucket of ``path`` is not there: a 404 names no more than "not found" on the emulator (one
    request, asked only when a call failed with a 404; False when it cannot be asked)."""
    try:
        return not client().bucket(split(path)[0]).exists(retry=None, timeout=timeout())
    except Exception:  # the question's own failure: the call's error is the one to report
        return False


def _diagnose(err: BaseException, path: str) -> Diagnosis | None:
    """google-cloud-storage's, google-auth's and requests' errors (obstore's for the readers) as a ``Failure``."""
    import requests
    from google.api_core.exceptions import RetryError
    from google.auth import exceptions as auth

    if isinstance(err, RetryError) and err.cause is not None:
        return _diagnose(err.cause, path)  # the last try's error; the retries' time is the call's
    if isinstance(err, auth.DefaultCredentialsError):
        return Diagnosis(Failure.ACCESS, f"no credentials found ({first_line(err)})")
    if isinstance(err, auth.RefreshError):
        return Diagnosis(Failure.ACCESS, f"credentials rejected ({first_line(err)})")
    if isinstance(err, requests.exceptions.ConnectTimeout):
        return Diagnosis(Failure.UNREACHABLE, connection_detail(err))
    if isinstance(err, requests.exceptions.Timeout):
        return Diagnosis(Failure.TIMED_OUT, first_line(err))
    if isinstance(err, requests.exceptions.ConnectionError):
        return Diagnosis(Failure.UNREACHABLE, connection_detail(err))
    status = _status(err)
    if status in (401, 403):
        return Diagnosis(Failure.ACCESS, first_line(err))
    if status == 429:
        return Diagnosis(Failure.THROTTLED, first_line(err))
    if status == 404 and bucket_missing(path):
        return Diagnosis(Failure.BUCKET_MISSING, first_line(err))
    return obstore_reads.diagnose(err)


def _endpoint() -> str:
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    return f"{emulator}, from STORAGE_EMULATOR_HOST" if emulator else "https://storage.googleapis.com"


STORE = Store(name="gs", bucket_kind="bucket", endpoint=_endpoint, bucket_of=lambda path: split(path)[0],
              diagnose=_diagnose,
              credentials="Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS (a key file), "
                          "~/.config/gcloud/application_default_credentials.json (gcloud auth application-default "
                          "login), or the metadata server of a Google Cloud machine")


def _precondition_failed(err: BaseException) -> bool:
    return _status(err) == 412


def exists(path: str) -> bool:
    return bool(blob(path).exists(retry=retry_policy(), timeout=timeout()))


def read_bytes(path: str) -> bytes:
    # raw_download: the stored bytes, never a transcoded (decompressed) copy.
    return bytes(blob(path).download_as_bytes(raw_download=True, retry=retry_policy(), timeout=timeout()))


def open_read(path: str) -> Any:
    """A seekable reader; each range read (``CHUNK_BYTES``) is retried on its own, its errors typed."""
    reader = _reader_class()(blob(path), chunk_size=CHUNK_BYTES, retry=retry_policy(), timeout=timeout(),
                             raw_download=True)
    reader.path = path
    return reader


@functools.cache
def _reader_class() -> type:
    """google-cloud-storage's ``BlobReader`` (imported on first gs:// use) whose reads raise typed errors."""
    from google.cloud.storage.fileio import BlobReader

    @STORE.translating("read", "read1", "seek", path_of=lambda reader, args: reader.path)
    class TypedBlobReader(BlobReader):
        path = ""

    return TypedBlobReader


def upload_new(path: str, data: bytes) -> None:
    """Creates ``path`` holding ``data`` in one request; it must not exist (``ifGenerationMatch=0``)."""
    try:
        blob(path).upload_from_string(data, content_type=OCTET_STREAM, if_generation_match=0,
                                      retry=retry_policy(), timeout=timeout())
    except Exception as err:
        if not (_precondition_failed(err) and holds(path, crc32c_base64(data), len(data))):
            raise  # someone else's object, not our own first try


@STORE.translating("write", "close", "__exit__", path_of=lambda writer, args: writer.path)
class GcsWriter(io.BufferedIOBase):
    """A resumable upload that replaces exactly the generation found when it was opened.

    Every request of the upload (the session's start, each chunk, the last chunk that commits
    the object) is retried; a retried last chunk that finds the object already committed by its
    first try is recognised by the CRC32C and size of the bytes written. Leaving a ``with`` block
    by an exception cancels the upload: nothing is committed.
    """

    def __init__(self, path: str, *, chunk_bytes: int = CHUNK_BYTES, generation: int | None = None) -> None:
        from google.cloud.storage.fileio import BlobWriter

        super().__init__()
        self.path = path
        self._generation = generation_of(path) if generation is None else generation
        self._writer = BlobWriter(blob(path), chunk_size=chunk_bytes, ignore_flush=True, content_type=OCTET_STREAM,
                                  retry=retry_policy(), timeout=timeout(), if_generation_match=self._generation)
        self._digest = google_crc32c.Checksum()
        self._size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # bytes-like
        chunk = data if isinstance(data, bytes) else bytes(data)  # the CRC32C extension takes read-only buffers
        self._digest.update(chunk)
        self._size += len(chunk)
        self._writer.write(chunk)
        return len(chunk)

    def flush(self) -> None:
        pass  # only close() commits an object

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._writer.close()
        except Exception as err:
            # 412: the object changed since opened, maybe by our own first try; 404: a session that
            # finished and is gone (emulators answer so a re-sent last chunk, Cloud Storage with the object).
            crc32c = base64.b64encode(self._digest.digest()).decode("ascii")
            if not (_status(err) in (404, 412) and holds(self.path, crc32c, self._size)):
                raise
        finally:
            super().close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self._writer.terminate()  # cancel the session: the partial object is never committed
        except Exception as err:  # the block's own error is the one to raise; an open session expires by itself
            _LOG.warning("could not cancel the upload session of %s: %s", self.path, err)
        super().close()


def rename(source: str, destination: str) -> None:
    """Copies ``source`` over ``destination`` (one atomic replacement), then deletes ``source``.

    The copy is pinned to the source generation read first and to the destination generation it
    replaces (0: none); a retried copy that finds the destination already holding the source's
    bytes (our first try) is done. The delete is pinned to the source generation; a 404 is done.
    """
    from google.api_core.exceptions import NotFound

    source_blob = blob(source)
    source_blob.reload(retry=retry_policy(), timeout=timeout())  # generation, CRC32C, size; NotFound if missing
    target_bucket, target_name = split(destination)
    try:
        source_blob.bucket.copy_blob(source_blob, client().bucket(target_bucket), target_name,
                                     source_generation=source_blob.generation,
                                     if_generation_match=generation_of(destination), retry=retry_policy(),
                                     timeout=timeout())
    except Exception as err:
        if not (_precondition_failed(err) and holds(destination, source_blob.crc32c, int(source_blob.size))):
            raise
    try:
        source_blob.delete(if_generation_match=source_blob.generation, retry=retry_policy(), timeout=timeout())
    except NotFound:
        pass  # a retried delete whose first try removed it


def delete(path: str) -> None:
    """Deletes ``path``; a missing object (never there, or removed by a retried call's first try) is fine."""
    from google.api_core.exceptions import NotFound

    try:
        blob(path).delete(retry=retry_policy(), timeout=timeout())
    except NotFound:
        pass


def list_blobs(bucket: str, prefix: str) -> list[Any]:
    """Every ``Blob`` under ``prefix`` (name, size, generation, update time); each page request is retried."""
    return list(client().list_blobs(bucket, prefix=prefix, retry=retry_policy(), timeout=timeout()))


def get_blob(path: str) -> Any | None:
    """The ``Blob`` at ``path`` with its metadata; None if there is none."""
    bucket, name = split(path)
    return client().bucket(bucket).get_blob(name, retry=retry_policy(), timeout=timeout())


def create_if_absent(path: str, data: bytes) -> bool:
    """Creates ``path`` holding ``data`` if no object is there (``ifGenerationMatch=0``); whether this call did.

    A 412 is followed by a read: exactly ``data`` there is this call's own first try (its answer lost).
    """
    try:
        blob(path).upload_from_string(data, if_generation_match=0, retry=retry_policy(), timeout=timeout())
    except Exception as err:
        if not _precondition_failed(err):
            raise
        found = read_with_generation(path)
        return found is not None and found[0] == data
    return True


def read_with_generation(path: str) -> tuple[bytes, int | None] | None:
    """(bytes, generation) of the object at ``path``; None if there is none."""
    from google.api_core.exceptions import NotFound

    target = blob(path)
    try:
        data = target.download_as_bytes(retry=retry_policy(), timeout=timeout())
    except NotFound:
        return None
    return data, (int(target.generation) if target.generation is not None else None)


def delete_if_generation(path: str, generation: int | None) -> None:
    """Deletes ``path`` only if it is still that generation; replaced (412) or gone (404): left alone."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    try:
        blob(path).delete(if_generation_match=generation, retry=retry_policy(), timeout=timeout())
    except (NotFound, PreconditionFailed):
        pass

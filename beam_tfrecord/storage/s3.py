"""``s3://`` and S3-compatible stores (MinIO, R2, Ceph): the ``S3Backend`` through boto3 (the ``[s3]`` extra).

Configured as boto3 and the AWS CLI are (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_REGION``,
credentials). Conditional writes: ``If-None-Match: *`` and ``If-Match: <ETag>``. Content tokens are
``"<size>:e<ETag>"``. See docs/operations.md#storage.
"""

from __future__ import annotations

import os
import threading
from typing import Any, BinaryIO

from beam_tfrecord.storage import obstore_reads
from beam_tfrecord.storage.backend import RangedRead, RangedView, StorageBackend, StoredFile, VersionedBytes
from beam_tfrecord.storage.deadlines import StoreDeadlines, current_deadlines
from beam_tfrecord.storage.object_io import PartedUpload, ranged_stream, unquoted
from beam_tfrecord.storage.paths import glob_regex, literal_prefix
from beam_tfrecord.storage.store_errors import Diagnosis, Failure, Store, connection_detail, first_line

_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE")
_CLIENTS: dict[tuple[object, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_MOST_ATTEMPTS = 3  # botocore's standard mode: a request and 2 retries, each within the StoreDeadlines' limits
_CONFLICT_RETRIES = 5  # 409 ConditionalRequestConflict: another conditional write of the key was in flight
DELETE_BATCH = 1000  # keys per DeleteObjects request (S3's limit)


def split(path: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``."""
    bucket, _, key = path.partition("://")[2].partition("/")
    if not bucket:
        raise ValueError(f"{path!r} names no bucket; expected s3://BUCKET/KEY")
    return bucket, key


def client(connections: int = 10, deadlines: StoreDeadlines | None = None) -> Any:
    """This process's boto3 client keeping ``connections`` connections open (botocore's default: 10), its
    requests within ``deadlines`` (default: the process's, ``deadlines.current_deadlines``).

    One per process, pool size, deadlines and endpoint variables (read when it is made): a forked process
    (a DataLoader worker) makes its own instead of sharing its parent's sockets.
    """
    limits = deadlines or current_deadlines()
    key = (os.getpid(), connections, limits, *(os.environ.get(name) for name in _ENDPOINT_VARIABLES))
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            import boto3  # imported on first s3:// use (the [s3] extra)
            from botocore.config import Config

            _CLIENTS[key] = boto3.session.Session().client("s3", config=Config(
                max_pool_connections=connections, connect_timeout=limits.connect_seconds,
                read_timeout=limits.request_seconds,
                retries={"mode": "standard", "total_max_attempts": _attempts(limits)}))
        return _CLIENTS[key]


def _attempts(limits: StoreDeadlines) -> int:
    """botocore's attempts of one call: the retries that start within ``retry_seconds`` of its first try when
    each attempt waits ``request_seconds`` unanswered (botocore has no deadline of its own), 0 to 2 of them."""
    return 1 + min(_MOST_ATTEMPTS - 1, int(limits.retry_seconds // limits.request_seconds))


def _endpoint() -> str:
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(name):
            return f"{os.environ[name]}, from {name}"
    return "AWS's, of AWS_REGION; AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL names another"


_CREDENTIALS_REJECTED = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                         "TokenRefreshRequired", "AccessDenied", "AllAccessDisabled", "403")
_THROTTLED = ("SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests", "429",
              "503")


def _diagnose(err: BaseException, path: str) -> Diagnosis | None:
    """botocore's errors (and obstore's, for the readers' ranged reads) as a ``Failure``."""
    from botocore import exceptions

    if isinstance(err, exceptions.NoCredentialsError | exceptions.PartialCredentialsError):
        return Diagnosis(Failure.ACCESS, f"no credentials found ({first_line(err)})")
    if isinstance(err, exceptions.ReadTimeoutError):
        return Diagnosis(Failure.TIMED_OUT, first_line(err))
    if isinstance(err, exceptions.ConnectionError | exceptions.ConnectionClosedError):
        return Diagnosis(Failure.UNREACHABLE, connection_detail(err))
    if isinstance(err, exceptions.ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            return Diagnosis(Failure.BUCKET_MISSING, code)
        if code in _CREDENTIALS_REJECTED:
            return Diagnosis(Failure.ACCESS, f"{code}: {err.response.get('Error', {}).get('Message', '')}")
        if code in _THROTTLED:
            return Diagnosis(Failure.THROTTLED, code)
        return None
    return obstore_reads.diagnose(err)


STORE = Store(name="s3", bucket_kind="bucket", endpoint=_endpoint, bucket_of=lambda path: split(path)[0],
              diagnose=_diagnose,
              credentials="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN), AWS_PROFILE in "
                          "~/.aws/credentials or ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE), or an "
                          "instance or web-identity role")


def _status(err: BaseException) -> int | None:
    response = getattr(err, "response", None)
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None


def _missing(err: BaseException) -> bool:
    """A 404 for the object, not for its bucket (``NoSuchBucket``: typed by ``STORE``; a HEAD's 404 cannot tell)."""
    response = getattr(err, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return _status(err) == 404 and code != "NoSuchBucket"


def _stored(path: str, size: int, updated: Any, etag: str) -> StoredFile:
    return StoredFile(path, size, updated.timestamp(), f"{size}:e{unquoted(etag)}")


def _ranges_through(through: Any) -> RangedRead:
    @STORE.reads
    def read(path: str, start: int, stop: int) -> bytes:
        if stop <= start:
            return b""
        bucket, key = split(path)
        try:
            answer = through.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{stop - 1}")
        except Exception as err:
            if _missing(err):
                raise FileNotFoundError(f"{path}: no such object") from err
            if _status(err) == 416:  # a range that starts past the end
                return b""
            raise
        return bytes(answer["Body"].read())

    return read


def sdk_ranges(connections: int) -> RangedRead:
    """Ranged reads through boto3 (benchmarks/remote_read.py's comparison with obstore)."""
    return _ranges_through(client(connections))


@STORE.translating("write", "close", "__exit__", path_of=lambda upload, args: upload.path)
class _S3Upload(PartedUpload):
    """One PutObject, or a multipart upload committed by CompleteMultipartUpload (aborted on an error)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._bucket, self._key = split(path)
        self._upload_id: str | None = None
        self._etags: list[str] = []

    def _send_part(self, number: int, data: bytes) -> None:
        if self._upload_id is None:
            self._upload_id = client().create_multipart_upload(Bucket=self._bucket, Key=self._key)["UploadId"]
        answer = client().upload_part(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
                                      PartNumber=number + 1, Body=data)
        self._etags.append(answer["ETag"])

    def _put_whole(self, data: bytes) -> None:
        client().put_object(Bucket=self._bucket, Key=self._key, Body=data)

    def _commit(self, parts: int) -> None:
        client().complete_multipart_upload(
            Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
            MultipartUpload={"Parts": [{"ETag": etag, "PartNumber": i + 1} for i, etag in enumerate(self._etags)]})

    def _abort(self) -> None:
        client().abort_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id)


@STORE.translating()
class S3Backend(StorageBackend):
    """Amazon S3 and S3-compatible stores through boto3 (one client per process and pool size)."""

    fetched_in_ranges = True

    def _head(self, path: str) -> dict[str, Any] | None:
        bucket, key = split(path)
        try:
            return dict(client().head_object(Bucket=bucket, Key=key))
        except Exception as err:
            if _missing(err):
                return None
            raise

    def exists(self, path: str) -> bool:
        return self._head(path) is not None

    def open_read(self, path: str) -> BinaryIO:
        found = self._head(path)
        if found is None:
            raise FileNotFoundError(f"{path}: no such object")
        read = _ranges_through(client())
        return ranged_stream(lambda start, stop: read(path, start, stop), int(found["ContentLength"]))

    def read_bytes(self, path: str) -> bytes:
        return self._get(path)[0]

    def _get(self, path: str) -> tuple[bytes, str]:
        bucket, key = split(path)
        try:
            answer = client().get_object(Bucket=bucket, Key=key)
        except Exception as err:
            if _missing(err):
                raise FileNotFoundError(f"{path}: no such object") from err
            raise
        return bytes(answer["Body"].read()), str(answer["ETag"])

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        return _ranges_through(client())(path, start, stop)

    def ranged_reader(self, connections: int, *, deadlines: StoreDeadlines | None = None) -> RangedView:
        return obstore_reads.s3_ranges(client(connections, deadlines), connections, deadlines or current_deadlines())

    def open_write(self, path: str) -> BinaryIO:
        return _S3Upload(path)  # type: ignore[return-value]  # a BufferedIOBase

    def write_new(self, path: str, data: bytes) -> None:
        bucket, key = split(path)
        client().put_object(Bucket=bucket, Key=key, Body=data)

    def _matching(self, pattern: str) -> list[StoredFile]:
        regex = glob_regex(pattern)
        bucket, prefix = split(literal_prefix(pattern))
        found = []
        for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for entry in page.get("Contents", []):
                path = f"s3://{bucket}/{entry['Key']}"
                if regex.fullmatch(path):
                    found.append(_stored(path, int(entry["Size"]), entry["LastModified"], entry["ETag"]))
        return sorted(found, key=lambda stored: stored.path)

    def list_files(self, pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
        return [(found.path, found.size_bytes) for found in self._matching(pattern)]

    def list_details(self, pattern: str, *, include_broken: bool = False) -> list[StoredFile]:
        return self._matching(pattern)

    def stat(self, path: str) -> StoredFile | None:
        found = self._head(path)
        if found is None:
            return None
        return _stored(path, int(found["ContentLength"]), found["LastModified"], found["ETag"])

    def delete(self, path: str) -> None:
        bucket, key = split(path)
        client().delete_object(Bucket=bucket, Key=key)  # a missing key: 204 as well

    def delete_tree(self, directory: str) -> None:
        bucket, _ = split(directory)
        keys = [split(path)[1] for path, _ in self.list_files(directory + "/**")]
        for start in range(0, len(keys), DELETE_BATCH):
            answer = client().delete_objects(Bucket=bucket, Delete={
                "Objects": [{"Key": key} for key in keys[start:start + DELETE_BATCH]], "Quiet": True})
            if answer.get("Errors"):
                raise OSError(f"{directory}: could not delete {answer['Errors'][:3]}")

    def rename(self, source: str, destination: str) -> bool:
        self.copy(source, destination)  # replaces the destination in one step
        self.delete(source)
        return True

    def copy(self, source: str, destination: str) -> None:
        source_bucket, source_key = split(source)
        bucket, key = split(destination)
        # Managed copy: one CopyObject on the store's side, multipart UploadPartCopy above 5 GB.
        client().copy({"Bucket": source_bucket, "Key": source_key}, bucket, key)

    def create_if_absent(self, path: str, data: bytes) -> bool:
        """PutObject with ``If-None-Match: *``. A 412 is followed by a read: exactly ``data`` there is this
        call's own first try (retried by botocore after its answer was lost)."""
        bucket, key = split(path)
        for _ in range(_CONFLICT_RETRIES):
            try:
                client().put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
                return True
            except Exception as err:
                if _status(err) == 409:  # ConditionalRequestConflict: S3 asks for a retry
                    continue
                if _status(err) != 412:
                    raise
                found = self.read_versioned(path)
                return found is not None and found.data == data
        raise OSError(f"{path}: {_CONFLICT_RETRIES} conditional creates in a row met a concurrent write (409)")

    def read_versioned(self, path: str) -> VersionedBytes | None:
        try:
            data, etag = self._get(path)
        except FileNotFoundError:
            return None
        return VersionedBytes(data, etag)

    def delete_if_unchanged(self, path: str, read: VersionedBytes) -> None:
        """DeleteObject with ``If-Match: <ETag read>``: replaced (412) or gone (404) is left alone."""
        bucket, key = split(path)
        try:
            client().delete_object(Bucket=bucket, Key=key, IfMatch=str(read.version))
        except Exception as err:
            if _status(err) not in (404, 412):
                raise

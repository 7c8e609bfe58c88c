"""Azure Blob Storage (``az://``, ``abfs://``, Beam's ``azfs://``): the ``AzureBlobBackend`` (the ``[azure]`` extra).

Configured by ``AZURE_STORAGE_CONNECTION_STRING``, or an account and a key or SAS token (see ``service``).
Conditional writes: ``If-None-Match: *`` and ``If-Match: <ETag>``. Content tokens are ``"<size>:e<ETag>"``.
See docs/operations.md#storage.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import threading
import time
from typing import Any, BinaryIO

from beam_tfrecord.storage import obstore_reads
from beam_tfrecord.storage.backend import RangedRead, RangedView, StorageBackend, StoredFile, VersionedBytes
from beam_tfrecord.storage.deadlines import StoreDeadlines, current_deadlines
from beam_tfrecord.storage.object_io import PartedUpload, ranged_stream, unquoted
from beam_tfrecord.storage.paths import glob_regex, literal_prefix
from beam_tfrecord.storage.store_errors import Diagnosis, Failure, Store, connection_detail, first_line

_VARIABLES = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT",
              "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN")
# az://container/name; abfs[s]://container/name or abfs[s]://container@account.dfs.core.windows.net/name (fsspec);
# azfs://account/container/name (Apache Beam).
_ABFS_HOST = re.compile(r"(?P<container>[^@/]+)@(?P<account>[^./]+)\.[^/]*")
_COPY_POLL_SECONDS = 0.2
# azure-storage-blob's default retry, given explicitly: 15 + 3**n seconds before retry n, +-3 s of jitter; as many
# retries (3 at most, its default) as fit in ``StoreDeadlines.retry_seconds``.
RETRY_MOST = 3
RETRY_INITIAL_BACKOFF_SECONDS = 15
RETRY_INCREMENT_BASE = 3
RETRY_JITTER_SECONDS = 3
_CLIENTS: dict[tuple[object, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class BlobPath:
    """A parsed Azure path: ``root`` (everything up to the blob name) + ``name`` is the path."""

    root: str
    account: str | None
    container: str
    name: str


def split(path: str) -> BlobPath:
    kind, _, rest = path.partition("://")
    kind = kind.lower()
    account = None
    if kind == "azfs":
        account, _, rest = rest.partition("/")
    head, _, name = rest.partition("/")
    container = head
    host = _ABFS_HOST.fullmatch(head) if kind.startswith("abfs") else None
    if host is not None:
        container, account = host.group("container"), host.group("account")
    if not container:
        raise ValueError(f"{path!r} names no container; expected az://CONTAINER/BLOB")
    return BlobPath(path[:len(path) - len(name)], account, container, name)


def service(account: str | None, connections: int = 10, deadlines: StoreDeadlines | None = None) -> Any:
    """This process's ``BlobServiceClient`` keeping ``connections`` connections open, its requests within
    ``deadlines`` (default: the process's, ``deadlines.current_deadlines``).

    ``AZURE_STORAGE_CONNECTION_STRING`` when set; else the account (from the path, or
    ``AZURE_STORAGE_ACCOUNT_NAME``/``AZURE_STORAGE_ACCOUNT``) with ``AZURE_STORAGE_ACCOUNT_KEY``/``AZURE_STORAGE_KEY``,
    or ``AZURE_STORAGE_SAS_TOKEN``, or azure-identity's ``DefaultAzureCredential`` when none is set.
    """
    settings = tuple(os.environ.get(name) for name in _VARIABLES)
    limits = deadlines or current_deadlines()
    key = (os.getpid(), connections, account, limits, RETRY_INITIAL_BACKOFF_SECONDS, RETRY_INCREMENT_BASE,
           RETRY_JITTER_SECONDS, *settings)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = _make_service(account, connections, limits)
        return _CLIENTS[key]


def retries_within(seconds: float) -> int:
    """How many retries' back-offs (15 + 3**n s each) fit in ``seconds``: 0 to ``RETRY_MOST``."""
    waited = 0
    for count in range(1, RETRY_MOST + 1):
        waited += RETRY_INITIAL_BACKOFF_SECONDS + RETRY_INCREMENT_BASE ** count
        if waited > seconds:
            return count - 1
    return RETRY_MOST


class _NoAccount(ValueError):
    """No Azure account is configured (a ``StoreAccessError`` once typed)."""


def _make_service(account: str | None, connections: int, deadlines: StoreDeadlines) -> Any:
    import requests.adapters
    from azure.core.pipeline.transport import RequestsTransport
    from azure.storage.blob import BlobServiceClient, ExponentialRetry  # imported on first Azure use ([azure])

    session = requests.Session()
    for prefix in ("http://", "https://"):
        session.mount(prefix, requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=connections))
    transport = RequestsTransport(session=session, session_owner=False, connection_timeout=deadlines.connect_seconds,
                                  read_timeout=deadlines.request_seconds)
    retries = ExponentialRetry(initial_backoff=RETRY_INITIAL_BACKOFF_SECONDS, increment_base=RETRY_INCREMENT_BASE,
                               random_jitter_range=RETRY_JITTER_SECONDS,
                               retry_total=retries_within(deadlines.retry_seconds))
    env = os.environ.get
    connection_string = env("AZURE_STORAGE_CONNECTION_STRING")
    if connection_string:
        return BlobServiceClient.from_connection_string(connection_string, transport=transport, retry_policy=retries)
    account = account or env("AZURE_STORAGE_ACCOUNT_NAME") or env("AZURE_STORAGE_ACCOUNT")
    if not account:
        raise _NoAccount("Azure paths need AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_NAME (or an "
                         "account in the path: abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/..., azfs://ACCOUNT/...)")
    credential: Any = env("AZURE_STORAGE_ACCOUNT_KEY") or env("AZURE_STORAGE_KEY") or env("AZURE_STORAGE_SAS_TOKEN")
    if not credential:
        from azure.identity import DefaultAzureCredential  # azure-identity: managed identities, az login...

        credential = DefaultAzureCredential()
    return BlobServiceClient(f"https://{account}.blob.core.windows.net", credential=credential, transport=transport,
                             retry_policy=retries)


def _blob(path: str, connections: int = 10) -> Any:
    where = split(path)
    return service(where.account, connections).get_blob_client(where.container, where.name)


def _status(err: BaseException) -> int | None:
    return getattr(err, "status_code", None)


def _missing(err: BaseException) -> bool:
    """A 404 for the blob, not for its container (``ContainerNotFound``: typed by ``STORE``)."""
    return _status(err) == 404 and getattr(err, "error_code", None) != "ContainerNotFound"


def _diagnose(err: BaseException, path: str) -> Diagnosis | None:
    """azure-core's and azure-storage-blob's errors (obstore's for the readers) as a ``Failure``."""
    from azure.core import exceptions

    if isinstance(err, _NoAccount):
        return Diagnosis(Failure.ACCESS, "no account or connection string found")
    if isinstance(err, exceptions.ClientAuthenticationError):  # a rejected key, or no identity found
        return Diagnosis(Failure.ACCESS, first_line(err))
    if isinstance(err, exceptions.ServiceResponseError):
        timed_out = isinstance(err, exceptions.ServiceResponseTimeoutError) or "timed out" in str(err)
        return Diagnosis(Failure.TIMED_OUT if timed_out else Failure.UNREACHABLE, connection_detail(err))
    if isinstance(err, exceptions.ServiceRequestError):
        return Diagnosis(Failure.UNREACHABLE, connection_detail(err))
    if isinstance(err, exceptions.HttpResponseError):
        if getattr(err, "error_code", None) == "ContainerNotFound":
            return Diagnosis(Failure.BUCKET_MISSING, "ContainerNotFound")
        if _status(err) == 403:
            return Diagnosis(Failure.ACCESS, first_line(err))
        if _status(err) in (429, 503):
            return Diagnosis(Failure.THROTTLED, first_line(err))
        return None
    return obstore_reads.diagnose(err)


def _endpoint() -> str:
    blob_endpoint = re.search(r"BlobEndpoint=([^;]+)", os.environ.get("AZURE_STORAGE_CONNECTION_STRING", ""))
    if blob_endpoint:
        return f"{blob_endpoint.group(1)}, from AZURE_STORAGE_CONNECTION_STRING"
    account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT") or "ACCOUNT"
    return f"https://{account}.blob.core.windows.net"


STORE = Store(name="azure", bucket_kind="container", endpoint=_endpoint,
              bucket_of=lambda path: split(path).container, diagnose=_diagnose,
              credentials="AZURE_STORAGE_CONNECTION_STRING, or an account (AZURE_STORAGE_ACCOUNT_NAME or "
                          "AZURE_STORAGE_ACCOUNT, or in the path) with AZURE_STORAGE_ACCOUNT_KEY/AZURE_STORAGE_KEY or "
                          "AZURE_STORAGE_SAS_TOKEN, else azure-identity's DefaultAzureCredential (managed identity, "
                          "az login)")


def _stored(path: str, properties: Any) -> StoredFile:
    size = int(properties.size)
    return StoredFile(path, size, properties.last_modified.timestamp(), f"{size}:e{unquoted(properties.etag)}")


def sdk_ranges(connections: int) -> RangedRead:
    """Ranged reads through azure-storage-blob (without obstore or a shared key; and the benchmark's comparison)."""

    @STORE.reads
    def read(path: str, start: int, stop: int) -> bytes:
        if stop <= start:
            return b""
        try:
            return bytes(_blob(path, connections).download_blob(offset=start, length=stop - start,
                                                                max_concurrency=1).readall())
        except Exception as err:
            if _missing(err):
                raise FileNotFoundError(f"{path}: no such blob") from err
            if _status(err) == 416:  # a range that starts past the end
                return b""
            raise

    return read


@STORE.translating("write", "close", "__exit__", path_of=lambda upload, args: upload.path)
class _BlockUpload(PartedUpload):
    """One Put Blob, or blocks staged and committed by Put Block List (uncommitted blocks are never visible)."""

    def _send_part(self, number: int, data: bytes) -> None:
        _blob(self.path).stage_block(_block_id(number), data)

    def _put_whole(self, data: bytes) -> None:
        _blob(self.path).upload_blob(data, overwrite=True)

    def _commit(self, parts: int) -> None:
        from azure.storage.blob import BlobBlock

        _blob(self.path).commit_block_list([BlobBlock(block_id=_block_id(i)) for i in range(parts)])

    def _abort(self) -> None:
        pass  # staged blocks are dropped by the service (after a week, or at the blob's next commit)


def _block_id(number: int) -> str:
    return base64.b64encode(f"part-{number:08d}".encode()).decode("ascii")  # every id of a blob: one length


@STORE.translating()
class AzureBlobBackend(StorageBackend):
    """Azure Blob Storage (and Azurite) through azure-storage-blob (one client per process, account and pool)."""

    fetched_in_ranges = True

    def exists(self, path: str) -> bool:
        return bool(_blob(path).exists())

    def open_read(self, path: str) -> BinaryIO:
        found = self.stat(path)
        if found is None:
            raise FileNotFoundError(f"{path}: no such blob")
        read = sdk_ranges(10)
        return ranged_stream(lambda start, stop: read(path, start, stop), found.size_bytes)

    def read_bytes(self, path: str) -> bytes:
        found = self.read_versioned(path)
        if found is None:
            raise FileNotFoundError(f"{path}: no such blob")
        return found.data

    def read_range(self, path: str, start: int, stop: int) -> bytes:
        return sdk_ranges(10)(path, start, stop)

    def ranged_reader(self, connections: int, *, deadlines: StoreDeadlines | None = None) -> RangedView:
        limits = deadlines or current_deadlines()

        def service_for(path: str) -> tuple[Any, str, str]:
            where = split(path)
            return service(where.account, connections, limits), where.container, where.name

        return obstore_reads.azure_ranges(service_for, connections, fallback=sdk_ranges(connections), deadlines=limits)

    def open_write(self, path: str) -> BinaryIO:
        return _BlockUpload(path)  # type: ignore[return-value]  # a BufferedIOBase

    def write_new(self, path: str, data: bytes) -> None:
        _blob(path).upload_blob(data, overwrite=True)

    def _matching(self, pattern: str) -> list[StoredFile]:
        regex = glob_regex(pattern)
        where = split(literal_prefix(pattern))
        container = service(where.account).get_container_client(where.container)
        found = ((where.root + blob.name, blob)
                 for blob in container.list_blobs(name_starts_with=where.name or None))
        return sorted((_stored(path, blob) for path, blob in found if regex.fullmatch(path)),
                      key=lambda stored: stored.path)

    def list_files(self, pattern: str, *, include_broken: bool = False) -> list[tuple[str, int]]:
        return [(found.path, found.size_bytes) for found in self._matching(pattern)]

    def list_details(self, pattern: str, *, include_broken: bool = False) -> list[StoredFile]:
        return self._matching(pattern)

    def stat(self, path: str) -> StoredFile | None:
        try:
            return _stored(path, _blob(path).get_blob_properties())
        except Exception as err:
            if _missing(err):
                return None
            raise

    def delete(self, path: str) -> None:
        try:
            _blob(path).delete_blob()
        except Exception as err:
            if _status(err) != 404:  # already gone is the state asked for
                raise

    def rename(self, source: str, destination: str) -> bool:
        self.copy(source, destination)  # replaces the destination in one step
        self.delete(source)
        return True

    def copy(self, source: str, destination: str) -> None:
        """Copy Blob on the service's side (same account: synchronous in practice; polled while pending)."""
        target = _blob(destination)
        copy = target.start_copy_from_url(_blob(source).url)
        while copy.get("copy_status") == "pending":
            time.sleep(_COPY_POLL_SECONDS)
            copy = {"copy_status": target.get_blob_properties().copy.status}
        if copy.get("copy_status") not in ("success", None):
            raise OSError(f"copy of {source} to {destination} ended {copy.get('copy_status')}")

    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Put Blob with ``If-None-Match: *``. Refused (409/412) is followed by a read: exactly ``data`` there
        is this call's own first try (retried by the SDK after its answer was lost)."""
        try:
            _blob(path).upload_blob(data, overwrite=False)
        except Exception as err:
            if _status(err) not in (409, 412):
                raise
            found = self.read_versioned(path)
            return found is not None and found.data == data
        return True

    def read_versioned(self, path: str) -> VersionedBytes | None:
        try:
            download = _blob(path).download_blob(max_concurrency=1)
            return VersionedBytes(bytes(download.readall()), str(download.properties.etag))
        except Exception as err:
            if _missing(err):
                return None
            raise

    def delete_if_unchanged(self, path: str, read: VersionedBytes) -> None:
        """Delete Blob with ``If-Match: <ETag read>``: replaced (412) or gone (404) is left alone."""
        from azure.core import MatchConditions

        try:
            _blob(path).delete_blob(etag=str(read.version), match_condition=MatchConditions.IfNotModified)
        except Exception as err:
            if _status(err) not in (404, 412):
                raise

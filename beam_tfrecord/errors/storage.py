"""Errors of an object store that failed a request: no such bucket, unreachable, no answer in time, access
refused, throttled. Raised by the storage backends only (``beam_tfrecord.storage.store_errors``), chained from
the SDK's error; each names the store, the bucket and the object or prefix. See docs/operations.md#storage.
"""

from __future__ import annotations

from beam_tfrecord.errors.base import BeamTFRecordError


class StoreError(BeamTFRecordError, OSError):
    """An object store (s3://, gs://, Azure) failed a request in a way retrying now would not fix.

    Attributes:
        store: the store's scheme as the user wrote it (``s3``, ``gs``, ``az``).
        bucket: the bucket (Azure: the container).
        path: the object or prefix the request was about.
    """

    def __init__(self, message: str, *, store: str, bucket: str, path: str) -> None:
        self.store = store
        self.bucket = bucket
        self.path = path
        super().__init__(message)


class BucketNotFoundError(StoreError):
    """The bucket (Azure: the container) does not exist at the endpoint in use.

    Not a ``FileNotFoundError``: the readers and the lease take that as "no such file here" and go on,
    where a missing bucket must stop the job.
    """

    def __init__(self, *, store: str, bucket: str, path: str, kind: str, endpoint: str) -> None:
        super().__init__(f"{store} {kind} {bucket!r} does not exist (at {path!r}); create it, or check the "
                         f"endpoint ({endpoint})", store=store, bucket=bucket, path=path)


class StoreUnreachableError(StoreError, ConnectionError):
    """No connection to the store's endpoint could be made, after the retries (nothing listens there, a
    wrong host, a network down).

    Attributes:
        seconds: how long the retries took.
    """

    def __init__(self, *, store: str, bucket: str, path: str, endpoint: str, seconds: float, reason: str) -> None:
        self.seconds = seconds
        super().__init__(f"{store} store cannot be reached at {endpoint} ({path!r}; {reason}; gave up after "
                         f"{seconds:.1f} s of retries); check the endpoint and the network",
                         store=store, bucket=bucket, path=path)


class StoreTimeoutError(StoreError, TimeoutError):
    """The store took a connection but did not answer a request within its time limit, after the retries
    (``storage.StoreDeadlines``: ``RemoteReads(deadlines=...)``, or the variables the CLI reads).

    Attributes:
        seconds: how long the call waited, retries included.
    """

    def __init__(self, *, store: str, bucket: str, path: str, endpoint: str, seconds: float, waited_for: str,
                 settings: str) -> None:
        self.seconds = seconds
        super().__init__(f"{store} store at {endpoint} did not answer in time: {waited_for} of {path!r} "
                         f"(gave up after {seconds:.1f} s of retries); a slow or overloaded store, or a proxy "
                         f"that holds requests: the limits are {settings}", store=store, bucket=bucket, path=path)


class StoreAccessError(StoreError, PermissionError):
    """The store refused the request: no credentials were found, or they were rejected, or they do not
    give access to this bucket.

    Attributes:
        reason: what the store said (credentials missing, rejected, access denied).
    """

    def __init__(self, *, store: str, bucket: str, path: str, reason: str, credentials: str) -> None:
        self.reason = reason
        super().__init__(f"{store} store refused access to {path!r}: {reason}; credentials are read from "
                         f"{credentials}", store=store, bucket=bucket, path=path)


class StoreThrottledError(StoreError):
    """The store kept asking to slow down (HTTP 429 or 503 SlowDown) past the retries.

    Attributes:
        seconds: how long the retries took.
    """

    def __init__(self, *, store: str, bucket: str, path: str, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"{store} store throttled the requests for {path!r} past the retries ({seconds:.1f} s); "
                         "run fewer workers or connections at once (RemoteReads(connections=...), "
                         "--direct_num_workers), or ask for a higher request rate", store=store, bucket=bucket,
                         path=path)


class StoreDeadlinesError(BeamTFRecordError, ValueError):
    """A store time limit (``StoreDeadlines``, or the variable that sets it) is not a positive number of seconds."""

"""``StoreDeadlines``: how long one request to an object store may wait, and how long its retries may go on.

Invariant: every client of every store (boto3, google-cloud-storage, azure-storage-blob, obstore) is made with
the deadlines in force, and cached under them, so no request waits without a limit. The process's come from the
``BEAM_TFRECORD_STORE_*_SECONDS`` variables (read when a client is made); a reader's own (``RemoteReads(deadlines=)``)
are in force while it opens its dataset and for its ranged reads. See docs/operations.md#storage.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
from collections.abc import Iterator

from beam_tfrecord.errors import StoreDeadlinesError

CONNECT_VARIABLE = "BEAM_TFRECORD_STORE_CONNECT_SECONDS"
REQUEST_VARIABLE = "BEAM_TFRECORD_STORE_REQUEST_SECONDS"
RETRY_VARIABLE = "BEAM_TFRECORD_STORE_RETRY_SECONDS"


@dataclasses.dataclass(frozen=True)
class StoreDeadlines:
    """Time limits of the requests to an object store; past them a request is retried as the store's SDK
    retries it, and once the retries are spent the call fails with a typed error (``StoreTimeoutError``,
    ``StoreUnreachableError``).

    Attributes:
        connect_seconds: the most a connection may take to open (a TLS handshake to a real bucket takes
            well under a second).
        request_seconds: the most one request may wait for the store's answer (boto3, the Azure SDK and
            google-cloud-storage: between two reads of the answer; obstore: the whole request, so a ranged
            read of 8 MiB must arrive within it: over 0.3 MB/s by default).
        retry_seconds: retries after a failure to connect or to answer stop once this long has passed since
            the call's first try (boto3: the attempts that start by then, 3 at most; Azure: the retries
            whose back-offs of 15 s and more fit in it, maybe none).
    """

    connect_seconds: float = 10.0
    request_seconds: float = 30.0
    retry_seconds: float = 30.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value <= 0:
                raise StoreDeadlinesError(f"StoreDeadlines.{field.name} must be a positive number of seconds, "
                                          f"got {value!r}")

    def describe(self) -> str:
        """The limits and where to set them, for an error's message."""
        return (f"{self.connect_seconds:g} s to connect and {self.request_seconds:g} s to answer, retried for "
                f"{self.retry_seconds:g} s (RemoteReads(deadlines=StoreDeadlines(...)) in Python, or "
                f"{CONNECT_VARIABLE}, {REQUEST_VARIABLE}, {RETRY_VARIABLE})")


def _seconds(variable: str, default: float) -> float:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise StoreDeadlinesError(f"{variable}={text!r}: expected a positive number of seconds") from None


_IN_FORCE: contextvars.ContextVar[StoreDeadlines | None] = contextvars.ContextVar("store_deadlines", default=None)


@contextlib.contextmanager
def deadlines_in_force(deadlines: StoreDeadlines | None) -> Iterator[None]:
    """Within the block, this thread's requests to a store are made with ``deadlines`` (None: the process's):
    a reader's own (``RemoteReads.deadlines``) while it opens its dataset."""
    token = _IN_FORCE.set(deadlines)
    try:
        yield
    finally:
        _IN_FORCE.reset(token)


def current_deadlines() -> StoreDeadlines:
    """The deadlines in force (``deadlines_in_force``), else the process's: the defaults, or what the
    ``BEAM_TFRECORD_STORE_*_SECONDS`` variables set."""
    in_force = _IN_FORCE.get()
    if in_force is not None:
        return in_force
    default = StoreDeadlines()
    return StoreDeadlines(connect_seconds=_seconds(CONNECT_VARIABLE, default.connect_seconds),
                          request_seconds=_seconds(REQUEST_VARIABLE, default.request_seconds),
                          retry_seconds=_seconds(RETRY_VARIABLE, default.retry_seconds))

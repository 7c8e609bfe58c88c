"""One seam per object store that turns its SDK's failures into the typed ``StoreError`` family.

Each backend module describes its store once (a ``Store``: its name, where its endpoint and credentials come
from, and ``diagnose``, which reads an SDK error as a ``Failure``) and decorates its classes with
``Store.translating``: every call then raises a typed error, chained from the SDK's (``raise ... from err``),
naming the store, the bucket and the object or prefix. Errors it does not recognise pass unchanged.
See docs/operations.md#storage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from beam_tfrecord.errors import (
    BeamTFRecordError,
    BucketNotFoundError,
    StoreAccessError,
    StoreError,
    StoreThrottledError,
    StoreTimeoutError,
    StoreUnreachableError,
)
from beam_tfrecord.storage.deadlines import StoreDeadlines, current_deadlines

T = TypeVar("T")

# A backend's methods whose first argument is the path they touch (``backend.StorageBackend``).
PATH_METHODS = ("exists", "open_read", "read_bytes", "read_bytes_or_none", "read_range", "open_write", "write_new",
                "list_files", "list_details", "stat", "delete", "delete_tree", "rename", "copy", "create_if_absent",
                "read_versioned", "delete_if_unchanged")
# What a call that timed out was waiting for, in a message (the method's name otherwise).
_WAITED_FOR = {"exists": "a metadata request", "stat": "a metadata request", "read_range": "a ranged read",
               "ranged_reader": "a ranged read", "list_files": "a listing", "list_details": "a listing",
               "read_bytes": "a read", "read_bytes_or_none": "a read", "read_versioned": "a read",
               "read": "a read", "readinto": "a read", "write": "an upload", "close": "an upload",
               "create_if_absent": "a conditional write", "write_new": "an upload"}


class Failure(enum.Enum):
    """What went wrong, as a store's ``diagnose`` reads its SDK's error."""

    BUCKET_MISSING = "bucket missing"
    UNREACHABLE = "unreachable"
    TIMED_OUT = "timed out"
    ACCESS = "access refused"
    THROTTLED = "throttled"


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """A ``Failure`` and, for the message, what the SDK said in a few words (``connection refused``)."""

    failure: Failure
    detail: str


@dataclasses.dataclass(frozen=True)
class Store:
    """One object store as its errors name it.

    Attributes:
        name: its name in messages (``s3``, ``gs``, ``azure``).
        bucket_kind: ``bucket``, or Azure's ``container``.
        credentials: where its credentials are read from (variables, files), as docs/operations.md#storage says.
        endpoint: the endpoint in use and the variable that set it (read when an error is raised).
        bucket_of: the bucket of a path of this store.
        diagnose: an SDK error of this store read as a ``Diagnosis`` (``path``: what the call was about);
            None when it is none of the ``Failure``\\ s.
    """

    name: str
    bucket_kind: str
    credentials: str
    endpoint: Callable[[], str]
    bucket_of: Callable[[str], str]
    diagnose: Callable[[BaseException, str], Diagnosis | None]

    def bucket_not_found(self, path: str) -> BucketNotFoundError:
        """The error for ``path``'s bucket (container) not being there."""
        return BucketNotFoundError(store=self.name, bucket=self.bucket_of(path), path=path, kind=self.bucket_kind,
                                   endpoint=self.endpoint())

    def typed(self, err: BaseException, path: str, *, seconds: float, doing: str,
              deadlines: StoreDeadlines | None = None) -> StoreError | None:
        """The typed error ``err`` is, or None when it is none this store recognises."""
        found = self.diagnose(err, path)
        if found is None:
            return None
        bucket = self.bucket_of(path)
        where = {"store": self.name, "bucket": bucket, "path": path}
        if found.failure is Failure.BUCKET_MISSING:
            return self.bucket_not_found(path)
        if found.failure is Failure.UNREACHABLE:
            return StoreUnreachableError(**where, endpoint=self.endpoint(), seconds=seconds, reason=found.detail)
        if found.failure is Failure.TIMED_OUT:
            return StoreTimeoutError(**where, endpoint=self.endpoint(), seconds=seconds,
                                     waited_for=_WAITED_FOR.get(doing, doing.replace("_", " ")),
                                     settings=(deadlines or current_deadlines()).describe())
        if found.failure is Failure.ACCESS:
            return StoreAccessError(**where, reason=found.detail, credentials=self.credentials)
        return StoreThrottledError(**where, seconds=seconds)

    @contextlib.contextmanager
    def translated(self, path: str, *, doing: str, deadlines: StoreDeadlines | None = None) -> Iterator[None]:
        """Runs the block; an SDK error it raises that this store recognises becomes its typed error."""
        started = time.monotonic()
        try:
            yield
        except BeamTFRecordError:
            raise  # already typed (a call within a call)
        except Exception as err:
            typed = self.typed(err, path, seconds=time.monotonic() - started, doing=doing, deadlines=deadlines)
            if typed is None:
                raise
            raise typed from err

    def reads(self, read: Callable[[str, int, int], T], *,
              deadlines: StoreDeadlines | None = None) -> Callable[[str, int, int], T]:
        """``read`` (a ``RangedRead``), its errors typed."""

        @functools.wraps(read)
        def typed_read(path: str, start: int, stop: int) -> T:
            with self.translated(path, doing="read_range", deadlines=deadlines):
                return read(path, start, stop)

        return typed_read

    def translating(self, *names: str, path_of: Callable[[Any, tuple[Any, ...]], str] | None = None,
                    ) -> Callable[[type[T]], type[T]]:
        """A class decorator: the methods ``names`` (default: ``PATH_METHODS`` and ``ranged_reader``, whose
        reader it wraps) raise typed errors. ``path_of(instance, args)`` is the path a call is about
        (default: its first argument)."""

        def decorate(cls: type[T]) -> type[T]:
            for name in names or (*PATH_METHODS, "ranged_reader"):
                method = getattr(cls, name)
                setattr(cls, name, self._wrapped(method, name, path_of))
            return cls

        return decorate

    def _wrapped(self, method: Callable[..., Any], name: str,
                 path_of: Callable[[Any, tuple[Any, ...]], str] | None) -> Callable[..., Any]:
        if name == "ranged_reader":
            @functools.wraps(method)
            def typed_reader(instance: Any, *args: Any, **kwargs: Any) -> Any:
                return self.reads(method(instance, *args, **kwargs), deadlines=kwargs.get("deadlines"))

            return typed_reader

        @functools.wraps(method)
        def typed_call(instance: Any, *args: Any, **kwargs: Any) -> Any:
            path = path_of(instance, args) if path_of is not None else str(args[0])
            with self.translated(path, doing=name):
                return method(instance, *args, **kwargs)

        return typed_call


def first_line(err: BaseException, limit: int = 160) -> str:
    """The first line of an SDK error's text, shortened: the detail a message quotes."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


_CONNECTION_FAILURES = (("refused", "connection refused"), ("Name or service not known", "host name not found"),
                        ("nodename nor servname", "host name not found"), ("getaddrinfo", "host name not found"),
                        ("timed out", "no connection within the time limit"),
                        ("Connection reset", "connection reset"))


def connection_detail(err: BaseException) -> str:
    """Why a connection failed, in a few words (an SDK's text nests the socket's error in its own)."""
    text = str(err)
    for marker, words in _CONNECTION_FAILURES:
        if marker.lower() in text.lower():
            return words
    return first_line(err)

"""What the readers' ``gs://`` fetching is told and counts: ``RemoteReads`` (the options), the shards to fetch.

The fetching itself is ``shard_fetch``; these values are what the readers' arguments become
(``cache_dir=``, ``cache_limit=``, ``remote_reads=``), checked when a read is set up.
"""

from __future__ import annotations

import collections
import dataclasses
import threading

from beam_tfrecord import storage
from beam_tfrecord.core.units import MiB
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.remote_reads.cache import CacheKey
from beam_tfrecord.storage.deadlines import StoreDeadlines


@dataclasses.dataclass(frozen=True)
class RemoteReads:
    """How the readers read ``gs://`` shards (local paths are read as before, whatever these say).

    Attributes:
        connections: ranges read at once (threads, each with its own connection), per reading process.
        range_bytes: bytes per ranged read.
        bytes_in_flight: the most bytes requested or fetched but not yet read, per reading process
            (at least ``range_bytes``).
        cache_dir: keep each shard read to its end in this local directory, and read it from there
            next time (shared safely by the processes of one machine); None: no cache.
        cache_limit: the most bytes the cache keeps (least recently used shards are removed);
            None: no limit. Needs ``cache_dir``.
        deadlines: how long each ranged read may wait for the store, and its retries, before the reader
            raises ``StoreTimeoutError`` (or ``StoreUnreachableError``); None: the process's
            (``StoreDeadlines()``, or the ``BEAM_TFRECORD_STORE_*_SECONDS`` variables).
    """

    connections: int = 16
    range_bytes: int = 8 * MiB
    bytes_in_flight: int = 256 * MiB
    cache_dir: str | None = None
    cache_limit: int | None = None
    deadlines: StoreDeadlines | None = None

    def __post_init__(self) -> None:
        for name in ("connections", "range_bytes", "bytes_in_flight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ReaderError(f"{name} must be a positive int, got {value!r}")
        if self.bytes_in_flight < self.range_bytes:
            raise ReaderError(f"bytes_in_flight ({self.bytes_in_flight}) must be at least range_bytes "
                              f"({self.range_bytes}): one range must fit")
        if self.cache_limit is not None:
            if isinstance(self.cache_limit, bool) or not isinstance(self.cache_limit, int) or self.cache_limit < 1:
                raise ReaderError(f"cache_limit must be a positive number of bytes, got {self.cache_limit!r}")
            if self.cache_dir is None:
                raise ReaderError(f"cache_limit={self.cache_limit} needs cache_dir: the directory to keep shards in")
        if self.cache_dir is not None and (not isinstance(self.cache_dir, str) or storage.is_remote(self.cache_dir)):
            raise ReaderError(f"cache_dir must be a local directory, got {self.cache_dir!r}")
        if self.deadlines is not None and not isinstance(self.deadlines, StoreDeadlines):
            raise ReaderError(f"deadlines must be a StoreDeadlines, got {self.deadlines!r}")


def reads_with_cache(remote: RemoteReads | None, *, cache_dir: str | None, cache_limit: int | None) -> RemoteReads:
    """A reader's ``remote_reads=`` with its ``cache_dir=`` and ``cache_limit=`` arguments put in."""
    if remote is not None and not isinstance(remote, RemoteReads):
        raise ReaderError(f"remote_reads must be a RemoteReads, got {remote!r}")
    base = remote or RemoteReads()
    if cache_dir is None and cache_limit is None:
        return base
    return dataclasses.replace(base, cache_dir=cache_dir if cache_dir is not None else base.cache_dir,
                               cache_limit=cache_limit if cache_limit is not None else base.cache_limit)


def fetched_remotely(path: str) -> bool:
    """Whether ``ShardFetcher`` reads this path (its store serves parallel ranged reads; others: ``storage``)."""
    return storage.backend_for(path).fetched_in_ranges


@dataclasses.dataclass(frozen=True)
class RemoteShard:
    """A shard to fetch, as the manifest lists it.

    Attributes:
        path: its ``gs://`` path.
        num_bytes: its size as stored.
        crc32c: its CRC32C as stored (8 hex digits).
    """

    path: str
    num_bytes: int
    crc32c: str

    @property
    def key(self) -> CacheKey:
        return CacheKey(self.path, self.crc32c, self.num_bytes)


class FetchCounters:
    """What this process's fetchers did (a snapshot with ``snapshot()``): for tests, benchmarks and logs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    def add(self, name: str, value: int = 1) -> None:
        with self._lock:
            self._counts[name] += value

    def snapshot(self) -> dict[str, int]:
        """``cache_hits``, ``cache_misses``, ``cached_shards``, ``evicted_shards``, ``fetched_bytes``, ``ranges``."""
        with self._lock:
            return dict(self._counts)


COUNTERS = FetchCounters()

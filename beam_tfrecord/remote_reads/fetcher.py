"""``ShardFetcher``: a reader's shards in ranges on parallel connections, read ahead in its order, bounded."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
from collections.abc import Sequence

from beam_tfrecord import storage
from beam_tfrecord.errors import CorruptShardError, MissingShardError, ReaderError
from beam_tfrecord.remote_reads.cache import ShardCache
from beam_tfrecord.remote_reads.fetched import FetchedShard, MemoryFiles
from beam_tfrecord.remote_reads.options import COUNTERS, RemoteReads, RemoteShard, fetched_remotely
from beam_tfrecord.storage.backend import RangedView, StorageBackend

# Whole shards copied ahead of a reader that takes them whole (ArrayRecord), on a thread of their own: one
# copying, one ready. Its thread then mostly waits (0.19-0.21 s of an epoch of 320 MB in 16 shards from gs://
# behind 40 ms, the first shard's wait included, against 0.29-0.31 s copying each shard itself).
COPIES_AHEAD = 2


class ShardFetcher:
    """Fetches the shards a reader will read, in its order, ahead of it (see the module docstring).

    Use as a context manager; ``open(number)`` gives shard ``number`` of ``shards``. Shards may be
    opened in any order and several at once; the read-ahead follows the order given.

    Args:
        shards: the shards, in the order the reader reads them (a shard may appear more than once).
        reads: connections, range size, bytes in flight and cache.
        side_by_side: groups of shards (numbers in ``shards``) the reader reads side by side: their
            ranges are read ahead in turn (the first range of each, then the second...).
        copies_ahead: shards copied whole ahead of a reader that takes them whole (``copy_ahead``).
    """

    def __init__(self, shards: Sequence[RemoteShard], reads: RemoteReads, *,
                 side_by_side: Sequence[Sequence[int]] = (), copies_ahead: int = COPIES_AHEAD) -> None:
        self._shards = list(shards)
        self._reads = reads
        self._copies_ahead = copies_ahead
        self._cache = ShardCache(reads.cache_dir, limit_bytes=reads.cache_limit) if reads.cache_dir else None
        # One ranged reader per store, made once: it keeps ``connections`` connections open per process.
        self._ranged: dict[StorageBackend, RangedView] = {}
        for backend in {storage.backend_for(shard.path) for shard in self._shards}:
            if backend.fetched_in_ranges:
                self._ranged[backend] = backend.ranged_reader(reads.connections, deadlines=reads.deadlines)
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], concurrent.futures.Future[bytes | memoryview]] = {}
        self._settled: set[tuple[int, int]] = set()  # ranges taken or given up: never requested again
        self._held_bytes = 0
        self._memory: MemoryFiles | None = None  # private copies held in memory (``private_memory``)
        self._memory_bytes = 0  # their bytes, given out and not released
        self._opened: set[int] = set()  # shards given to the reader or copied ahead for it
        self._ahead: dict[int, FetchedShard] = {}  # shards copied ahead (``copy_ahead``), not yet opened
        self._copier: concurrent.futures.ThreadPoolExecutor | None = None
        first = set(side_by_side[0]) if side_by_side else {0}
        self._starts = [range_starts(shard.num_bytes, reads.range_bytes, ramp=number in first,
                                     connections=reads.connections)
                        for number, shard in enumerate(self._shards)]
        self._ends = [dict(zip(starts, [*starts[1:], shard.num_bytes]))
                      for starts, shard in zip(self._starts, self._shards)]
        self._ranges = self._read_ahead_order(side_by_side)
        self._next = 0  # the first range of ``_ranges`` not yet considered for read-ahead
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=reads.connections,
                                                           thread_name_prefix="shard-fetch")
        self._closed = False
        self._read_ahead()

    def _read_ahead_order(self, side_by_side: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
        """(shard number, start) of every range to read ahead, in the reader's order; none of cached shards."""
        grouped = {number: group for group in side_by_side for number in group}
        out: list[tuple[int, int]] = []
        done: set[int] = set()
        for number in range(len(self._shards)):
            if number in done:
                continue
            group = grouped.get(number, (number,))
            done.update(group)
            per_shard = [[(n, start) for start in self._starts[n]] for n in group if self._to_fetch(self._shards[n])]
            out.extend(key for turn in itertools.zip_longest(*per_shard) for key in turn if key is not None)
        return out

    def _to_fetch(self, shard: RemoteShard) -> bool:
        return fetched_remotely(shard.path) and not (
            self._cache is not None and os.path.exists(self._cache.entry_path(shard.key)))

    def __enter__(self) -> ShardFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stops reading ahead; ranges already running finish on their own and are dropped."""
        with self._lock:
            self._closed = True
            for future in self._pending.values():
                future.cancel()
            self._pending.clear()
            self._held_bytes = 0
            memory, self._memory = self._memory, None
            ahead, self._ahead = list(self._ahead.values()), {}
        self._pool.shutdown(wait=False, cancel_futures=True)
        for fetched in ahead:  # their copies stop at the closed fetcher
            fetched.close()
        if self._copier is not None:
            self._copier.shutdown(wait=False, cancel_futures=True)
        if memory is not None:  # copies still open are closed when given back
            memory.close()

    def open(self, number: int) -> FetchedShard | None:
        """Shard ``number``: from the cache when it holds it, else its ranges as they arrive; None for a local path."""
        shard = self._shards[number]
        if not fetched_remotely(shard.path):
            return None
        with self._lock:
            self._opened.add(number)
            ahead = self._ahead.pop(number, None)
        if ahead is not None:
            return ahead
        if self._cache is not None:
            hit = self._cache.lookup(shard.key)
            if hit is not None:
                COUNTERS.add("cache_hits")
                return FetchedShard(self, number, shard, cached=hit)
            COUNTERS.add("cache_misses")
        return FetchedShard(self, number, shard, cached=None)

    @property
    def cache(self) -> ShardCache | None:
        return self._cache

    @property
    def range_bytes(self) -> int:
        return self._reads.range_bytes

    def private_memory(self, num_bytes: int) -> MemoryFiles | None:
        """In-memory files for a private copy of ``num_bytes`` while the copies given out fit in
        ``bytes_in_flight`` (counted until ``release_memory``); None: the copy goes on disk."""
        with self._lock:
            return self._reserve_memory(num_bytes)

    def _reserve_memory(self, num_bytes: int) -> MemoryFiles | None:
        if self._closed or self._memory_bytes + num_bytes > self._reads.bytes_in_flight:
            return None
        if self._memory is None:
            self._memory = MemoryFiles()
        self._memory_bytes += num_bytes
        return self._memory

    def copy_ahead(self, number: int) -> None:
        """The reader took shard ``number`` whole (``FetchedShard.memory_file``): the next ``copies_ahead`` shards
        of its order not in the cache are copied whole meanwhile, on a thread of their own: each in memory while
        the copies fit (``private_memory``), else on disk (or into the cache, when there is one)."""
        for later in range(number + 1, min(number + 1 + self._copies_ahead, len(self._shards))):
            shard = self._shards[later]
            if not self._to_fetch(shard):
                continue
            with self._lock:
                if self._closed or later in self._opened:
                    continue
                memory = self._reserve_memory(shard.num_bytes) if self._cache is None else None
                if self._copier is None:
                    self._copier = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shard-copy")
                self._opened.add(later)
                fetched = self._ahead[later] = FetchedShard(self, later, shard, cached=None)
                fetched.copy_on(self._copier, memory)
            if self._cache is not None:
                COUNTERS.add("cache_misses")

    def release_memory(self, num_bytes: int) -> None:
        with self._lock:
            self._memory_bytes -= num_bytes

    def _size(self, number: int, start: int) -> int:
        return self._ends[number][start] - start

    def _read_ahead(self) -> None:
        """Requests the next ranges in the reader's order while they fit in ``bytes_in_flight`` (takes the lock)."""
        with self._lock:
            while not self._closed and self._next < len(self._ranges):
                key = self._ranges[self._next]
                size = self._size(*key)
                if key not in self._settled and key not in self._pending:
                    if self._held_bytes and self._held_bytes + size > self._reads.bytes_in_flight:
                        return
                    self._submit(key, size)
                self._next += 1

    def _submit(self, key: tuple[int, int], size: int) -> concurrent.futures.Future[bytes | memoryview]:
        number, start = key
        future = self._pool.submit(self._download, self._shards[number], start, size)
        self._pending[key] = future
        self._held_bytes += size
        return future

    def _download(self, shard: RemoteShard, start: int, size: int) -> bytes | memoryview:
        try:
            data = self._ranged[storage.backend_for(shard.path)](shard.path, start, start + size)
        except FileNotFoundError as err:
            raise MissingShardError(shard.path) from err
        if len(data) != size:
            raise CorruptShardError(shard.path, f"bytes {start}..{start + size} of the {shard.num_bytes} the "
                                                f"manifest lists: got {len(data)} bytes", None)
        COUNTERS.add("ranges")
        COUNTERS.add("fetched_bytes", size)
        return data

    def take(self, number: int, start: int) -> bytes | memoryview:
        """The range of shard ``number`` at ``start`` (waiting for it; requested now if the read-ahead is behind):
        bytes or a read-only view (``RangedRead``)."""
        key = (number, start)
        with self._lock:
            if self._closed:
                raise ReaderError("the shard fetcher is closed")
            future = self._pending.get(key)
            if future is None:  # the reader is ahead of the read-ahead here: this range now, and what follows it
                future = self._submit(key, self._size(number, start))
                self._request_following(number, start)
        try:
            data = future.result()
        finally:
            with self._lock:
                if self._pending.pop(key, None) is not None:
                    self._held_bytes -= self._size(number, start)
                self._settled.add(key)
        self._read_ahead()
        return data

    def _request_following(self, number: int, start: int) -> None:
        """Requests the ranges after ``start`` of shard ``number`` that fit in ``bytes_in_flight`` (under the lock)."""
        for later in self._starts[number]:
            if later <= start:
                continue
            key = (number, later)
            if key in self._pending or key in self._settled:
                continue
            size = self._size(number, later)
            if self._held_bytes + size > self._reads.bytes_in_flight:
                return
            self._submit(key, size)

    def give_up(self, number: int, after: int) -> None:
        """The reader stopped reading shard ``number`` at byte ``after``: drop its later ranges."""
        with self._lock:
            for start in self._starts[number]:
                if start < after:
                    continue
                key = (number, start)
                future = self._pending.pop(key, None)
                if future is not None:
                    future.cancel()
                    self._held_bytes -= self._size(number, start)
                self._settled.add(key)
        self._read_ahead()


FIRST_RANGE_BYTES = 1 << 20  # the least range of a read's first shards: their first records after one small answer


def range_starts(num_bytes: int, range_bytes: int, *, ramp: bool, connections: int = 1) -> list[int]:
    """Where a shard's ranges start: equal ranges of at most ``range_bytes``. With ``ramp`` (the shards a read
    begins with): a shard that fits in one range per connection in as many equal ranges of at least
    ``FIRST_RANGE_BYTES`` as there are connections, all fetched at once; a larger one ``FIRST_RANGE_BYTES``
    first, doubled range after range up to ``range_bytes``.

    One rule for every reader, whether it takes a shard front to back (``FetchedShard.chunks``) or waits for
    it whole (``memory_file``, ``local_file``: ArrayRecord, tf.data's files): equal cuts against shrinking
    ones, 50 requests instead of 86 for 320 MB in 16 shards, as fast for as little CPU; the first shard on
    every connection, a reader waiting for it whole waited 0.10-0.18 s instead of 0.24-0.34 (gs, 40 ms).
    """
    if not ramp:
        return _equal_starts(num_bytes, -(-num_bytes // range_bytes))
    first = min(range_bytes, FIRST_RANGE_BYTES)
    if num_bytes <= connections * range_bytes:
        return _equal_starts(num_bytes, min(connections, max(1, num_bytes // first)))
    starts: list[int] = []
    start, size = 0, first
    while start < num_bytes:
        starts.append(start)
        start, size = start + size, min(2 * size, range_bytes)
    return starts


def _equal_starts(num_bytes: int, count: int) -> list[int]:
    """The starts of ``count`` equal ranges (the last may be shorter) over ``num_bytes``."""
    size = max(1, -(-num_bytes // max(1, count)))
    return list(range(0, num_bytes, size))


def shard_fetcher(shards: Sequence[RemoteShard], reads: RemoteReads, *, side_by_side: Sequence[Sequence[int]] = (),
                  copies_ahead: int = COPIES_AHEAD) -> ShardFetcher | None:
    """A fetcher of the shards when any is on a store read in ranges; None when all are local paths."""
    if not any(fetched_remotely(shard.path) for shard in shards):
        return None
    return ShardFetcher(shards, reads, side_by_side=side_by_side, copies_ahead=copies_ahead)

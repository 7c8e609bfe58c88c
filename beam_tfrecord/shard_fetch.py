"""Reading ``gs://`` shards fast: parallel ranged reads, read-ahead across shards, an optional local cache.

An object store answers each request after tens of milliseconds and gives one connection
~50-200 MB/s, but many connections in parallel. One sequential stream per shard (what
``storage.open_read`` gives) therefore starves a reader: measured behind 40 ms and 50 MB/s per
connection, the readers reached 0.07 (small records) and 0.14 (150 KB images) of what 16 parallel
range reads get. So a reader that knows the shards it will read, in order, hands them to a
``ShardFetcher``, which cuts them into ``range_bytes`` ranges (smaller in the first shards a read
needs: ``_range_starts``) and reads the ranges on ``connections``
threads (one kept-alive connection each), in the reader's order and across shard boundaries: while
one shard is parsed, the next ones arrive, which hides the latency of each request and of each
shard's first byte. With that, behind 40 ms and 50 MB/s per connection, ``read_numpy`` and
``TFRecordIterableDataset`` read at 0.81-0.94 of what 16 plain range reads get, ``read_dataset``
at 0.5-0.6 (``benchmarks/remote_read.py``; ``docs/performance.md``).

**Memory** is bounded by ``bytes_in_flight``: ranges requested or fetched but not yet taken by the
reader. A range the reader asks for before the read-ahead reached it is fetched at once, beyond the
bound (a windowed shuffle reads 16 shards side by side: up to 16 such ranges).

**Checks.** Every range must hold the bytes the manifest's size says; a shard read to its end is
checked against the manifest's CRC32C (a shard rewritten between two ranges cannot pass), and the
format's own checks (record CRCs, ArrayRecord chunk hashes, counts) run as before.

**Cache.** With ``cache_dir``, each shard read to its end is written to a ``shard_cache.ShardCache``
(checked, then renamed in; least recently used entries removed to stay within ``cache_limit``),
and a later read of it (the next epoch, another DataLoader worker or rank on the machine) maps the
local file instead of fetching it.

**Retries.** Each range is one ``download_as_bytes`` with ``gcs.retry_policy()`` (429, 5xx and dropped
connections are retried), so a flaky store gives the same bytes, only later.
"""

from __future__ import annotations

import concurrent.futures
import io
import itertools
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import google_crc32c

from beam_tfrecord import gcs
from beam_tfrecord.errors import CorruptShardError, MissingShardError, ReaderError
from beam_tfrecord.remote_reads import COUNTERS, RemoteReads, RemoteShard, fetched_remotely
from beam_tfrecord.shard_cache import ShardCache


class ShardFetcher:
    """Fetches the shards a reader will read, in its order, ahead of it (see the module docstring).

    Use as a context manager; ``open(number)`` gives shard ``number`` of ``shards``. Shards may be
    opened in any order and several at once; the read-ahead follows the order given.

    Args:
        shards: the shards, in the order the reader reads them (a shard may appear more than once).
        reads: connections, range size, bytes in flight and cache.
        side_by_side: groups of shards (numbers in ``shards``) the reader reads side by side: their
            ranges are read ahead in turn (the first range of each, then the second...).
    """

    def __init__(self, shards: Sequence[RemoteShard], reads: RemoteReads, *,
                 side_by_side: Sequence[Sequence[int]] = ()) -> None:
        self._shards = list(shards)
        self._reads = reads
        self._cache = ShardCache(reads.cache_dir, limit_bytes=reads.cache_limit) if reads.cache_dir else None
        self._client = gcs.pooled_client(reads.connections)
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], concurrent.futures.Future[bytes]] = {}
        self._settled: set[tuple[int, int]] = set()  # ranges taken or given up: never requested again
        self._held_bytes = 0
        first = set(side_by_side[0]) if side_by_side else {0}
        self._starts = [_range_starts(shard.num_bytes, reads.range_bytes, first=number in first,
                                      connections=reads.connections) for number, shard in enumerate(self._shards)]
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

    def __enter__(self) -> "ShardFetcher":
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
        self._pool.shutdown(wait=False, cancel_futures=True)

    def open(self, number: int) -> "FetchedShard | None":
        """Shard ``number``: from the cache when it holds it, else its ranges as they arrive; None for a local path."""
        shard = self._shards[number]
        if not fetched_remotely(shard.path):
            return None
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

    def _submit(self, key: tuple[int, int], size: int) -> concurrent.futures.Future[bytes]:
        number, start = key
        future = self._pool.submit(self._download, self._shards[number], start, size)
        self._pending[key] = future
        self._held_bytes += size
        return future

    def _download(self, shard: RemoteShard, start: int, size: int) -> bytes:
        from google.api_core.exceptions import NotFound

        try:
            data = gcs.read_range(shard.path, start, start + size, through=self._client)
        except NotFound as err:
            raise MissingShardError(shard.path) from err
        if len(data) != size:
            raise CorruptShardError(shard.path, f"bytes {start}..{start + size} of the {shard.num_bytes} the "
                                                f"manifest lists: got {len(data)} bytes", None)
        COUNTERS.add("ranges")
        COUNTERS.add("fetched_bytes", size)
        return data

    def take(self, number: int, start: int) -> bytes:
        """The range of shard ``number`` at ``start`` (waiting for it; requested now if the read-ahead is behind)."""
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


class FetchedShard:
    """One shard of a ``ShardFetcher``, for a format's reader: a stream of its bytes, or a whole local file.

    ``stream()`` reads it front to back (checking the CRC32C at the end, and writing the cache entry
    as it goes); ``local_file()`` gives a local path of the whole shard (the cache entry, or a
    private temporary file removed by ``close()``). A cache hit is a local file from the start.
    """

    def __init__(self, fetcher: ShardFetcher, number: int, shard: RemoteShard, *, cached: str | None) -> None:
        self._fetcher = fetcher
        self._number = number
        self.shard = shard
        self.cached = cached  # a local path of the whole shard, once there is one
        self._position = 0  # bytes of the shard taken from the fetcher
        self._digest = google_crc32c.Checksum()
        self._partial: Any = None  # the cache entry (or private copy) being written
        self._partial_path: str | None = None
        self._private: str | None = None  # a private temporary copy to remove on close

    @property
    def path(self) -> str:
        return self.shard.path

    def chunks(self) -> Iterator[bytes]:
        """The shard's bytes front to back, a range at a time (checked against the CRC32C at the end)."""
        if self.cached is not None:
            with open(self.cached, "rb") as handle:
                while chunk := handle.read(self._fetcher._reads.range_bytes):
                    yield chunk
            return
        self._begin_copy(private=False)
        while self._position < self.shard.num_bytes:
            chunk = self._fetcher.take(self._number, self._position)
            self._position += len(chunk)
            self._digest.update(chunk)
            if self._partial is not None:
                self._partial.write(chunk)
            yield chunk
        self._finish_copy()

    def stream(self) -> io.RawIOBase:
        """A readable file object over ``chunks()``."""
        return _ChunkStream(self.chunks())

    def local_file(self) -> str:
        """A local path holding the whole shard (fetched now if needed), valid until ``close()``."""
        if self.cached is None:
            self._begin_copy(private=True)
            for _ in self.chunks():
                pass
            if self.cached is None:
                raise ReaderError(f"{self.path}: no local copy was made")  # unreachable: chunks() made one
        return self.cached

    def _begin_copy(self, *, private: bool) -> None:
        if self._partial is not None:
            return
        cache = self._fetcher.cache
        if cache is not None:
            self._partial_path = cache.partial_path(self.shard.key)
        elif private:
            handle, self._partial_path = tempfile.mkstemp(prefix="beam-tfrecord-shard-",
                                                          suffix=f"-{os.path.basename(self.path)}")
            os.close(handle)
        else:
            return
        self._partial = open(self._partial_path, "wb")  # noqa: SIM115  (closed in _finish_copy or close)

    def _finish_copy(self) -> None:
        found = self._digest.hexdigest().decode("ascii")
        if self._partial is not None:
            self._partial.close()
            self._partial = None
        if found != self.shard.crc32c:
            self._drop_partial()
            raise CorruptShardError(self.path, f"file CRC32C {found} differs from the manifest's {self.shard.crc32c}")
        if self._partial_path is None:
            return
        cache = self._fetcher.cache
        partial, self._partial_path = self._partial_path, None
        if cache is not None:
            self.cached = cache.commit(partial, self.shard.key) if os.path.exists(partial) else None
            if self.cached is not None:
                COUNTERS.add("cached_shards")
                return
            if os.path.exists(partial):
                os.remove(partial)
            return
        self.cached = self._private = partial

    def _drop_partial(self) -> None:
        if self._partial is not None:
            self._partial.close()
            self._partial = None
        if self._partial_path is not None:
            if os.path.exists(self._partial_path):
                os.remove(self._partial_path)
            self._partial_path = None

    def close(self) -> None:
        """Gives up what was not read, removes a private copy and an unfinished cache entry."""
        if self.cached is None and self._position < self.shard.num_bytes:
            self._fetcher.give_up(self._number, self._position)
        self._drop_partial()
        if self._private is not None:
            if os.path.exists(self._private):
                os.remove(self._private)
            self._private = None


class _ChunkStream(io.RawIOBase):
    """A readable stream over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._held = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._held:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._held = memoryview(chunk)
        count = min(len(buffer), len(self._held))
        buffer[:count] = self._held[:count]
        self._held = self._held[count:]
        return count

    def read(self, size: int | None = -1) -> bytes:
        """``size`` bytes (fewer only at the end), as a buffered file gives them."""
        if size is None or size < 0:
            return b"".join([bytes(self._held), *self._chunks])
        parts: list[memoryview] = []
        while size > 0:
            if not self._held:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._held = memoryview(chunk)
            part = self._held[:size]
            parts.append(part)
            self._held = self._held[len(part):]
            size -= len(part)
        return b"".join(parts)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        super().close()


MIN_FIRST_RANGE_BYTES = 256 << 10


def _range_starts(num_bytes: int, range_bytes: int, *, first: bool, connections: int) -> list[int]:
    """Where a shard's ranges start: every ``range_bytes``, except in the shards a read needs first.

    Large ranges cost the fewest requests, and so the least CPU and latency per byte: a reader that
    needs whole shards (ArrayRecord, tf.data's local files) waits for a shard's last range, but the
    read-ahead keeps the next shards coming meanwhile. Cutting every shard into one range per
    connection (2 MiB at least) made a whole read of 313 MB in 20 MB shards take 0.95 s instead of
    0.72 s behind 40 ms and 50 MB/s per connection. The shards a read needs first are cut into
    ``connections`` ranges (256 KiB at least): reading starts after one small answer.
    """
    size = range_bytes
    if first:
        size = min(range_bytes, max(MIN_FIRST_RANGE_BYTES, -(-num_bytes // connections)))
    return list(range(0, num_bytes, size))


def shard_fetcher(shards: Sequence[RemoteShard], reads: RemoteReads, *,
                  side_by_side: Sequence[Sequence[int]] = ()) -> ShardFetcher | None:
    """A fetcher of the shards when any is on ``gs://``; None when all are read as before (local paths)."""
    if not any(fetched_remotely(shard.path) for shard in shards):
        return None
    return ShardFetcher(shards, reads, side_by_side=side_by_side)

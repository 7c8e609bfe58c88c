"""Reading ``gs://`` shards fast: parallel ranged reads, read-ahead across shards, an optional local cache.

An object store answers each request after tens of milliseconds and gives one connection
~50-200 MB/s, but many connections in parallel. One sequential stream per shard (what
``storage.open_read`` gives) therefore starves a reader: measured behind 40 ms and 50 MB/s per
connection, the readers reached 0.07 (small records) and 0.14 (150 KB images) of what 16 parallel
range reads get. So a reader that knows the shards it will read, in order, hands them to a
``ShardFetcher``, which cuts them into ``range_bytes`` ranges (smaller near a read's start and
end: ``fetcher._range_starts``) and reads the ranges on ``connections``
threads (one kept-alive connection each), in the reader's order and across shard boundaries: while
one shard is parsed, the next ones arrive, which hides the latency of each request and of each
shard's first byte. With that, behind 40 ms and 50 MB/s per connection, ``read_numpy`` and
``TFRecordIterableDataset`` read at 0.81-0.94 of what 16 plain range reads get; ``read_dataset``,
which needs whole shards and twice their CPU, less (``benchmarks/remote_read.py``; ``docs/performance.md``).

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

**Retries.** Each range is one ranged GET (``gcs.read_range``) with ``gcs.retry_policy()`` (429, 5xx and dropped
connections are retried), so a flaky store gives the same bytes, only later.

Modules: ``fetcher`` (``ShardFetcher``: the ranges, the read-ahead, the bound), ``fetched`` (``FetchedShard``:
one shard as a reader takes it, a stream or a whole local file, checked and cached).
"""

from __future__ import annotations

from beam_tfrecord.shard_fetch.fetched import FetchedShard
from beam_tfrecord.shard_fetch.fetcher import ShardFetcher, shard_fetcher

__all__ = ["FetchedShard", "ShardFetcher", "shard_fetcher"]

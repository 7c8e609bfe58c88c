"""Reading remote shards fast: parallel ranged reads, read-ahead across shards, an optional local cache.

``options`` holds what a reader is told (``RemoteReads``), ``fetcher`` the ranges and their bound,
``fetched`` one shard as a reader takes it, ``cache`` the machine's shard cache. How and why:
docs/reading.md#reading-from-a-bucket-parallel-ranged-reads-and-a-local-cache.
"""

from __future__ import annotations

from beam_tfrecord.remote_reads.options import RemoteReads

__all__ = ["RemoteReads"]

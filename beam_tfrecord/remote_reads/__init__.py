"""Reading remote shards fast: parallel ranged reads, read-ahead across shards, an optional local cache.

Every byte is checked as from a local disk. How and why: docs/reading.md, "Reading from a bucket".
"""

from __future__ import annotations

from beam_tfrecord.remote_reads.options import RemoteReads
from beam_tfrecord.storage.deadlines import StoreDeadlines

__all__ = ["RemoteReads", "StoreDeadlines"]

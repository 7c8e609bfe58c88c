"""``duplicates=drop``: the records left out (all but the first of each group), before the plan sees them.

Left out by key hash: the spill path plans from the runs' indexes less those hashes and its shard writers skip
them; the shuffle path takes them out of the encoded batches. The plan sees the kept set, so bytes balance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.core.runs import HASH_BYTES
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.encoding.entries import EncodedBatch
from beam_tfrecord.errors import PipelineInvariantError
from beam_tfrecord.quality.groups import DuplicateGroups, merge_groups
from beam_tfrecord.spill.resume import read_reused_hashes, skipped

DROPPED_FILENAME = "dropped-key-hashes.u64"


def dropped_hashes(found: Sequence[DuplicateGroups]) -> np.ndarray:
    """The sorted key hashes ``drop`` leaves out, from every task's groups."""
    return merge_groups(found).dropped_key_hashes()


def write_dropped(temp_dir: str, hashes: np.ndarray) -> str:
    """Writes the sorted hashes where every shard writer maps them (8 bytes each); returns the path."""
    path = storage.join(temp_dir, DROPPED_FILENAME)
    storage.write_bytes_atomic(path, np.asarray(hashes, "<u8").tobytes())
    return path


def index_without(index_of: Callable[[Any], tuple[np.ndarray, np.ndarray]], dropped: np.ndarray,
                  removed: dict[int, int]) -> Callable[[Any], tuple[np.ndarray, np.ndarray]]:
    """``index_of`` less the dropped hashes; records in ``removed`` how many it left out of each source."""
    def index(source: Any) -> tuple[np.ndarray, np.ndarray]:
        hashes, sizes = index_of(source)
        out = skipped(hashes, dropped)
        removed[id(source)] = int(out.sum())
        return hashes[~out], sizes[~out]
    return index


def check_removed(removed: int, groups: Sequence[DuplicateGroups]) -> None:
    """The entries left out are exactly the members dropped (a key repeated with other content would not be)."""
    expected = merge_groups(groups).num_dropped
    if removed != expected:
        raise PipelineInvariantError("duplicates", f"drop left out {removed} records for {expected} duplicates: "
                                                   "a key that repeats with other content shares a dropped key hash")


def entries_without(entries: Iterable[bytes | memoryview], spec: ShardSpec,
                    dropped_path: str | None) -> Iterable[bytes | memoryview]:
    """A shard's entries less those ``drop`` left out (the dropped hashes in its range, as a set): ``entries``
    themselves when none is (no generator between the shard writer and its entries, a step per small record)."""
    if dropped_path is None:
        return entries
    hashes = read_reused_hashes(dropped_path)
    lo, hi = np.searchsorted(hashes, np.uint64(spec.hash_lo)), np.searchsorted(hashes, np.uint64(spec.hash_hi - 1),
                                                                               side="right")
    left_out = {bytes(int(h).to_bytes(HASH_BYTES, "big")) for h in hashes[lo:hi].tolist()}
    if not left_out:
        return entries
    return (entry for entry in entries if bytes(entry[:HASH_BYTES]) not in left_out)


def batch_without(batch: EncodedBatch, dropped: np.ndarray) -> EncodedBatch:
    """The shuffle path's batch less the entries ``drop`` left out (its dead letters kept)."""
    if not len(dropped) or not batch.entries:
        return batch
    hashes, _ = batch.index()
    out = skipped(hashes, dropped).tolist()
    # replaced, not rebuilt: a subclass's fields (``SummarizedBatch.summary``) stay
    return dataclasses.replace(batch, entries=tuple(e for e, o in zip(batch.entries, out) if not o))

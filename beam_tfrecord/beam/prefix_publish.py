"""Publication under a Beam prefix: the staged dataset's shards take Beam's names beside it, the manifest goes last.

Crash-safe as ``publish``: the old manifest goes first, a shard already in place stays, and running it again
returns the manifest it wrote. See docs/inputs.md, "Files named by a Beam prefix".
"""

from __future__ import annotations

import dataclasses

from beam_tfrecord import storage
from beam_tfrecord.beam.beam_names import PrefixLayout
from beam_tfrecord.core.manifest import DEAD_LETTER_FILENAME, Manifest, ShardInfo
from beam_tfrecord.errors import BeamTFRecordError
from beam_tfrecord.statistics import STATISTICS_FILE


def named_by_prefix(staged: Manifest, layout: PrefixLayout) -> Manifest:
    """The staged manifest with its shards under the prefix's names (``shard_naming`` set)."""
    names = layout.names
    splits = tuple(dataclasses.replace(split, shards=tuple(
        dataclasses.replace(shard, filename=names.format(split.name, shard.index, len(split.shards)))
        for shard in split.shards)) for split in staged.splits)
    return dataclasses.replace(staged, splits=splits, shard_naming=names)


def _old_manifest(path: str) -> Manifest | None:
    if not storage.exists(path):
        return None
    try:
        return Manifest.loads(storage.read_bytes(path))
    except BeamTFRecordError:
        return None  # unreadable: replaced, and its files (which no one can list) are left


def publish_under_prefix(staged: Manifest, layout: PrefixLayout) -> Manifest:
    """Moves the staged shards (and dead letters and statistics) into place, deletes the old dataset's other
    shards, writes the manifest and removes the staging folder. Returns the manifest written."""
    old = _old_manifest(layout.manifest_path)
    if old is not None and old.run_id == staged.run_id:  # this run published already; this is a re-execution
        return old
    manifest = named_by_prefix(staged, layout)
    storage.delete_if_exists([layout.manifest_path])  # unpublish the old dataset first
    sources, destinations = [], []
    for staged_shard, shard in zip(staged.shards, manifest.shards, strict=True):
        source = storage.join(layout.staging_dir, staged_shard.filename)
        destination = layout.shard_path(shard.filename)
        if not storage.exists(source) and _in_place(destination, shard):
            continue  # an earlier attempt moved it
        sources.append(source)
        destinations.append(destination)
    storage.rename(sources, destinations)
    if old is not None:
        stale = {s.filename for s in old.shards} - {s.filename for s in manifest.shards}
        storage.delete_if_exists([layout.shard_path(name) for name in sorted(stale)])
    for listed, name in ((staged.dead_letters, DEAD_LETTER_FILENAME), (staged.statistics, STATISTICS_FILE)):
        beside = storage.join(layout.metadata_dir, name)  # beside the manifest, which names it
        if listed is not None:
            staged_file = storage.join(layout.staging_dir, listed)
            if storage.exists(staged_file):
                storage.rename([staged_file], [beside])
        else:
            storage.delete_if_exists([beside])
    storage.write_bytes_atomic(layout.manifest_path, manifest.dumps().encode("utf-8"))  # the dataset is published
    storage.delete_tree(layout.staging_dir)
    return manifest


def _in_place(path: str, shard: ShardInfo) -> bool:
    return storage.exists(path) and storage.crc32c_and_size(path) == (shard.crc32c, shard.num_bytes)

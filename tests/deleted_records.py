"""Versions of a root that share shards and delete records, made by hand: what the readers' tests
(tests/reader/test_read_deletions.py) and benchmarks/read_deletions.py read.

A root's first version is written the normal way; the next one lists the first one's shards where they are
(``stored_in``) with deletion vectors, and shards of its own moved into its directory (which may have the same
file names as the first version's: versions are told apart by directory), as /work/helpers/SHARED60.md describes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping

from beam_tfrecord import storage
from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.framing import FRAMING_BYTES
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, MANIFEST_VERSION, Manifest, ShardInfo
from beam_tfrecord.core.naming import ShardName
from beam_tfrecord.dataset import LATEST_FILENAME, load_manifest, shard_file_path, version_dir
from beam_tfrecord.formats import shard_format
from beam_tfrecord.versions.refresh import commit_version


def first_version(root: str, version_id: str, write: Callable[[str], object]) -> Manifest:
    """Writes version ``version_id`` of ``root`` with ``write(directory)`` and makes it LATEST."""
    directory = version_dir(root, version_id)
    write(directory)
    commit_version(root, version_id)
    return load_manifest(directory)


def shared_version(root: str, base_id: str, version_id: str, *, deleted: Mapping[str, Iterable[int]],
                   own: str | None = None) -> Manifest:
    """Writes version ``version_id`` of ``root`` and makes it LATEST: every shard of version ``base_id`` listed where
    it is, the records at ``deleted[file name]`` deleted, then (``own``) the shards of the dataset at ``own``,
    moved into the new version's directory (same splits)."""
    base = load_manifest(version_dir(root, base_id))
    directory = version_dir(root, version_id)
    os.makedirs(directory, exist_ok=True)
    added = load_manifest(own) if own is not None else None
    splits = []
    for split in base.splits:
        shards = [dataclasses.replace(shard, stored_in=base_id,
                                      deletions=DeletionVector.of(deleted[shard.filename])
                                      if deleted.get(shard.filename) else None)
                  for shard in split.shards]
        for shard in (added.split(split.name).shards if added and split.name in {s.name for s in added.splits}
                      else ()):
            os.replace(os.path.join(str(own), shard.filename), os.path.join(directory, shard.filename))
            shards.append(shard)
        splits.append(dataclasses.replace(split, shards=tuple(dataclasses.replace(shard, index=index)
                                                              for index, shard in enumerate(shards))))
    live = sum(shard.num_live for split in splits for shard in split.shards)
    manifest = dataclasses.replace(base, splits=tuple(splits), num_inputs=live, num_rejected=0, num_dropped=0,
                                   dead_letters=None, statistics=None, version=MANIFEST_VERSION)
    storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode())
    storage.write_bytes_atomic(storage.join(root, LATEST_FILENAME), f"{version_id}\n".encode())
    return manifest


def shard_records(directory: str, manifest: Manifest, shard: ShardInfo) -> list[bytes]:
    """Every record of a shard's file, deleted or not, in file order (``directory``: the manifest's version)."""
    path = shard_file_path(directory, shard)
    with shard_format(manifest.file_format).open_reader(path, shard, compression=manifest.compression) as reader:
        return [record for record, _ in reader.iter_records(0, shard.num_records)]


def live_shard_records(directory: str, manifest: Manifest, shard: ShardInfo) -> list[bytes]:
    """A shard's records but its deleted ones, in file order."""
    deleted = set(shard.deletions.positions) if shard.deletions is not None else set()
    return [record for position, record in enumerate(shard_records(directory, manifest, shard))
            if position not in deleted]


def live_records(directory: str, manifest: Manifest, split: str) -> list[bytes]:
    """The records a reader of ``split`` returns in stored order: each shard's but its deleted ones."""
    return [record for shard in manifest.split(split).shards
            for record in live_shard_records(directory, manifest, shard)]


def compacted_twin(directory: str, manifest: Manifest, out_dir: str) -> Manifest:
    """Writes into ``out_dir`` the simplest compaction of the version in ``directory`` (``manifest``): each shard's
    live records, in the same order, in a shard of its own, no deletions, nothing shared."""
    fmt = shard_format(manifest.file_format)
    os.makedirs(out_dir, exist_ok=True)
    splits = []
    for split in manifest.splits:
        shards = []
        for index, shard in enumerate(split.shards):
            records = live_shard_records(directory, manifest, shard)
            name = str(ShardName(manifest.dataset_name, split.name, index, len(split.shards), manifest.compression,
                                 manifest.file_format))
            writer = fmt.open_writer(os.path.join(out_dir, name), compression=manifest.compression, direct_io=False)
            for record in records:
                writer.append(record)
            crc32c, num_bytes = writer.close()
            shards.append(ShardInfo(name, split.name, index, len(records), num_bytes,
                                    sum(len(record) + FRAMING_BYTES for record in records), crc32c))
        splits.append(dataclasses.replace(split, shards=tuple(shards)))
    twin = dataclasses.replace(manifest, splits=tuple(splits))
    storage.write_bytes_atomic(storage.join(out_dir, MANIFEST_FILENAME), twin.dumps().encode())
    return twin

"""The live records of a dataset, read file by file as its manifest lists them (no reader of the project): what
the tests of shared shards and deletion vectors compare with a full build."""

from __future__ import annotations

import collections

from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.formats import shard_format


def live_records(path: str) -> dict[str, collections.Counter]:
    """Per split, the multiset of live records of the dataset at ``path``, read shard by shard from the files the
    manifest lists (wherever they are), deleted positions skipped."""
    dataset = open_dataset(path)
    manifest = dataset.manifest
    found: dict[str, collections.Counter] = {}
    for split in manifest.splits:
        counter = found.setdefault(split.name, collections.Counter())
        for shard in split.shards:
            deleted = shard.deletions.positions if shard.deletions is not None else ()
            with shard_format(manifest.file_format).open_reader(dataset.shard_path(shard), shard,
                                                                compression=manifest.compression) as reader:
                counter.update(record for position, (record, _) in enumerate(reader.iter_records(0, shard.num_records))
                               if position not in deleted)
    return found

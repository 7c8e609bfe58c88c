"""Versions with column files made by hand, for the read side's tests (until ``add-features`` makes them).

A root's first version is a normal build of the base features; the next lists its shards where they are (with
deletions, if asked) and writes, per shard, a column file of the added features: the project's encoder
(``SampleEncoder``) and the format's writer, row i for record i (deleted positions: an empty Example). A native
build of the same samples with every feature is the reference every reader must match.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import apache_beam as beam

from beam_tfrecord import DatasetDescription, Sample, ShardingConfig, SplitConfig, WriteTFRecordDataset, storage
from beam_tfrecord.core.columns import ColumnFile, column_filename
from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.schema import Feature, Schema
from beam_tfrecord.dataset import LATEST_FILENAME, load_manifest, shard_file_path, version_dir
from beam_tfrecord.formats import shard_format
from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder
from beam_tfrecord.versions.input_index import INPUT_INDEX_FILENAME
from beam_tfrecord.versions.locations import (
    RECORD_LOCATIONS_FILENAME,
    keys_by_position,
    read_record_locations,
    shard_key,
)
from beam_tfrecord.versions.refresh import commit_version

Values = Callable[[str], dict[str, Any]]  # a record's key -> its added features' values


def write_build(directory: str, samples: list[Sample], schema: Schema, *, file_format: FileFormat,
                num_shards: int = 3, splits: str = "train=*") -> Manifest:
    """A build of ``samples`` into ``directory`` (``num_shards`` per split)."""
    description = DatasetDescription(schema=schema, name="t", file_format=file_format,
                                     sharding=ShardingConfig(num_shards=num_shards), splits=SplitConfig.parse(splits))
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(samples) | WriteTFRecordDataset(directory, description=description)
    return load_manifest(directory)


def record_keys(directory: str, manifest: Manifest, shard: Any, version_id: str, *, key_feature: str = "key"
                ) -> list[str]:
    """The key of every record of a shard, in file order: from the version's record locations when it has them,
    else from its records' ``key_feature``."""
    locations = read_record_locations(directory)
    if locations is not None:
        where = shard_key(shard, version_id)
        found = keys_by_position(locations.by_key, [where])[where]
        return [found[position] for position in range(shard.num_records)]
    decoder = RecordDecoder(manifest.schema)
    path = shard_file_path(directory, shard)
    with shard_format(manifest.file_format).open_reader(path, shard, compression=manifest.compression) as reader:
        return [str(decoder.decode(record, shard=path, offset=offset)[key_feature], "utf-8")
                for record, offset in reader.iter_records(0, shard.num_records)]


def add_columns(root: str, base_id: str, version_id: str, *, adds: Iterable[tuple[Mapping[str, Feature], Values]],
                deleted: Mapping[str, Iterable[int]] | None = None, renamed: Mapping[str, str] | None = None,
                dropped: Iterable[str] = (), key_feature: str = "key") -> Manifest:
    """Writes version ``version_id`` of ``root`` (LATEST): version ``base_id``'s shards where they are, each with
    one column file per add (``(features, values)``) in the new version's ``columns/``, the records at
    ``deleted[file name]`` deleted; ``renamed`` (logical -> stored) and ``dropped`` (stored names) as a rename or
    drop after the adds would list them."""
    base_dir = version_dir(root, base_id)
    base = load_manifest(base_dir)
    directory = version_dir(root, version_id)
    os.makedirs(storage.join(directory, "columns"), exist_ok=True)
    fmt = shard_format(base.file_format)
    adds = list(adds)
    features = dict(base.schema.features)
    for added, _ in adds:
        features.update(added)
    splits = []
    for split in base.splits:
        shards = []
        for shard in split.shards:
            keys = record_keys(base_dir, base, shard, base_id, key_feature=key_feature)
            gone = set((deleted or {}).get(shard.filename, ()))
            columns = []
            for number, (added, values) in enumerate(adds):
                encoder = SampleEncoder(Schema(features=dict(added)))
                name = column_filename(base_id, f"{number}-{shard.filename}")
                writer = fmt.open_writer(storage.join(directory, name), compression=base.compression, direct_io=False)
                for position, key in enumerate(keys):
                    writer.append(b"" if position in gone else encoder.encode(Sample(key, values(key))))
                crc32c, size = writer.close()
                columns.append(ColumnFile(name, tuple(added), shard.num_records, size, crc32c))
            shards.append(dataclasses.replace(shard, stored_in=base_id, columns=tuple(columns),
                                              deletions=DeletionVector.of(sorted(gone)) if gone else None))
        splits.append(dataclasses.replace(split, shards=tuple(shards)))
    renamed, dropped = dict(renamed or {}), tuple(dropped)
    logical = {stored: name for name, stored in renamed.items()}
    schema = Schema(features={logical.get(name, name): feature for name, feature in features.items()
                              if name not in dropped}, sequence_features=dict(base.schema.sequence_features))
    live = sum(shard.num_live for split in splits for shard in split.shards)
    manifest = dataclasses.replace(base, schema=schema, splits=tuple(splits), num_inputs=live, num_rejected=0,
                                   num_dropped=0, dead_letters=None, statistics=None, physical_names=renamed,
                                   dropped_features=dropped)
    for side_file in (INPUT_INDEX_FILENAME, RECORD_LOCATIONS_FILENAME):  # what compaction reads: the base's own
        if storage.exists(storage.join(base_dir, side_file)):
            storage.write_bytes_atomic(storage.join(directory, side_file),
                                       storage.read_bytes(storage.join(base_dir, side_file)))
    storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode())
    storage.write_bytes_atomic(storage.join(root, LATEST_FILENAME), f"{version_id}\n".encode())
    return manifest


def first_version(root: str, version_id: str, samples: list[Sample], schema: Schema, *,
                  file_format: FileFormat) -> Manifest:
    """Version ``version_id`` of ``root``, a build of ``samples``, made LATEST."""
    write_build(version_dir(root, version_id), samples, schema, file_format=file_format)
    commit_version(root, version_id)
    return load_manifest(version_dir(root, version_id))

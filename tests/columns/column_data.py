"""Small Parquet inputs for the feature-column tests, and the records of a version as a reader of this project sees
them: each base record joined with its column rows, under logical names (the write side's check of an add; the
readers' own joins are tested by ``test_read_*``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_tfrecord.core import proto
from beam_tfrecord.dataset import open_dataset, shard_file_path
from beam_tfrecord.formats import shard_format
from pipelines import refresh_manifest

NUM_ROWS = 120
EMB_SIZE = 8
QUIET = ["--progress", "none", "--keep_versions", "10", "--min_version_age", "0"]
SMALL_SHARDS = ["--target_shard_bytes", "1500"]  # a handful of shards of ~40 records


def columns(rows: int = NUM_ROWS) -> dict[str, list]:
    """Every column of the inputs: ``id`` (the key), ``x``, ``label``, ``name`` (unique: a key feature), ``emb``."""
    rng = np.random.default_rng(61)
    return {"id": list(range(rows)), "x": rng.random(rows).astype(np.float32).tolist(),
            "label": rng.integers(0, 5, rows).tolist(), "name": [f"row-{i:04d}" for i in range(rows)],
            "emb": [list(v) for v in rng.random((rows, EMB_SIZE)).astype(np.float32)]}


def write_parquet(path: Path, data: dict[str, list]) -> str:
    pq.write_table(pa.table(data), path)
    return str(path)


def build_root(parquet: str, root: str, *extra: str) -> str:
    """A versioned root refreshed from ``parquet`` (keyed by ``id``); returns its version id."""
    plan = refresh_manifest.run(["--manifest", parquet, "--dataset_root", root, "--key_column", "id", *SMALL_SHARDS,
                                 *QUIET, *extra])
    return plan.version_id


def joined_records(path: str) -> list[bytes]:
    """Every live record of the dataset at ``path`` (a root: LATEST), its column rows merged in and renamed to the
    schema's names (dropped features left out), serialized deterministically and sorted."""
    dataset = open_dataset(path)
    manifest = dataset.manifest
    logical = {manifest.physical_name(name): name for name in manifest.schema.features}
    reader_of = shard_format(manifest.file_format)
    found = []
    for shard in manifest.shards:
        parts = [shard_file_path(dataset.directory, shard)]
        parts += [shard_file_path(dataset.directory, dataclasses.replace(shard, stored_in=c.stored_in), c.filename)
                  for c in shard.columns]
        listed = [shard, *(dataclasses.replace(shard, crc32c=c.crc32c, num_bytes=c.num_bytes) for c in shard.columns)]
        files = []
        for part, info in zip(parts, listed):
            with reader_of.open_reader(part, info, compression=manifest.compression) as reader:
                files.append([bytes(record) for record, _ in reader.iter_records(0, shard.num_records)])
        deleted = shard.deletions.positions if shard.deletions is not None else ()
        for position, records in enumerate(zip(*files)):
            if position in deleted:
                continue
            merged = proto.Example.FromString(b"".join(records))  # protobuf merges concatenated messages
            example = proto.Example()
            for stored, feature in merged.features.feature.items():
                if stored in logical:
                    example.features.feature[logical[stored]].CopyFrom(feature)
            found.append(example.SerializeToString(deterministic=True))
    return sorted(found)

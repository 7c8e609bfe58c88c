"""Compaction folds column files into the shards: byte-identical to a build whose source had the feature.

A JSONL source keyed by ``id`` is refreshed into a root; a version adds an 8-float embedding as column files; the
reference build's source has the embedding as a column from the start. After ``compact`` every shard's name and
CRC32C equal the reference's, and the version reads the same without any column file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from read_fixtures import add_columns

from beam_tfrecord.core.infer import schema_json_text
from beam_tfrecord.core.schema import DType, FixedList, Scalar, Schema
from beam_tfrecord.dataset import load_manifest, read_latest
from beam_tfrecord.errors import RefreshError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.verify import verify_dataset
from pipelines import build_from_manifest, compact, refresh

LAYOUT = ["--splits=train=0.75,test=0.25", "--target_shard_bytes=1500", "--runner=DirectRunner",
          "--direct_running_mode=in_memory", "--progress=none"]
BASE = {"label": Scalar(DType.INT64), "score": Scalar(DType.FLOAT32)}
EMB = {"emb": FixedList(DType.FLOAT32, 8)}
ROWS = 60
ADDED = "20990101T000000.000Z-c3c3c3"


def _emb(key: str) -> dict:
    i = int(key.split("-")[1])
    return {"emb": [i + j / 8 for j in range(8)]}


def _source(folder: Path, name: str, features: dict, *, with_emb: bool) -> list[str]:
    rows = folder / f"{name}.jsonl"
    with rows.open("w") as handle:
        for i in range(ROWS):
            row = {"id": f"row-{i:03d}", "label": i % 3, "score": i / 4}
            handle.write(json.dumps({**row, **(_emb(row["id"]) if with_emb else {})}) + "\n")
    schema = folder / f"{name}.schema.json"
    schema.write_text(schema_json_text(Schema(features)))
    return ["--manifest", str(rows), "--key_column=id", "--schema", str(schema)]


def test_compact_folds_columns_into_a_native_builds_bytes(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    first = refresh.run([*_source(tmp_path, "base", BASE, with_emb=False), "--dataset_root", root,
                         "--keep_versions=10", "--min_version_age=0", *LAYOUT])
    added = add_columns(root, first.version_id, ADDED, adds=[(EMB, _emb)])
    assert not added.self_contained and all(shard.columns for shard in added.shards)
    native_dir = str(tmp_path / "native")
    native = build_from_manifest.run([*_source(tmp_path, "native", {**BASE, **EMB}, with_emb=True),
                                      "--output", native_dir, *LAYOUT])
    joined = sorted((bytes(e["emb"]), int(e["label"])) for e in read_numpy(root, split="train"))
    compacted = compact.run(["--dataset_root", root, "--keep_versions=10", "--min_version_age=0", *LAYOUT[2:]])
    assert compacted is not None and read_latest(root) == compacted
    manifest = load_manifest(root)
    assert manifest.self_contained and not any(shard.columns for shard in manifest.shards)
    assert manifest.schema == native.schema
    assert [(s.filename, s.num_records, s.crc32c) for s in manifest.shards] == \
        [(s.filename, s.num_records, s.crc32c) for s in native.shards]
    assert verify_dataset(root).num_records == ROWS
    assert sorted((bytes(e["emb"]), int(e["label"])) for e in read_numpy(root, split="train")) == joined


def test_a_refresh_of_a_root_with_columns_names_what_its_records_lack(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    args = [*_source(tmp_path, "base", BASE, with_emb=False), "--dataset_root", root, "--keep_versions=10",
            "--min_version_age=0", *LAYOUT]
    first = refresh.run(args)
    add_columns(root, first.version_id, ADDED, adds=[(EMB, _emb)])
    with (tmp_path / "base.jsonl").open("a") as handle:  # a new row: the refresh has work to do
        handle.write(json.dumps({"id": "row-999", "label": 1, "score": 0.5}) + "\n")
    with pytest.raises(RefreshError, match=f"version {ADDED} has features added as column files.*: emb;"):
        refresh.run(args)
    assert read_latest(root) == ADDED


def test_the_add_command_then_compact_gives_a_native_builds_bytes(tmp_path: Path) -> None:
    """``add-features`` (the command, a Parquet embedding) then ``compact``: the shards of a root refreshed from a
    Parquet file with the embedding from the start; every reader reads the added version as that build."""
    from beam_tfrecord.reader.tf_data import read_dataset
    from pipelines import add_features
    from tests.columns.column_data import QUIET, build_root, columns, write_parquet

    data = columns()
    root, native = str(tmp_path / "root"), str(tmp_path / "native")
    build_root(write_parquet(tmp_path / "base.parquet", {k: v for k, v in data.items() if k != "emb"}), root)
    build_root(write_parquet(tmp_path / "native.parquet", data), native)
    add_features.run(["--dataset_root", root, "--features",
                      write_parquet(tmp_path / "emb.parquet", {"id": data["id"], "emb": data["emb"]}),
                      "--key_column", "id", *QUIET])
    assert all(shard.columns for shard in load_manifest(root).shards)

    def rows(examples) -> list[tuple]:
        return sorted((bytes(e["name"]), np.asarray(e["emb"]).tobytes()) for e in examples)

    assert rows(read_numpy(root)) == rows(read_numpy(native))
    batches = list(read_dataset(root, batch_size=32))
    tf_rows = sorted((name, emb.tobytes()) for b in batches
                     for name, emb in zip(b["name"].numpy().tolist(), b["emb"].numpy()))
    assert tf_rows == rows(read_numpy(native))
    compact.run(["--dataset_root", root, *QUIET, *LAYOUT[2:3]])
    compacted, built = load_manifest(root), load_manifest(native)
    assert compacted.schema == built.schema and not any(s.columns for s in compacted.shards)
    assert [(s.filename, s.num_records, s.crc32c) for s in compacted.shards] == \
        [(s.filename, s.num_records, s.crc32c) for s in built.shards]

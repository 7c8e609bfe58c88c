"""Parquet manifests round-trip, nested list columns included (through the manifest job)."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

from beam_tfrecord.core.infer import infer_schema
from beam_tfrecord.core.schema import DType, FixedList, Scalar, Schema, Tensor, TensorDType, VarList
from beam_tfrecord.sources.parquet import ReadParquetManifest, iter_parquet_rows
from pipelines import build_from_manifest

N = 300
SCHEMA = Schema({"id": Scalar(DType.INT64), "name": Scalar(DType.STRING, default=""), "raw": Scalar(DType.BYTES),
                 "vec": VarList(DType.FLOAT32), "matrix": Tensor(TensorDType.INT64, (2, 3))},
                sequence_features={"boxes": FixedList(DType.FLOAT32, 4)})


def _table() -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table({
        "id": pa.array(range(N), pa.int64()),
        "name": pa.array([None if i % 7 == 0 else f"row {i}" for i in range(N)], pa.string()),
        "raw": pa.array([bytes([i % 256, 0, 255]) for i in range(N)], pa.binary()),
        "vec": pa.array([rng.random(i % 4).astype(np.float32).tolist() for i in range(N)], pa.list_(pa.float32())),
        "matrix": pa.array([[[i, i + 1, i + 2], [0, -1, -i]] for i in range(N)], pa.list_(pa.list_(pa.int64()))),
        "boxes": pa.array([[[i / 1000, 0.0, 0.5, 1.0]] * (i % 3) for i in range(N)], pa.list_(pa.list_(pa.float32()))),
    })


def test_parquet_round_trip_through_the_job(tmp_path, parse):
    table = _table()
    pq.write_table(table.slice(0, 200), tmp_path / "part-0.parquet", row_group_size=64)
    pq.write_table(table.slice(200), tmp_path / "part-1.parquet")
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA.to_json()))
    manifest = build_from_manifest.run(["--manifest", str(tmp_path / "*.parquet"), "--schema",
                                        str(tmp_path / "schema.json"), "--key_column", "id",
                                        "--output", str(tmp_path / "out"), "--chunk_size", "50"])
    assert (manifest.num_inputs, manifest.num_rejected) == (N, 0)
    context = {"id": tf.io.FixedLenFeature([], tf.int64), "name": tf.io.FixedLenFeature([], tf.string),
               "raw": tf.io.FixedLenFeature([], tf.string), "vec": tf.io.RaggedFeature(tf.float32),
               "matrix": tf.io.FixedLenFeature([], tf.string)}
    parsed = parse(str(tmp_path / "out"), context, sequence_spec={"boxes": tf.io.RaggedFeature(tf.float32)})
    order = np.argsort(parsed["id"])
    expected = table.to_pylist()
    for position, row in zip(order, expected):
        assert parsed["id"][position] == row["id"]
        assert parsed["name"][position].decode() == (row["name"] or "")
        assert parsed["raw"][position] == row["raw"]
        np.testing.assert_array_equal(np.float32(parsed["vec"][position]), np.float32(row["vec"]))
        assert np.frombuffer(parsed["matrix"][position], "<i8").reshape(2, 3).tolist() == row["matrix"]
        np.testing.assert_array_equal(np.float32(parsed["boxes"][position]).reshape(-1, 4),
                                      np.float32(row["boxes"]).reshape(-1, 4))


def test_parquet_schema_inference_reads_nested_lists(tmp_path):
    table = _table().drop_columns(["boxes"])
    pq.write_table(table, tmp_path / "t.parquet")
    schema = infer_schema(iter_parquet_rows(str(tmp_path / "t.parquet"), limit=50), from_text=False, exclude=["id"])
    assert schema == Schema({"name": Scalar(DType.STRING, default=""), "raw": Scalar(DType.BYTES),
                             "vec": VarList(DType.FLOAT32), "matrix": Tensor(TensorDType.INT64, (2, 3))})


def test_parquet_missing_column_means_absent(tmp_path, write, parse):
    pq.write_table(pa.table({"id": [1, 2]}), tmp_path / "ids.parquet")
    schema = Schema({"id": Scalar(DType.INT64), "weight": Scalar(DType.FLOAT32, default=1.0)})
    write(ReadParquetManifest(str(tmp_path / "ids.parquet"), schema=schema), schema, str(tmp_path / "out"))
    parsed = parse(str(tmp_path / "out"), {"id": tf.io.FixedLenFeature([], tf.int64),
                                           "weight": tf.io.FixedLenFeature([], tf.float32)})
    assert sorted(zip(parsed["id"].tolist(), parsed["weight"].tolist())) == [(1, 1.0), (2, 1.0)]

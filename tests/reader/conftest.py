"""Datasets for the reader tests, each written once per session by a real Beam pipeline.

Every sample carries its key in the ``key`` feature, so a test can compare what it reads
with what was written, whatever order the reader returns.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil

import apache_beam as beam
import numpy as np
import pytest
from PIL import Image as PILImage

from beam_tfrecord import (
    ClassLabel,
    Compression,
    DatasetDescription,
    DType,
    FixedList,
    Image,
    ImageFormat,
    Sample,
    Scalar,
    Schema,
    ShardingConfig,
    SplitConfig,
    Tensor,
    TensorDType,
    VarList,
    WriteTFRecordDataset,
)
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.dataset import load_manifest

ALL_TYPES_SCHEMA = Schema(features={
    "key": Scalar(DType.STRING),
    "i": Scalar(DType.INT64),
    "f": Scalar(DType.FLOAT32),
    "b": Scalar(DType.BYTES),
    "opt": Scalar(DType.INT64, default=-1),
    "fixed": FixedList(DType.FLOAT32, 3),
    "fixed_s": FixedList(DType.STRING, 2),
    "var": VarList(DType.INT64),
    "var_s": VarList(DType.BYTES),
    "t_u8": Tensor(TensorDType.UINT8, (2, 3, 2)),
    "t_f16": Tensor(TensorDType.FLOAT16, (4,)),
    "t_f64": Tensor(TensorDType.FLOAT64, (2, 2)),
    "t_bool": Tensor(TensorDType.BOOL, (3,)),
    "t_i16": Tensor(TensorDType.INT16, ()),
    "t_i8": Tensor(TensorDType.INT8, (2,)),
    "t_u16": Tensor(TensorDType.UINT16, (2, 1)),
    "t_i32": Tensor(TensorDType.INT32, (3,)),
    "t_i64": Tensor(TensorDType.INT64, (1,)),
    "t_f32": Tensor(TensorDType.FLOAT32, (2, 2)),
    "img": Image(ImageFormat.PNG, shape=(6, 5, 3)),
    "label": ClassLabel(("cat", "dog", "bird")),
})
SEQUENCE_SCHEMA = Schema(
    features={"key": Scalar(DType.STRING), "length": Scalar(DType.INT64)},
    sequence_features={"tok": Scalar(DType.INT64), "xy": FixedList(DType.FLOAT32, 2), "tags": VarList(DType.STRING)},
)


@dataclasses.dataclass(frozen=True)
class BuiltDataset:
    """A dataset written for the tests and the values of every sample, by key."""

    path: str
    samples: dict[str, dict]


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def all_types_values(n: int, seed: int = 0) -> dict[str, dict]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        key = f"s{i:04d}"
        values = {
            "key": key, "i": i * 1_000_003 - 2**40, "f": float(np.float32(rng.normal())), "b": bytes([i % 256, 0, 255]),
            "fixed": rng.normal(size=3).astype(np.float32), "fixed_s": [f"a{i}", "ü✓"],
            "var": list(range(i % 5)), "var_s": [b"x" * k for k in range(i % 3)],
            "t_u8": rng.integers(0, 256, (2, 3, 2), dtype=np.uint8),
            "t_f16": rng.normal(size=4).astype(np.float16), "t_f64": rng.normal(size=(2, 2)),
            "t_bool": rng.integers(0, 2, 3).astype(bool), "t_i16": np.array(-i, dtype=np.int16),
            "t_i8": np.array([-i % 128, 7], dtype=np.int8), "t_u16": np.array([[i], [65535]], dtype=np.uint16),
            "t_i32": np.array([i, -i, 2**31 - 1], dtype=np.int32), "t_i64": np.array([-(2**63) + i], dtype=np.int64),
            "t_f32": rng.normal(size=(2, 2)).astype(np.float32),
            "img": png(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)), "label": ["cat", "dog", "bird"][i % 3],
        }
        if i % 4:
            values["opt"] = i
        out[key] = values
    return out


def sequence_values(n: int) -> dict[str, dict]:
    out = {}
    for i in range(n):
        steps = i % 4
        out[f"q{i:04d}"] = {"key": f"q{i:04d}", "length": steps, "tok": [i * 10 + s for s in range(steps)],
                            "xy": [[float(s), float(-s)] for s in range(steps)],
                            "tags": [[f"t{k}" for k in range(s % 3)] for s in range(steps)]}
    return out


def write_dataset(out_dir: str, schema: Schema, samples: dict[str, dict], *, splits: str,
                  target_shard_bytes: int, compression: Compression = Compression.NONE,
                  file_format: FileFormat = FileFormat.TFRECORD) -> str:
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create([Sample(key, values) for key, values in samples.items()])
             | WriteTFRecordDataset(out_dir, description=DatasetDescription(
                 schema=schema, name="t", compression=compression, file_format=file_format,
                 sharding=ShardingConfig(target_shard_bytes=target_shard_bytes), splits=SplitConfig.parse(splits))))
    return out_dir


@pytest.fixture(scope="session")
def jpegs(tmp_path_factory):
    """40 JPEGs (16x16) and labels of a fixed layout, in shards of a few KB: batches of 16 span shards."""
    rng = np.random.default_rng(0)

    def jpeg(pixels: np.ndarray) -> bytes:
        out = io.BytesIO()
        PILImage.fromarray(pixels).save(out, format="JPEG", quality=90)
        return out.getvalue()

    schema = Schema(features={"image": Image(ImageFormat.JPEG, (16, 16, 3)), "label": ClassLabel(("a", "b"))})
    samples = {f"k{i:02d}": {"image": jpeg(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)), "label": i % 2}
               for i in range(40)}
    return write_dataset(str(tmp_path_factory.mktemp("jpegs")), schema, samples, splits="train=1.0",
                         target_shard_bytes=8000)


@pytest.fixture(scope="session")
def all_types(tmp_path_factory) -> BuiltDataset:
    """120 samples of every feature type, in uneven shards of a few KB, split train=0.8,test=0.2."""
    samples = all_types_values(120)
    path = write_dataset(str(tmp_path_factory.mktemp("all_types")), ALL_TYPES_SCHEMA, samples,
                         splits="train=0.8,test=0.2", target_shard_bytes=9000)
    return BuiltDataset(path, samples)


@pytest.fixture(scope="session")
def sequences(tmp_path_factory) -> BuiltDataset:
    """40 SequenceExamples of 0 to 3 steps, GZIP-compressed."""
    samples = sequence_values(40)
    path = write_dataset(str(tmp_path_factory.mktemp("sequences")), SEQUENCE_SCHEMA, samples, splits="train=1.0",
                         target_shard_bytes=1000, compression=Compression.GZIP)
    return BuiltDataset(path, samples)


@pytest.fixture(scope="session")
def counted(tmp_path_factory) -> BuiltDataset:
    """1000 tiny records in ~7 uneven shards: for counting, slicing and resume tests."""
    samples = {f"r{i:05d}": {"key": f"r{i:05d}", "i": i} for i in range(1000)}
    schema = Schema(features={"key": Scalar(DType.STRING), "i": Scalar(DType.INT64)})
    path = write_dataset(str(tmp_path_factory.mktemp("counted")), schema, samples,
                         splits="train=0.7,validation=0.2,test=0.1", target_shard_bytes=5000)
    return BuiltDataset(path, samples)


@pytest.fixture(scope="session")
def counted_manifest(counted):
    return load_manifest(counted.path)


def _expected_all_types(values: dict) -> dict:
    """What a reader should return for one all-types sample (images left encoded)."""
    out = {name: np.asarray(value) for name, value in values.items()}
    out["key"] = values["key"].encode()
    out["b"] = values["b"]
    out["f"] = np.asarray(values["f"], dtype=np.float32)
    out["img"] = values["img"]
    out["opt"] = np.asarray(values.get("opt", -1))
    out["fixed_s"] = np.asarray([s.encode() for s in values["fixed_s"]], dtype=object)
    out["var_s"] = np.asarray(values["var_s"], dtype=object)
    out["label"] = np.asarray(["cat", "dog", "bird"].index(values["label"]))
    return out


def _expected_sequence(values: dict) -> dict:
    return {"key": values["key"].encode(), "length": np.asarray(values["length"]),
            "tok": np.asarray(values["tok"], dtype=np.int64).reshape(-1),
            "xy": np.asarray(values["xy"], dtype=np.float32).reshape(-1, 2),
            "tags": [[t.encode() for t in step] for step in values["tags"]]}


def assert_example_equal(got: dict, expected: dict) -> None:
    """Compares one read example with the expected values, feature by feature, dtype included."""
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        value = got[name]
        if isinstance(want, bytes):
            assert value == want, name
        elif isinstance(want, list):  # ragged steps
            assert [list(step) for step in value] == want, name
        else:
            np.testing.assert_array_equal(np.asarray(value), want, err_msg=name)
            if want.dtype != object and want.size:
                assert np.asarray(value).dtype == want.dtype, (name, np.asarray(value).dtype, want.dtype)


@pytest.fixture(scope="session")
def expected_all_types():
    return _expected_all_types


@pytest.fixture(scope="session")
def expected_sequence():
    return _expected_sequence


@pytest.fixture(scope="session")
def assert_example():
    return assert_example_equal


@pytest.fixture
def damaged_copy(counted, tmp_path):
    """A private copy of the counted dataset, and the path and bytes of its first test shard."""
    root = str(tmp_path / "copy")
    shutil.copytree(counted.path, root)
    shard = load_manifest(root).split("test").shards[0]
    path = os.path.join(root, shard.filename)
    with open(path, "rb") as handle:
        return root, path, handle.read()


KEYED_SCHEMA = Schema(features={"key": Scalar(DType.STRING), "i": Scalar(DType.INT64)})


def keyed_dataset(tmp_path_factory, prefix: str, n: int, *, schema: Schema = KEYED_SCHEMA,
                  file_format: FileFormat = FileFormat.TFRECORD) -> BuiltDataset:
    """``n`` tiny records keyed ``<prefix>00000``..., all in split train, in shards of ~40 records."""
    samples = {f"{prefix}{i:05d}": {"key": f"{prefix}{i:05d}", "i": i} for i in range(n)}
    if "i" not in schema.features:
        samples = {key: {"key": key} for key in samples}
    elif schema.features["i"] != KEYED_SCHEMA.features["i"]:
        samples = {key: {"key": key, "i": float(values["i"])} for key, values in samples.items()}
    path = write_dataset(str(tmp_path_factory.mktemp(f"keyed_{prefix}")), schema, samples, splits="train=1.0",
                         target_shard_bytes=1000, file_format=file_format)
    return BuiltDataset(path, samples)


@pytest.fixture(scope="session")
def keyed_a(tmp_path_factory) -> BuiltDataset:
    """600 TFRecord records keyed a00000...: the larger dataset of the mixing and resume tests."""
    return keyed_dataset(tmp_path_factory, "a", 600)


@pytest.fixture(scope="session")
def keyed_b(tmp_path_factory) -> BuiltDataset:
    """200 TFRecord records keyed b00000...."""
    return keyed_dataset(tmp_path_factory, "b", 200)


@pytest.fixture(scope="session")
def keyed_r(tmp_path_factory) -> BuiltDataset:
    """150 ArrayRecord records keyed r00000...: mixtures of both formats (read by DataLoader workers that do not
    inherit this process: ``fork_server``; a forked one is refused, as the formats' own test shows)."""
    return keyed_dataset(tmp_path_factory, "r", 150, file_format=FileFormat.ARRAY_RECORD)


@pytest.fixture(scope="session")
def float_i(tmp_path_factory) -> BuiltDataset:
    """10 records whose feature ``i`` is a float: not mixable with ``keyed_a``."""
    return keyed_dataset(tmp_path_factory, "f", 10, schema=Schema({"key": Scalar(DType.STRING),
                                                                   "i": Scalar(DType.FLOAT32)}))


@pytest.fixture(scope="session")
def key_only(tmp_path_factory) -> BuiltDataset:
    """10 records without feature ``i``: not mixable with ``keyed_a``."""
    return keyed_dataset(tmp_path_factory, "k", 10, schema=Schema({"key": Scalar(DType.STRING)}))

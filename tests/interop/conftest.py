"""One dataset with every feature type TFDS can express, written once per format for the session."""

from __future__ import annotations

import io

import apache_beam as beam
import numpy as np
import pytest
from PIL import Image as PILImage

from beam_tfrecord import (
    ClassLabel,
    DatasetDescription,
    DType,
    FixedList,
    Image,
    ImageFormat,
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
from beam_tfrecord.core.samples import Sample

NUM_SAMPLES = 120
SCHEMA = Schema({
    "photo": Image(ImageFormat.JPEG),  # any size and channels
    "mask": Image(ImageFormat.PNG, shape=(6, 5, 1)),
    "label": ClassLabel(("cat", "dog", "emu")),
    "count": Scalar(DType.INT64),
    "score": Scalar(DType.FLOAT32),
    "caption": Scalar(DType.STRING),
    "blob": Scalar(DType.BYTES),
    "box": FixedList(DType.FLOAT32, 4),
    "tags": VarList(DType.STRING),
    "ids": VarList(DType.INT64),
    "pixels": Tensor(TensorDType.UINT8, (2, 3, 2)),
    "depth": Tensor(TensorDType.FLOAT64, (3, 2)),
    "flags": Tensor(TensorDType.BOOL, (4,)),
})


def _encoded(array: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array).save(out, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return out.getvalue()


def make_samples(n: int = NUM_SAMPLES) -> list[Sample]:
    rng = np.random.default_rng(7)
    samples = []
    for i in range(n):
        size = (8 + i % 5, 10 + i % 3)
        photo = rng.integers(0, 255, (*size, 3) if i % 4 else size, dtype=np.uint8)  # RGB and grayscale
        samples.append(Sample(f"s{i:04d}", {
            "photo": _encoded(photo, "JPEG"),
            "mask": _encoded(rng.integers(0, 255, (6, 5), dtype=np.uint8), "PNG"),
            "label": i % 3,
            "count": int(rng.integers(-1000, 1000)),
            "score": float(rng.random()),
            "caption": f"sample {i} ✓",
            "blob": bytes(rng.integers(0, 255, i % 7, dtype=np.uint8)),
            "box": rng.random(4).tolist(),
            "tags": [f"t{j}" for j in range(i % 4)],
            "ids": list(range(i % 5)),
            "pixels": rng.integers(0, 255, (2, 3, 2), dtype=np.uint8),
            "depth": rng.random((3, 2)),
            "flags": rng.random(4) > 0.5,
        }))
    return samples


def write_dataset(out: str, file_format: FileFormat, samples: list[Sample] | None = None,
                  schema: Schema = SCHEMA, *, dali_index: bool = False) -> str:
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create(samples if samples is not None else make_samples())
             | WriteTFRecordDataset(out, description=DatasetDescription(
                 schema=schema, file_format=file_format, dali_index=dali_index,
                 splits=SplitConfig.parse("train=0.75,test=0.25"), sharding=ShardingConfig(target_shard_bytes=8_000))))
    return out


@pytest.fixture(scope="session")
def tfrecord_dataset(tmp_path_factory) -> str:
    return write_dataset(str(tmp_path_factory.mktemp("interop") / "tfrecord"), FileFormat.TFRECORD)


@pytest.fixture(scope="session")
def array_record_dataset(tmp_path_factory) -> str:
    return write_dataset(str(tmp_path_factory.mktemp("interop") / "array_record"), FileFormat.ARRAY_RECORD)


@pytest.fixture(scope="session")
def dali_dataset(tmp_path_factory) -> str:
    """The TFRecord dataset written with a DALI index beside each shard."""
    return write_dataset(str(tmp_path_factory.mktemp("interop") / "dali"), FileFormat.TFRECORD, dali_index=True)

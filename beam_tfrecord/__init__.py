"""beam-tfrecord: build size-balanced TFRecord datasets with Apache Beam, and read them back.

``read_dataset`` is loaded lazily, so writing a dataset never imports TensorFlow.
"""

from __future__ import annotations

from typing import Any

from beam_tfrecord._version import __version__
from beam_tfrecord.beam.write import WriteTFRecordDataset
from beam_tfrecord.core.manifest import MANIFEST_VERSION, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.naming import Compression
from beam_tfrecord.core.plan import ShardingConfig, SplitConfig, SplitSpec
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample
from beam_tfrecord.core.schema import (ClassLabel, DType, FixedList, Image, ImageFormat, Scalar, Schema, Tensor,
                                       TensorDType, VarList)
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.sources.image_folder import ReadImageFolder
from beam_tfrecord.verify import verify_dataset

__all__ = [
    "ClassLabel", "Compression", "DType", "DeadLetter", "FileRef", "FixedList", "Image", "ImageFormat",
    "MANIFEST_VERSION", "Manifest", "ReadImageFolder", "Sample", "Scalar", "Schema", "ShardInfo",
    "ShardingConfig", "SplitConfig", "SplitInfo", "SplitSpec", "Tensor", "TensorDType", "VarList",
    "WriteTFRecordDataset", "__version__", "load_manifest", "read_dataset", "verify_dataset",
]


def __getattr__(name: str) -> Any:
    if name == "read_dataset":
        from beam_tfrecord.reader.tf_data import read_dataset

        return read_dataset
    raise AttributeError(f"module 'beam_tfrecord' has no attribute {name!r}")

"""beam-tfrecord: build size-balanced TFRecord datasets with Apache Beam, and read them back.

``read_dataset`` (TensorFlow) and ``TFRecordIterableDataset`` (PyTorch) are loaded lazily, so writing
a dataset never imports TensorFlow and the NumPy reader needs neither.
"""

from __future__ import annotations

from typing import Any

from beam_tfrecord._version import __version__
from beam_tfrecord.beam.write import WriteTFRecordDataset
from beam_tfrecord.core.manifest import MANIFEST_VERSION, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.image_ops import ResizeImage, ResizeMethod
from beam_tfrecord.core.infer import infer_array_schema, infer_schema
from beam_tfrecord.core.naming import Compression
from beam_tfrecord.core.plan import ShardingConfig, SplitConfig, SplitSpec
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample
from beam_tfrecord.core.schema import (ClassLabel, DType, FixedList, Image, ImageFormat, Scalar, Schema, Tensor,
                                       TensorDType, VarList)
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import MissingShardError, ReaderError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.options import ImageDecoding, PixelType, VarLen
from beam_tfrecord.reader.read_plan import num_examples
from beam_tfrecord.sources.arrays import ReadNumpyFiles, SamplesFromArrays, SamplesFromIterable
from beam_tfrecord.sources.audio import ReadAudioFiles, audio_class_names, audio_schema
from beam_tfrecord.sources.image_folder import ReadImageFolder
from beam_tfrecord.sources.parquet import ReadParquetManifest
from beam_tfrecord.sources.rows import RowOptions
from beam_tfrecord.sources.tabular import ReadCsvManifest, ReadJsonlManifest
from beam_tfrecord.sources.text import ReadTextFiles, TextUnit, text_schema
from beam_tfrecord.verify import verify_dataset

__all__ = [
    "ClassLabel", "Compression", "DType", "DeadLetter", "FileRef", "FixedList", "Image", "ImageFormat",
    "ImageDecoding", "MANIFEST_VERSION", "Manifest", "MissingShardError", "PixelType", "ReadAudioFiles", "ReadCsvManifest", "ReadImageFolder", "ReadJsonlManifest",
    "ReadNumpyFiles", "ReadParquetManifest", "ReadTextFiles", "ReaderError", "ResizeImage", "ResizeMethod", "RowOptions", "Sample",
    "SamplesFromArrays", "SamplesFromIterable", "Scalar", "Schema", "ShardInfo", "ShardingConfig", "SplitConfig",
    "SplitInfo", "SplitSpec", "TFRecordIterableDataset", "Tensor", "TensorDType", "TextUnit", "VarLen", "VarList",
    "WriteTFRecordDataset", "__version__", "audio_class_names", "audio_schema", "infer_array_schema", "infer_schema",
    "collate", "load_manifest", "num_examples", "read_dataset", "read_numpy", "text_schema", "verify_dataset",
]


def __getattr__(name: str) -> Any:
    if name in ("read_dataset", "TFRecordIterableDataset", "collate"):
        from beam_tfrecord import reader  # loads TensorFlow or PyTorch lazily, on first use

        return getattr(reader, name)
    raise AttributeError(f"module 'beam_tfrecord' has no attribute {name!r}")

"""beam-tfrecord: build size-balanced TFRecord datasets with Apache Beam, and read them back.

The writer and the sources (Apache Beam), ``read_dataset`` (TensorFlow) and
``TFRecordIterableDataset`` (PyTorch) are loaded lazily: writing a dataset never imports
TensorFlow, and the NumPy and PyTorch readers need neither Beam nor TensorFlow installed.
"""

from __future__ import annotations

import importlib
from typing import Any

from beam_tfrecord._version import __version__
from beam_tfrecord.beam.tuning import FanIn, WriterTuning
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.image_ops import ResizeImage, ResizeMethod
from beam_tfrecord.core.infer import infer_array_schema, infer_schema
from beam_tfrecord.core.manifest import MANIFEST_VERSION, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.sample_encoder import image_format_of
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample
from beam_tfrecord.core.schema import (
    ClassLabel,
    DType,
    FixedList,
    Image,
    ImageFormat,
    Scalar,
    Schema,
    Tensor,
    TensorDType,
    VarList,
)
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig, SplitSpec
from beam_tfrecord.dataset import load_manifest, resolve_dataset_dir
from beam_tfrecord.errors import IncompatibleSchemasError, MissingShardError, ReaderError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.options import ImageDecoding, PixelType, VarLen
from beam_tfrecord.reader.order.mixing import num_examples
from beam_tfrecord.remote_reads.options import RemoteReads
from beam_tfrecord.storage.deadlines import StoreDeadlines
from beam_tfrecord.verify import verify_dataset

# Names whose modules need Apache Beam, TensorFlow or PyTorch: imported on first use, so that
# reading with NumPy or PyTorch needs neither Beam nor TensorFlow installed.
_LAZY = {
    "WriteTFRecordDataset": "beam_tfrecord.beam.write",
    "VersionRetention": "beam_tfrecord.beam.write_options",
    "WriterChecks": "beam_tfrecord.beam.write_options",
    "WriterProvenance": "beam_tfrecord.beam.write_options",
    "WriteBalancedTFRecord": "beam_tfrecord.beam.write_balanced",
    "Payload": "beam_tfrecord.beam.serialized_records",
    "ReadTFRecordDataset": "beam_tfrecord.beam.read_dataset",
    "RecordOutput": "beam_tfrecord.beam.read_dataset",
    "ReadNumpyFiles": "beam_tfrecord.sources.arrays",
    "SamplesFromArrays": "beam_tfrecord.sources.arrays",
    "SamplesFromIterable": "beam_tfrecord.sources.arrays",
    "ReadAudioFiles": "beam_tfrecord.sources.audio",
    "audio_class_names": "beam_tfrecord.sources.audio",
    "audio_schema": "beam_tfrecord.sources.audio",
    "ReadImageFolder": "beam_tfrecord.sources.image_folder",
    "ReadParquetManifest": "beam_tfrecord.sources.parquet",
    "RowOptions": "beam_tfrecord.sources.rows",
    "ReadCsvManifest": "beam_tfrecord.sources.tabular",
    "ReadJsonlManifest": "beam_tfrecord.sources.tabular",
    "ReadTextFiles": "beam_tfrecord.sources.text",
    "TextUnit": "beam_tfrecord.sources.text",
    "text_schema": "beam_tfrecord.sources.text",
    "read_dataset": "beam_tfrecord.reader.tf_data",
    "TFRecordIterableDataset": "beam_tfrecord.reader.torch_dataset",
    "collate": "beam_tfrecord.reader.torch_dataset",
}

__all__ = [
    "MANIFEST_VERSION",
    "ClassLabel",
    "Compression",
    "DType",
    "DatasetDescription",
    "DeadLetter",
    "FanIn",
    "FileFormat",
    "FileRef",
    "FixedList",
    "Image",
    "ImageDecoding",
    "ImageFormat",
    "IncompatibleSchemasError",
    "Manifest",
    "MissingShardError",
    "Payload",
    "PixelType",
    "ReadAudioFiles",
    "ReadCsvManifest",
    "ReadImageFolder",
    "ReadJsonlManifest",
    "ReadNumpyFiles",
    "ReadParquetManifest",
    "ReadTFRecordDataset",
    "ReadTextFiles",
    "ReaderError",
    "RecordOutput",
    "RemoteReads",
    "ResizeImage",
    "ResizeMethod",
    "RowOptions",
    "Sample",
    "SamplesFromArrays",
    "SamplesFromIterable",
    "Scalar",
    "Schema",
    "ShardInfo",
    "ShardingConfig",
    "SplitConfig",
    "SplitInfo",
    "SplitSpec",
    "StoreDeadlines",
    "TFRecordIterableDataset",
    "Tensor",
    "TensorDType",
    "TextUnit",
    "VarLen",
    "VarList",
    "VersionRetention",
    "WriteBalancedTFRecord",
    "WriteTFRecordDataset",
    "WriterChecks",
    "WriterProvenance",
    "WriterTuning",
    "__version__",
    "audio_class_names",
    "audio_schema",
    "collate",
    "image_format_of",
    "infer_array_schema",
    "infer_schema",
    "load_manifest",
    "num_examples",
    "read_dataset",
    "read_numpy",
    "resolve_dataset_dir",
    "text_schema",
    "verify_dataset",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'beam_tfrecord' has no attribute {name!r}")

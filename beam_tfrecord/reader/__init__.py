"""Readers: a published dataset back into batches, for tf.data, NumPy and PyTorch.

All three read the same records for the same split expression and worker, planned from the
manifest's per-shard counts (``read_plan``). TensorFlow and PyTorch are imported only when
``read_dataset`` or ``TFRecordIterableDataset`` is first used.
"""

from __future__ import annotations

from typing import Any

from beam_tfrecord.reader.decode.ragged import RaggedArray
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.options import ImageDecoding, PixelType, VarLen
from beam_tfrecord.reader.order.mixing import num_examples
from beam_tfrecord.reader.order.read_plan import ReadPlan, plan_read
from beam_tfrecord.reader.order.slicing import parse_split
from beam_tfrecord.remote_reads.options import RemoteReads

__all__ = ["ImageDecoding", "PixelType", "RaggedArray", "RaggedBatch", "ReadPlan", "RemoteReads",
           "TFRecordIterableDataset", "VarLen", "collate", "num_examples", "parse_split", "plan_read", "read_dataset",
           "read_numpy"]


def __getattr__(name: str) -> Any:
    if name == "read_dataset":
        from beam_tfrecord.reader.tf_data import read_dataset

        return read_dataset
    if name in ("TFRecordIterableDataset", "collate"):
        from beam_tfrecord.reader import torch_dataset

        return getattr(torch_dataset, name)
    if name == "RaggedBatch":
        from beam_tfrecord.reader.torch_batches import RaggedBatch

        return RaggedBatch
    raise AttributeError(f"module 'beam_tfrecord.reader' has no attribute {name!r}")

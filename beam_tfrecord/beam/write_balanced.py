"""WriteBalancedTFRecord: the drop-in for ``beam.io.WriteToTFRecord``, with size-balanced shards and a manifest.

``WriteToTFRecord(prefix, num_shards=N)`` has no size control and puts every record through a GroupByKey; this
writes the same records through ``WriteTFRecordDataset`` (only the encode stage differs: ``serialized_records``)
and publishes the schema every record fits (``beam_tfrecord.core.record_schema``). Limits: the output is a dataset
directory, not a file prefix; compression is none or GZIP (TFDS reads uncompressed shards only); SequenceExample
records are read back by this project's readers, not TFDS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apache_beam as beam

from beam_tfrecord.beam.batch_input import require_bounded
from beam_tfrecord.beam.serialized_records import KeyFn, Payload, RecordsEncoding, check_key_fn
from beam_tfrecord.beam.tuning import WriterTuning
from beam_tfrecord.beam.write import DEFAULT_SALT, WriteTFRecordDataset
from beam_tfrecord.core.naming import Compression
from beam_tfrecord.core.record_schema import RAW_FEATURE
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.core.sharding import DEFAULT_TARGET_SHARD_BYTES, ShardingConfig, SplitConfig
from beam_tfrecord.errors import ShardingError, WriterOptionError

# The schema of raw payloads, and of a dataset of no record (what an empty one is published with).
RAW_SCHEMA = Schema({RAW_FEATURE: Scalar(DType.BYTES)})
# Beam's compression names (``apache_beam.io.filesystem.CompressionTypes``, plain strings) that a
# TFRecord reader opens; AUTO means "from the file name", and shard names here have no suffix to go by.
_BEAM_COMPRESSION = {"auto": Compression.NONE, "uncompressed": Compression.NONE, "gzip": Compression.GZIP}
# With num_shards and no max_shard_bytes, a shard may be as large as the data needs (WriteToTFRecord's
# behaviour); still a cap, so that a single oversized record is refused rather than planned.
_NUM_SHARDS_CAP_BYTES = 1 << 40


def parse_compression(compression_type: str | Compression) -> Compression:
    """``Compression``, or Beam's ``CompressionTypes`` name (``auto``, ``uncompressed``, ``gzip``)."""
    if isinstance(compression_type, Compression):
        return compression_type
    found = _BEAM_COMPRESSION.get(str(compression_type).strip().lower()) if isinstance(compression_type, str) else None
    if found is None:
        raise WriterOptionError(f"compression_type must be a Compression or one of {sorted(_BEAM_COMPRESSION)} "
                                f"(Beam's CompressionTypes that TFRecord readers open), got {compression_type!r}")
    return found


def sharding_of(*, num_shards: int, target_shard_bytes: int, max_shard_bytes: int | None) -> ShardingConfig:
    """WriteToTFRecord's ``num_shards`` (0: sized by bytes) with the byte targets, as a ``ShardingConfig``."""
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 0:
        raise ShardingError(f"num_shards must be an int >= 0 (0: as many as target_shard_bytes gives), "
                            f"got {num_shards!r}")
    if num_shards and max_shard_bytes is None:
        max_shard_bytes = max(_NUM_SHARDS_CAP_BYTES, target_shard_bytes)
    return ShardingConfig(target_shard_bytes=target_shard_bytes, max_shard_bytes=max_shard_bytes,
                          num_shards=num_shards or None)


class WriteBalancedTFRecord(beam.PTransform):
    """Writes serialized records (or ``tf.train.Example`` protos) as a dataset of size-balanced shards.

    Input: a PCollection of ``bytes`` (serialized ``Example``/``SequenceExample``, or any payload)
    or of protobuf messages such as ``tf.train.Example`` (serialized deterministically; bytes need
    no TensorFlow on the workers), bounded, in any windows (written as one dataset; an unbounded
    input is an ``UnboundedInputError`` when the pipeline is built). Output: a PCollection holding
    the published ``Manifest``.

    Records that are Examples (or SequenceExamples) are written byte for byte, and the manifest's
    schema is inferred from all of them; other records are raw payloads, each stored inside an
    Example with one bytes feature ``record`` (what every reader then returns). See
    ``beam_tfrecord.core.record_schema`` for the inference rules.

    Args:
        output_dir: dataset directory (local or ``gs://``); WriteToTFRecord's prefix becomes a folder.
        num_shards: shards per split, as WriteToTFRecord's; 0 (its default) sizes them by
            ``target_shard_bytes`` (at least one). With a count and no ``max_shard_bytes`` shards are
            not capped. As WriteToTFRecord writes ``num_shards`` files, so does this, whatever the
            input: the shards the records cannot fill (no input, fewer records than shards, a
            record larger than a shard's share) are empty files, and a warning says so.
        compression_type: ``Compression`` or Beam's ``CompressionTypes`` name: ``auto`` (uncompressed:
            shard names carry no suffix), ``uncompressed`` or ``gzip``.
        target_shard_bytes: aim for shards of about this many (uncompressed, framed) bytes.
        max_shard_bytes: hard cap per shard (default twice the target); a larger record is a dead letter.
        key_fn: the element's stable key (``element -> str``): it decides the record's split and
            place. None places records by a salted hash of their bytes (equal records together).
        splits: ``SplitConfig`` or its text (``train=0.9,test=0.1``); default all in ``train``.
        salt: hash salt; the same salt and keys give the same splits and order.
        payload: what the records are (``Payload.AUTO``: Examples kept, anything else raw).
        dataset_name: the name in shard file names (and TFDS's dataset name).
        max_rejected_fraction: fail (and do not publish) when more than this fraction of records is
            rejected (another element type, a record over the cap, a failing ``key_fn``).
        metadata: extra facts to record in the manifest.
        dali_index: also write each shard's NVIDIA DALI index (``<shard>.idx``, listed in the
            manifest), as ``WriteTFRecordDataset``'s; uncompressed shards only (``WriterOptionError``).
        tuning: how the write runs (memory, processes, I/O, temp folder, shared filesystem;
            ``WriterTuning``), as ``WriteTFRecordDataset``'s. It never changes the bytes written.

    Raises:
        WriterOptionError, ShardingError: at construction, for options out of range.
        RecordSchemaError: when the job publishes, for Examples that share no schema (a feature
            holding int64 values in some records and floats in others); nothing is published.
    """

    def __init__(self, output_dir: str, *, num_shards: int = 0, compression_type: str | Compression = "auto",
                 target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES, max_shard_bytes: int | None = None,
                 key_fn: KeyFn | None = None, splits: SplitConfig | str | None = None, salt: str = DEFAULT_SALT,
                 payload: Payload = Payload.AUTO, dataset_name: str = "data", max_rejected_fraction: float = 0.0,
                 metadata: Mapping[str, Any] | None = None, dali_index: bool = False,
                 tuning: WriterTuning | None = None) -> None:
        super().__init__()
        if not isinstance(payload, Payload):
            raise WriterOptionError(f"payload must be a Payload ({[p.name for p in Payload]}), got {payload!r}")
        if not isinstance(splits, (SplitConfig, str, type(None))):
            raise WriterOptionError(f"splits must be a SplitConfig or its text, got {splits!r}")
        self._write = WriteTFRecordDataset(
            output_dir, schema=RAW_SCHEMA, dataset_name=dataset_name,
            splits=SplitConfig.parse(splits) if isinstance(splits, str) else splits,
            sharding=sharding_of(num_shards=num_shards, target_shard_bytes=target_shard_bytes,
                                 max_shard_bytes=max_shard_bytes),
            compression=parse_compression(compression_type), salt=salt,
            max_rejected_fraction=max_rejected_fraction, metadata=metadata, dali_index=dali_index,
            command=("WriteBalancedTFRecord",), encoding=RecordsEncoding(payload, check_key_fn(key_fn)),
            tuning=tuning)

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        require_bounded(records, writer=type(self).__name__)
        return records | "WriteDataset" >> self._write

"""WriteBalancedTFRecord: the drop-in for ``beam.io.WriteToTFRecord``, with size-balanced shards and a manifest.

It takes ``WriteToTFRecord``'s whole signature and writes the same files under the same names (``beam_names``;
``output_dir=`` writes a dataset directory instead), through ``WriteTFRecordDataset``: only the encode stage differs
(``serialized_records``), and the published schema is the one every record fits (``core.record_schema``). See
docs/inputs.md, "From a pipeline that ends in beam.io.WriteToTFRecord".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apache_beam as beam

from beam_tfrecord.beam.batch_input import require_bounded
from beam_tfrecord.beam.beam_names import (
    PrefixLayout,
    check_output_free,
    compression_of,
    encoder_of,
    prefix_layout,
    streaming_template,
    window_template_error,
)
from beam_tfrecord.beam.pane_commit import PaneCommitSettings
from beam_tfrecord.beam.prefix_publish import publish_under_prefix
from beam_tfrecord.beam.serialized_records import KeyFn, Payload, RecordsEncoding, check_key_fn
from beam_tfrecord.beam.tuning import WriterTuning
from beam_tfrecord.beam.windowed_write import WriteWindowedTFRecord
from beam_tfrecord.beam.write import WriteTFRecordDataset
from beam_tfrecord.beam.write_options import WriterChecks, WriterProvenance
from beam_tfrecord.core.description import DEFAULT_DATASET_NAME, DEFAULT_SALT, DatasetDescription
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.record_schema import PAYLOAD_METADATA_KEY, RAW_FEATURE
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.core.sharding import DEFAULT_TARGET_SHARD_BYTES, ShardingConfig, SplitConfig
from beam_tfrecord.engine.worker_placement import require_pipeline_paths
from beam_tfrecord.errors import WriterOptionError
from beam_tfrecord.quality.content import DuplicatesCheck, DuplicatesMode
from beam_tfrecord.quality.split_groups import RecordGroupPlacement, SplitKeyFn

# The schema of raw payloads, and of a dataset of no record (what an empty one is published with).
RAW_SCHEMA = Schema({RAW_FEATURE: Scalar(DType.BYTES)})
def _duplicates_check(duplicates: DuplicatesCheck | DuplicatesMode | str | None, key_fn: KeyFn | None,
                      payload: Payload) -> DuplicatesCheck | None:
    """The drop-in's duplicates check: features left out only of Examples; ``drop`` needs keys."""
    if duplicates is None:
        return None
    check = duplicates if isinstance(duplicates, DuplicatesCheck) else DuplicatesCheck(DuplicatesMode.parse(duplicates))
    if check.excluded and payload is not Payload.EXAMPLE:
        raise WriterOptionError(f"duplicates: excluded features {list(check.excluded)} need payload=Payload.EXAMPLE "
                                f"(every record an Example), got {payload}")
    if check.mode is DuplicatesMode.DROP and key_fn is None:
        raise WriterOptionError("duplicates='drop' needs key_fn: without keys, equal records share their key "
                                "hash and one cannot be kept apart from the others")
    return check


def _streaming_layout(file_path_prefix: str | None, *, file_name_suffix: str, shard_name_template: str | None,
                      unsupported: Mapping[str, Any], splits: SplitConfig) -> PrefixLayout | WriterOptionError | None:
    """Where each pane of an unbounded input is committed (``beam/windowed_write.py``), or the error an unbounded
    input gets (raised only then), or None (``output_dir``: its writer refuses an unbounded input)."""
    if file_path_prefix is None:
        return None
    given = sorted(name for name, value in unsupported.items() if value is not None)
    template = streaming_template(shard_name_template)
    if template is None:
        return WriterOptionError(f"shard_name_template {shard_name_template!r}: an unbounded input (a streaming "
                                 "write) needs the window in its names (W or V, as '-W-SSSSS-of-NNNNN'): every "
                                 "window would take the same names")
    if given:
        return WriterOptionError(f"{', '.join(given)}: an unbounded input (a streaming write) is written under a "
                                 "file_path_prefix, without these (see docs/streaming.md)")
    return prefix_layout(file_path_prefix, file_name_suffix=file_name_suffix, shard_name_template=template,
                         splits=splits, windowed=True)


class WriteBalancedTFRecord(beam.PTransform):
    """Writes serialized records (or ``tf.train.Example`` protos) as size-balanced shards with a manifest.

    ``WriteToTFRecord``'s arguments (positional or keyword) mean what they mean there, and the shards
    carry the names it gives them (``PREFIX-00000-of-00004``), so every consumer's ``PREFIX-*`` keeps
    working; the manifest goes to ``FOLDER/.PREFIX.beam-tfrecord/``, which that glob does not match, and
    every reader of this project opens the dataset from the prefix. ``output_dir=`` writes a dataset
    directory instead (shards ``NAME-SPLIT.tfrecord-SSSSS-of-NNNNN``, TFDS's metadata).

    Input: a PCollection of ``bytes`` or protobuf messages (serialized deterministically), or of any
    element ``coder`` encodes; bounded, in any windows (one dataset of all of them; an unbounded input
    is an ``UnboundedInputError`` when the pipeline is built). Output: a PCollection holding the
    published ``Manifest``. The manifest's schema is inferred from the records that are Examples
    (``beam_tfrecord.core.record_schema``); see ``payload`` for the others.

    Args:
        file_path_prefix: the files' prefix, as WriteToTFRecord's (local or ``gs://``). Its folder
            must not be a file, and no file another job wrote may hold a name its shards take
            (``OutputPathError``, at construction).
        coder: encodes each element into its record (``ProtoCoder(tf.train.Example)``); None or
            ``BytesCoder`` (Beam's default) takes bytes and protobuf messages as they are.
        file_name_suffix: the shards' suffix (``.tfrecord.gz``).
        num_shards: shards per split; 0 (the default) sizes them by ``target_shard_bytes``. With a
            count and no ``max_shard_bytes`` shards are not capped; shards the records cannot fill
            are empty files (a warning says so), as WriteToTFRecord writes ``num_shards`` files.
        shard_name_template: Beam's (None: ``-SSSSS-of-NNNNN``; ``''``: one file named by the prefix
            and suffix). ``W`` and ``V`` (windows of a streaming write) are refused for a bounded input.
        compression_type: ``Compression`` or Beam's ``CompressionTypes`` name: ``auto`` (from the
            shards' names: ``.gz`` GZIP, ``.deflate`` ZLIB), ``uncompressed``, ``gzip``, ``deflate``.
        triggering_frequency: WriteToTFRecord's: seconds; an unbounded input is put in fixed windows of
            this length, each pane one commit (None keeps the input's windowing, which must not be the
            global window); like Beam, it changes nothing for a bounded one.
        output_dir: a dataset directory to write instead of files under a prefix (not with
            ``file_name_suffix`` or ``shard_name_template``).
        target_shard_bytes: aim for shards of about this many (uncompressed, framed) bytes.
        max_shard_bytes: hard cap per shard (default twice the target); a larger record is a dead letter.
        key_fn: the element's stable key (``element -> str``): it decides the record's split and
            place. None places records by a salted hash of their bytes (equal records together).
        splits: ``SplitConfig`` or its text (``train=0.9,test=0.1``); default all in ``train``. Under a
            prefix with several splits, names carry the split (``PREFIX-train-00000-of-00004``).
        salt: hash salt; the same salt and keys give the same splits and order.
        payload: what the records are. None: ``Payload.VERBATIM`` under a prefix (every record
            written byte for byte, as WriteToTFRecord does), ``Payload.AUTO`` in ``output_dir``
            (other records than Examples stored inside an Example with one bytes feature ``record``).
        dataset_name: the name in the manifest (and in ``output_dir``'s shard names and TFDS's metadata).
        max_rejected_fraction: fail (and do not publish) when more than this fraction of records is
            rejected (another element type, a record over the cap, a failing ``key_fn``).
        metadata: extra facts to record in the manifest.
        dali_index: also write each shard's NVIDIA DALI index (``<shard>.idx``, listed in the
            manifest); ``output_dir`` and uncompressed shards only (``WriterOptionError``: beside a
            prefix, ``PREFIX-*`` would match the index files).
        statistics: write ``statistics.pb`` (``DatasetDescription.statistics``); False writes none.
        tuning: how the write runs (memory, processes, I/O, temp folder, shared filesystem;
            ``WriterTuning``), as ``WriteTFRecordDataset``'s. It never changes the bytes written; its
            ``temp_dir`` defaults to a hidden folder beside the output.
        duplicates: check exact duplicates, by a hash of each whole record: ``"report"`` counts them
            (manifest ``duplicates``), ``"fail"`` publishes nothing (``DuplicatesFoundError``), ``"drop"``
            keeps the record of smallest key hash of each group (needs ``key_fn``). A ``DuplicatesCheck``
            may leave features out of the hash (an id feature ``key_fn`` reads; ``Payload.EXAMPLE``).
        split_key_fn: the element -> its group (str or bytes: a user or patient id feature it reads, as
            ``key_fn`` reads the key): the splits hash it instead of the key, so every record of a group
            lands in one split (ratio splits); the manifest's ``split_by`` names the function. A record it
            fails on, or whose group is of another type, is a dead letter naming the record.

    Raises:
        WriterOptionError, ShardingError: at construction, naming the argument out of range.
        OutputPathError: at construction, for a prefix whose folder is a file or files in the way.
        RecordSchemaError: when the job publishes, for Examples that share no schema (a feature
            holding int64 values in some records and floats in others); nothing is published.
    """

    def __init__(self, file_path_prefix: str | None = None, coder: beam.coders.Coder | None = None,
                 file_name_suffix: str = "", num_shards: int = 0, shard_name_template: str | None = None,
                 compression_type: str | Compression = "auto", triggering_frequency: int | None = None, *,
                 output_dir: str | None = None,
                 target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES, max_shard_bytes: int | None = None,
                 key_fn: KeyFn | None = None, splits: SplitConfig | str | None = None, salt: str = DEFAULT_SALT,
                 payload: Payload | None = None, dataset_name: str = DEFAULT_DATASET_NAME,
                 max_rejected_fraction: float = 0.0, metadata: Mapping[str, Any] | None = None,
                 dali_index: bool = False, statistics: bool = True, tuning: WriterTuning | None = None,
                 duplicates: DuplicatesCheck | DuplicatesMode | str | None = None,
                 split_key_fn: SplitKeyFn | None = None) -> None:
        super().__init__()
        if (file_path_prefix is None) == (output_dir is None):
            raise WriterOptionError(f"give file_path_prefix (files named as WriteToTFRecord names them) or "
                                    f"output_dir (a dataset directory), one of them; got {file_path_prefix!r} "
                                    f"and {output_dir!r}")
        if not isinstance(payload, (Payload, type(None))):
            raise WriterOptionError(f"payload must be a Payload ({[p.name for p in Payload]}), got {payload!r}")
        if not isinstance(splits, (SplitConfig, str, type(None))):
            raise WriterOptionError(f"splits must be a SplitConfig or its text, got {splits!r}")
        if triggering_frequency is not None and (isinstance(triggering_frequency, bool) or not isinstance(
                triggering_frequency, (int, float)) or triggering_frequency <= 0):
            raise WriterOptionError(f"triggering_frequency must be a number of seconds > 0 or None, got "
                                    f"{triggering_frequency!r}")
        split_config = (SplitConfig.parse(splits) if isinstance(splits, str) else splits) or SplitConfig.single()
        self._encode = encoder_of(coder)
        self._shared_filesystem = isinstance(tuning, WriterTuning) and tuning.shared_filesystem  # else: its error
        # Under a prefix: the dataset is written into its staging folder, then takes Beam's names beside it.
        self._layout = None
        target_dir = output_dir or ""
        if file_path_prefix is not None:
            if dali_index:
                raise WriterOptionError("dali_index: beside a file_path_prefix, PREFIX-* would match the index "
                                        "files (<shard>.idx); write them with output_dir=")
            self._layout = prefix_layout(file_path_prefix, file_name_suffix=file_name_suffix,
                                         shard_name_template=shard_name_template, splits=split_config)
            if shard_name_template == "" and num_shards not in (0, 1):
                raise WriterOptionError(f"num_shards: shard_name_template '' names one file, got num_shards "
                                        f"{num_shards!r}")
            check_output_free(self._layout)
            target_dir = self._layout.staging_dir
        elif file_name_suffix or shard_name_template is not None:
            raise WriterOptionError("file_name_suffix and shard_name_template name files under a file_path_prefix; "
                                    "output_dir's shards are named NAME-SPLIT.tfrecord-SSSSS-of-NNNNN")
        self._window_error = window_template_error(shard_name_template)
        payload = payload or (Payload.AUTO if self._layout is None else Payload.VERBATIM)
        check = _duplicates_check(duplicates, key_fn, payload)
        sharding = ShardingConfig.of_beam_count(num_shards, target_shard_bytes=target_shard_bytes,
                                                max_shard_bytes=max_shard_bytes)
        compression = compression_of(compression_type, self._layout)
        recorded = {**(metadata or {}), PAYLOAD_METADATA_KEY: payload.value}  # in every manifest
        self._frequency = triggering_frequency
        stream_layout = _streaming_layout(
            file_path_prefix, file_name_suffix=file_name_suffix, shard_name_template=shard_name_template,
            unsupported={"output_dir": output_dir, "duplicates": duplicates, "split_key_fn": split_key_fn},
            splits=split_config)
        self._streaming = stream_layout if not isinstance(stream_layout, PrefixLayout) else PaneCommitSettings(
            layout=stream_layout, description=DatasetDescription(
                schema=RAW_SCHEMA, name=dataset_name, splits=split_config, sharding=sharding, compression=compression,
                salt=salt, statistics=False),
            payload=payload, key_fn=check_key_fn(key_fn), max_rejected_fraction=max_rejected_fraction,
            metadata=recorded, command=("WriteBalancedTFRecord",), empty_schema=RAW_SCHEMA)
        placement = None  # a bad split_key_fn, or splits that are not ratios: WriteTFRecordDataset's error
        if callable(split_key_fn) and split_config.is_ratio:
            placement = RecordGroupPlacement(split_key_fn, salt=salt,
                                             split_starts=[lo for _, lo, _ in split_config.ratio_bounds()])
        self._write = WriteTFRecordDataset(
            target_dir, description=DatasetDescription(
                schema=RAW_SCHEMA, name=dataset_name, splits=split_config,
                sharding=sharding, compression=compression, salt=salt, dali_index=dali_index,
                statistics=statistics),
            checks=WriterChecks(max_rejected_fraction=max_rejected_fraction, duplicates=check,
                                split_key_fn=split_key_fn),  # the writer checks split_key_fn, names it
            provenance=WriterProvenance(metadata=recorded,
                                        command=("WriteBalancedTFRecord",)),
            encoding=RecordsEncoding(payload, check_key_fn(key_fn), placement), tuning=tuning)

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        if isinstance(self._streaming, WriterOptionError) and not records.is_bounded:
            raise self._streaming
        if not isinstance(self._streaming, PaneCommitSettings):  # output_dir: one dataset of a bounded input
            require_bounded(records, writer=type(self).__name__)
        if self._layout is not None:  # named as the caller gave it, before the writer names its staging folder
            require_pipeline_paths(records.pipeline, {"file_path_prefix": self._layout.file_path_prefix},
                                   shared_filesystem=self._shared_filesystem,
                                   declare="tuning=WriterTuning(shared_filesystem=True)")
        if self._window_error is not None and records.is_bounded:
            raise self._window_error
        if self._encode is not None:
            records = records | "Encode" >> beam.Map(self._encode)  # bytes, as the coder gives them
        if isinstance(self._streaming, PaneCommitSettings) and not records.is_bounded:
            return records | "WritePanes" >> WriteWindowedTFRecord.under_prefix(
                self._streaming, triggering_frequency=self._frequency)
        manifest = records | "WriteDataset" >> self._write
        if self._layout is None:
            return manifest
        return manifest | "PublishUnderPrefix" >> beam.Map(publish_under_prefix, self._layout)

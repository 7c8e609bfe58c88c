"""Shard writing for both fan-in paths: entries in (hash, content) order -> one shard file, checked against the plan.

Entries sort the same way on both paths, so the files are equal.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterable, Mapping

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.beam.shard_statistics import BYTES_PER_SUMMARY, ShardStatistics
from beam_tfrecord.core.dali_index import dali_index_name
from beam_tfrecord.core.file_format import DEFAULT_FILE_FORMAT, Compression, FileFormat
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.naming import ShardName
from beam_tfrecord.core.pieces import PIECES_COUNTER, PieceSpec
from beam_tfrecord.core.runs import ENTRY_HEADER_BYTES, HASH_BYTES, RECORD, entry_reference
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.encoding.records import FeatureTransform, RecordBuilder
from beam_tfrecord.errors import CorruptShardError, InputChangedError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.formats.base import ShardWriter
from beam_tfrecord.interop.dali import DaliIndexingWriter
from beam_tfrecord.job.progress import ProgressSink
from beam_tfrecord.reader.decode.block_decode import BlockDecoder
from beam_tfrecord.spill.resume import finished_shard, record_finished_shard
from beam_tfrecord.storage import direct_io
from beam_tfrecord.storage.disk_space import raise_typed_when_full


@dataclasses.dataclass(frozen=True)
class ShardTarget:
    """Where one planned shard is written, and under which name it is published.

    Attributes:
        spec: the planned shard (split, index, hash range, expected records and bytes).
        filename: final file name in the dataset directory.
        temp_path: where to write it before publication.
    """

    spec: ShardSpec
    filename: str
    temp_path: str

    @classmethod
    def of(cls, spec: ShardSpec, *, dataset_name: str, compression: Compression, file_format: FileFormat,
           shards_dir: str) -> "ShardTarget":
        filename = str(ShardName(dataset_name, spec.split, spec.index, spec.count, compression, file_format))
        return cls(spec, filename, storage.join(shards_dir, filename))


@dataclasses.dataclass
class ShardStats:
    """What a shard writer did, for the counters."""

    records: int = 0
    rebuilt: int = 0
    stored_bytes: int = 0


class ShardFileWriter:
    """Writes shards from entries. RECORD entries are copied as they are; REFERENCE entries are
    rebuilt from their source files (see core/runs.py) and must come out exactly the size the
    plan expects. Build in ``DoFn.setup``.

    The shard format's writer (``beam_tfrecord.formats``) stores the records: TFRecord appends
    the entries' framed bytes in big joined writes, ArrayRecord each record's data. The plan
    counts TFRecord-framed bytes in both, so both formats hold the same records in the same shards.
    With ``dali_index`` each shard gets its DALI index beside it (``interop.dali``), with ``statistics`` the
    statistics of its records (``beam.shard_statistics``).
    """

    def __init__(self, schema: Schema, compression: Compression, feature_transforms: Mapping[str, FeatureTransform],
                 *, direct_io: bool, file_format: FileFormat = DEFAULT_FILE_FORMAT, dali_index: bool = False,
                 statistics: bool = False, inferred_statistics: bool = False) -> None:
        self._schema = schema
        self._with_statistics = statistics
        # Records written with their schema are decoded by it; serialized ones are summarized by feature name.
        self._statistics = BlockDecoder(schema, views=True, absent_lists=True) \
            if statistics and not inferred_statistics else None
        self._builder = RecordBuilder(schema, feature_transforms)
        self._compression = compression
        self._direct_io = direct_io
        self._format = shard_format(file_format)
        self._dali_index = dali_index

    def write(self, target: ShardTarget, entries: Iterable[bytes | memoryview]) -> tuple[ShardInfo, ShardStats]:
        """Writes ``entries`` (in shard order) to ``target.temp_path``, replacing any earlier attempt.

        Raises:
            DiskFullError: when the disk fills (naming the shard's planned bytes); the partial file is removed.
        """
        stats = ShardStats()
        summary = None if not self._with_statistics else \
            ShardStatistics(self._schema, target.spec.split, self._statistics, target.temp_path)
        with raise_typed_when_full(target.temp_path, target.spec.num_record_bytes, partial=target.temp_path):
            # Through the page cache while the machine takes it without writing back (``page_cache_takes``).
            direct = self._direct_io and not direct_io.page_cache_takes(target.spec.num_record_bytes)
            writer = self._format.open_writer(target.temp_path, compression=self._compression, direct_io=direct)
            if self._dali_index:
                writer = DaliIndexingWriter(writer, dali_index_name(target.temp_path))
            record_bytes = self._append_entries(writer, summary, entries, stats)
            crc32c, stored_bytes = writer.close()
            if summary is not None:
                summary.write(target.temp_path)
        return self._checked(target, stats, record_bytes, crc32c, stored_bytes)

    def _append_entries(self, writer: ShardWriter, summary: ShardStatistics | None,
                        entries: Iterable[bytes | memoryview], stats: ShardStats) -> int:
        """Appends ``entries`` to the shard's writer and statistics; counts them in ``stats``; their framed bytes.

        RECORD entries go over in blocks, joined once for both (not a call each per small record): each block
        ends where the statistics would end a summary (``ShardStatistics.add_block``), or before a REFERENCE entry,
        rebuilt and appended on its own.
        """
        record_bytes = 0
        pending: list[bytes | memoryview] = []
        pending_bytes = 0

        def limit() -> int:
            """A block's bytes: the statistics' summary, less what they hold already."""
            return BYTES_PER_SUMMARY - (summary.pending_bytes if summary is not None else 0)

        def hand_over() -> int:
            """Hands the pending records over as one block, counted; the bytes the next block may hold."""
            nonlocal record_bytes, pending_bytes
            block, sizes = b"".join(pending), list(map(len, pending))
            writer.append_framed_block(block, sizes)
            if summary is not None:
                summary.add_block(block, sizes)
            stats.records += len(sizes)
            record_bytes += pending_bytes
            pending.clear()
            pending_bytes = 0
            return limit()

        room = limit()
        for entry in entries:
            if entry[HASH_BYTES] == RECORD:  # entry_kind and entry_record, inline: one pass per small record
                framed = memoryview(entry)[ENTRY_HEADER_BYTES:]
                pending.append(framed)
                pending_bytes += len(framed)
                if pending_bytes >= room:
                    room = hand_over()
                continue
            if pending:
                hand_over()
            parts, size = self._rebuild(entry)
            stats.records += 1
            stats.rebuilt += 1
            record_bytes += framed_size(size)
            writer.append_parts(parts, size)
            if summary is not None:
                summary.add_parts(parts, size)
            room = limit()
        if pending:
            hand_over()
        return record_bytes

    def _checked(self, target: ShardTarget, stats: ShardStats, record_bytes: int, crc32c: str,
                 stored_bytes: int) -> tuple[ShardInfo, ShardStats]:
        """The shard's ShardInfo, once what was written is checked against the plan."""
        spec = target.spec
        if stats.records != spec.num_records or record_bytes != spec.num_record_bytes:
            raise CorruptShardError(target.temp_path, f"wrote {stats.records} records / {record_bytes} bytes, the "
                                                      f"plan expected {spec.num_records} / {spec.num_record_bytes}")
        stats.stored_bytes = stored_bytes
        info = ShardInfo(filename=target.filename, split=spec.split, index=spec.index, num_records=stats.records,
                         num_bytes=stored_bytes, num_record_bytes=record_bytes, crc32c=crc32c,
                         dali_index=dali_index_name(target.filename) if self._dali_index else None)
        return info, stats

    def _rebuild(self, entry: bytes | memoryview) -> tuple[list[bytes], int]:
        """The record (unframed) of a REFERENCE entry, built again from its source files, as parts
        (the files' bytes not copied where ``RecordBuilder.build_parts`` can) and its length."""
        planned_size, sample_pickle = entry_reference(entry)
        sample: Sample = pickle.loads(sample_pickle)
        built = self._builder.build_parts(sample)
        if built is None:
            record = self._builder.build(sample)
            built = record if isinstance(record, DeadLetter) else ([record], len(record))
        if isinstance(built, DeadLetter):
            raise InputChangedError(sample.key, f"it was valid when planned, now: {built.message}")
        parts, size = built
        if framed_size(size) != planned_size:
            raise InputChangedError(sample.key, f"its record is {framed_size(size)} bytes, {planned_size} when planned")
        return parts, size


class WriteShardFn(beam.DoFn):
    """What both shard-writing DoFns share: the writer, built in ``setup``, naming and counters."""

    def __init__(self, schema: Schema, compression: Compression, feature_transforms: Mapping[str, FeatureTransform],
                 *, dataset_name: str, shards_dir: str, direct_io: bool,
                 file_format: FileFormat = DEFAULT_FILE_FORMAT, progress_dir: str | None = None,
                 dali_index: bool = False, pieces_dir: str | None = None, statistics: bool = False,
                 inferred_statistics: bool = False) -> None:
        self._schema = schema
        self._statistics = statistics
        self._inferred_statistics = inferred_statistics
        self._pieces_dir = pieces_dir or storage.join(shards_dir, "pieces")
        self._dali_index = dali_index
        self._progress_dir = progress_dir
        self._compression = compression
        self._file_format = file_format
        self._transforms = dict(feature_transforms)
        self._dataset_name = dataset_name
        self._shards_dir = shards_dir
        self._direct_io = direct_io
        self._records = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_written")
        self._reread = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_reread_from_source")
        self._bytes = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "shard_bytes_written")
        self._shards_reused = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "shards_reused")
        self._pieces = beam.metrics.Metrics.counter(METRICS_NAMESPACE, PIECES_COUNTER)

    def setup(self) -> None:
        self._writer = ShardFileWriter(self._schema, self._compression, self._transforms, direct_io=self._direct_io,
                                       file_format=self._file_format, dali_index=self._dali_index,
                                       statistics=self._statistics, inferred_statistics=self._inferred_statistics)
        # Pieces through the page cache: their join reads them back at once (``beam.shard_pieces``).
        self._piece_writer = ShardFileWriter(self._schema, self._compression, self._transforms, direct_io=False,
                                             file_format=self._file_format, dali_index=self._dali_index,
                                             statistics=self._statistics,
                                             inferred_statistics=self._inferred_statistics)
        self._progress = ProgressSink(self._progress_dir) if self._progress_dir else None

    def _target(self, spec: ShardSpec) -> ShardTarget:
        return ShardTarget.of(spec, dataset_name=self._dataset_name, compression=self._compression,
                              file_format=self._file_format, shards_dir=self._shards_dir)

    def _finished(self, spec: ShardSpec) -> ShardInfo | None:
        """The shard, when an earlier attempt of this build finished it (``spill_resume.finished_shard``)."""
        info = finished_shard(self._target(spec).temp_path, spec)
        if info is not None:
            self._shards_reused.inc()
            if self._progress is not None:
                self._progress.add(shards=1, num_bytes=info.num_bytes,
                                   planned=(spec.split, spec.count if spec.num_filled is None else spec.num_filled))
                self._progress.flush()
        return info

    def _write(self, spec: ShardSpec, entries: Iterable[bytes | memoryview]) -> ShardInfo:
        target = self._target(spec)
        info, stats = self._writer.write(target, entries)
        with raise_typed_when_full(target.temp_path, 1 << 10):  # a record of the complete file: a resume reuses it
            record_finished_shard(target.temp_path, spec, info)
        self._count_records(stats)
        self._count_shard(spec, stats.stored_bytes)
        return info

    def _write_piece(self, piece: PieceSpec, entries: Iterable[bytes | memoryview]) -> ShardInfo:
        """Writes one piece of a shard to its fixed name in the pieces folder (``beam.shard_pieces``); the
        piece file's ``ShardInfo`` (its name, records, bytes, CRC32C). No finished record: the join makes one."""
        name = piece.filename(self._target(piece.shard).filename)
        target = ShardTarget(piece.as_shard_spec(), name, storage.join(self._pieces_dir, name))
        info, stats = self._piece_writer.write(target, entries)
        self._count_records(stats)
        self._pieces.inc()
        return info

    def _count_records(self, stats: ShardStats) -> None:
        self._reread.inc(stats.rebuilt)  # metrics once per shard: each increment costs a lookup in Beam's tracker
        self._records.inc(stats.records)
        self._bytes.inc(stats.stored_bytes)

    def _count_shard(self, spec: ShardSpec, stored_bytes: int) -> None:
        if self._progress is not None:
            filled = spec.count if spec.num_filled is None else spec.num_filled  # empty ones: written at publication
            self._progress.add(shards=1, num_bytes=stored_bytes, planned=(spec.split, filled))
            self._progress.flush()

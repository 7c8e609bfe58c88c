"""Shard writing for both fan-in paths: entries in (hash, content) order -> one shard file.

``ShardFileWriter`` (a plain class) writes a shard from its entries and checks it against the
plan. The spill path's ``WriteShardFromRunsFn`` merges the shard's slice of every run (found in
the runs' index files; see ``beam_tfrecord.spill``); the shuffle path's ``WriteShardFromGroupFn`` sorts the entries the
runner's shuffle brought together. Entries sort the same way in both, so the files are equal.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence

import apache_beam as beam
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.dali_index import dali_index_name
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.naming import DEFAULT_FILE_FORMAT, Compression, FileFormat, ShardName
from beam_tfrecord.core.runs import (
    HASH_BYTES,
    RECORD,
    SpilledRun,
    entry_kind,
    entry_record,
    entry_reference,
)
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import DatasetPlan, ShardSpec
from beam_tfrecord.core.summary import BucketGrid
from beam_tfrecord.disk_space import raise_typed_when_full
from beam_tfrecord.encoding.entries import EncodedBatch
from beam_tfrecord.encoding.records import FeatureTransform, RecordBuilder
from beam_tfrecord.errors import CorruptShardError, InputChangedError, PipelineInvariantError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.interop.dali import DaliIndexingWriter
from beam_tfrecord.progress import ProgressSink
from beam_tfrecord.spill import read_catalog, shard_entries


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
    With ``dali_index`` each shard gets its DALI index beside it (``interop.dali``).
    """

    def __init__(self, schema: Schema, compression: Compression, feature_transforms: Mapping[str, FeatureTransform],
                 *, direct_io: bool, file_format: FileFormat = DEFAULT_FILE_FORMAT, dali_index: bool = False) -> None:
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
        record_bytes = 0
        with raise_typed_when_full(target.temp_path, target.spec.num_record_bytes, partial=target.temp_path):
            writer = self._format.open_writer(target.temp_path, compression=self._compression,
                                              direct_io=self._direct_io)
            if self._dali_index:
                writer = DaliIndexingWriter(writer, dali_index_name(target.temp_path))
            for entry in entries:
                stats.records += 1
                if entry_kind(entry) == RECORD:
                    framed = entry_record(entry)
                    record_bytes += len(framed)
                    writer.append_framed(framed)
                else:
                    record = self._rebuild(entry)
                    stats.rebuilt += 1
                    record_bytes += framed_size(len(record))
                    writer.append(record)
            crc32c, stored_bytes = writer.close()
        return self._checked(target, stats, record_bytes, crc32c, stored_bytes)

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

    def _rebuild(self, entry: bytes | memoryview) -> bytes:
        """The record (unframed) of a REFERENCE entry, built again from its source files."""
        planned_size, sample_pickle = entry_reference(entry)
        sample: Sample = pickle.loads(sample_pickle)
        record = self._builder.build(sample)
        if isinstance(record, DeadLetter):
            raise InputChangedError(sample.key, f"it was valid when planned, now: {record.message}")
        size = framed_size(len(record))
        if size != planned_size:
            raise InputChangedError(sample.key, f"its record is {size} bytes, {planned_size} when planned")
        return record


class _WriteShardFn(beam.DoFn):
    """What both shard-writing DoFns share: the writer, built in ``setup``, naming and counters."""

    def __init__(self, schema: Schema, compression: Compression, feature_transforms: Mapping[str, FeatureTransform],
                 *, dataset_name: str, shards_dir: str, direct_io: bool,
                 file_format: FileFormat = DEFAULT_FILE_FORMAT, progress_dir: str | None = None,
                 dali_index: bool = False) -> None:
        self._schema = schema
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

    def setup(self) -> None:
        self._writer = ShardFileWriter(self._schema, self._compression, self._transforms, direct_io=self._direct_io,
                                       file_format=self._file_format, dali_index=self._dali_index)
        self._progress = ProgressSink(self._progress_dir) if self._progress_dir else None

    def _write(self, spec: ShardSpec, entries: Iterable[bytes | memoryview]) -> ShardInfo:
        target = ShardTarget.of(spec, dataset_name=self._dataset_name, compression=self._compression,
                                file_format=self._file_format, shards_dir=self._shards_dir)
        info, stats = self._writer.write(target, entries)
        self._reread.inc(stats.rebuilt)  # metrics once per shard: each increment costs a lookup in Beam's tracker
        self._records.inc(stats.records)
        self._bytes.inc(stats.stored_bytes)
        if self._progress is not None:
            filled = spec.count if spec.num_filled is None else spec.num_filled  # empty ones: written at publication
            self._progress.add(shards=1, num_bytes=stats.stored_bytes, planned=(spec.split, filled))
            self._progress.flush()
        return info


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard to write on the spill path: its planned spec and the catalog listing every run."""

    spec: ShardSpec
    catalog: str


class WriteShardFromRunsFn(_WriteShardFn):
    """Spill path: ``(shard number, [ShardTask])`` in, its ``ShardInfo`` out; merges the shard's
    slice of every run (``beam_tfrecord.spill.shard_entries``).

    The runs come from the task's catalog file (O(runs) per shard, read from storage), so no
    runner has to hand every worker a side input.
    """

    def process(self, group: tuple[int, Iterable[ShardTask]]) -> Iterator[ShardInfo]:
        number, tasks = group
        found = list(tasks)
        if len(found) != 1:
            raise PipelineInvariantError(f"shard {number}", f"expected its one planned task, got {len(found)}")
        yield self.write_from_runs(found[0].spec, read_catalog(found[0].catalog))

    def write_from_runs(self, spec: ShardSpec, runs: Sequence[SpilledRun]) -> ShardInfo:
        """Writes one shard from its slice of every run (any order of ``runs``: the same file)."""
        with shard_entries(runs, spec.hash_lo, spec.hash_hi, direct=self._direct_io) as entries:
            return self._write(spec, entries)


def _entry_hashes(entries: Sequence[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(e[:HASH_BYTES] for e in entries), dtype=">u8").astype(np.uint64)


def key_by_shard(batch: EncodedBatch, plan: DatasetPlan | None) -> Iterator[tuple[int, bytes]]:
    """(shard number in ``plan.shards``, entry) for each entry of a batch (the plan as a side input)."""
    if not batch.entries:
        return
    if plan is None:
        raise PipelineInvariantError("plan", "records were encoded but no plan was made")
    yield from zip(plan.shard_numbers(_entry_hashes(batch.entries)).tolist(), batch.entries)


def entries_by_bucket(batch: EncodedBatch, grid: BucketGrid) -> Iterator[tuple[int, bytes]]:
    """(bucket, entry) for each entry of a batch: the payload's side of the join with the plan."""
    if batch.entries:
        yield from zip(grid.bucket_of(_entry_hashes(batch.entries)).tolist(), batch.entries)


def shards_by_bucket(plan: DatasetPlan, grid: BucketGrid) -> Iterator[tuple[int, BucketShards]]:
    """(bucket, the shards that start in or cover it) for every bucket: the plan's side of the join."""
    starts = plan.shard_starts
    if not len(starts):
        return
    firsts = np.maximum(np.searchsorted(starts, grid.starts, side="right") - 1, 0)
    lasts = np.append(np.searchsorted(starts, grid.starts[1:], side="left"), len(starts))
    for bucket, (first, last) in enumerate(zip(firsts.tolist(), np.maximum(lasts, firsts + 1).tolist())):
        yield bucket, BucketShards(starts[first:last], first)


@dataclasses.dataclass(frozen=True)
class BucketShards:
    """The shards a bucket's records can belong to: their hash starts, from shard number ``first``."""

    starts: np.ndarray
    first: int


def key_joined_by_shard(group: tuple[int, Iterable[bytes | BucketShards]]) -> Iterator[tuple[int, bytes]]:
    """(shard number, entry) for each entry of a bucket's joined group."""
    bucket, values = group
    shards, entries = None, []
    for value in values:
        if isinstance(value, BucketShards):
            shards = value
        else:
            entries.append(value)
    if not entries:
        return
    if shards is None:
        raise PipelineInvariantError("plan", f"records in hash bucket {bucket} but no planned shard covers it")
    numbers = shards.first + np.searchsorted(shards.starts, _entry_hashes(entries), side="right") - 1
    yield from zip(numbers.tolist(), entries)


def specs_by_number(plan: DatasetPlan) -> Iterator[tuple[int, ShardSpec]]:
    """(shard number, spec): joined with the shard's entries, so its writer needs no side input."""
    return enumerate(plan.shards)


class WriteShardFromGroupFn(_WriteShardFn):
    """Shuffle path: ``(shard number, [ShardSpec, entry...])`` from the runner's GroupByKey in, its
    ``ShardInfo`` out.

    The entries are sorted here (bytes order is (hash, content) order, as the spill path's merge
    gives), so a worker holds one shard's entries at a time: at most ``max_shard_bytes`` of them.
    """

    def process(self, group: tuple[int, Iterable[bytes | ShardSpec]]) -> Iterator[ShardInfo]:
        number, values = group
        specs: list[ShardSpec] = []
        entries: list[bytes] = []
        for value in values:
            if isinstance(value, ShardSpec):
                specs.append(value)
            else:
                entries.append(value)
        if len(specs) != 1:
            raise PipelineInvariantError(f"shard {number}", f"expected its one planned spec, got {len(specs)}")
        entries.sort()
        yield self._write(specs[0], entries)

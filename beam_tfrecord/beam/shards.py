"""Shard tasks and WriteShardFn: merge each run's slice of a shard, in hash order, into one file."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack

import apache_beam as beam

from beam_tfrecord import direct_io, storage
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.naming import Compression, ShardName
from beam_tfrecord.core.plan import DatasetPlan, ShardSpec
from beam_tfrecord.beam.records import FeatureTransform, RecordBuilder
from beam_tfrecord.core.framing import frame_parts, framed_size
from beam_tfrecord.core.runs import (RECORD, RunIndex, RunSlice, SliceRef, entry_kind, entry_record, entry_reference,
                                     merge_slices)
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import CorruptShardError, InputChangedError

_WRITE_CHUNK_BYTES = 4 << 20
_JOIN_MAX_RECORD_BYTES = 64 << 10


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """Everything one worker needs to write one shard.

    Attributes:
        spec: the planned shard (split, index, hash range, expected records and bytes).
        filename: final file name in the dataset directory.
        temp_path: where to write it before publication.
        sources: where each run's part of this shard is (byte range and index range; the hashes
            and sizes are read from the runs' index files by the writer, not carried here).
    """

    spec: ShardSpec
    filename: str
    temp_path: str
    sources: tuple[SliceRef, ...]


def shard_tasks(plan: DatasetPlan, runs: Sequence[RunIndex], *, dataset_name: str, compression: Compression,
                shards_dir: str) -> list[ShardTask]:
    """One task per planned shard, with the byte range of each run that feeds it."""
    tasks = []
    for spec in plan.shards:
        filename = str(ShardName(dataset_name, spec.split, spec.index, spec.count, compression))
        slices = (run.locate(spec.hash_lo, spec.hash_hi) for run in runs)
        sources = tuple(sorted((s for s in slices if s.num_entries), key=lambda s: s.path))
        tasks.append(ShardTask(spec, filename, storage.join(shards_dir, filename), sources))
    return tasks


class WriteShardFn(beam.DoFn):
    """Writes one shard from its run slices; yields its ShardInfo (with the file's checksum).

    RECORD entries are copied as they are; REFERENCE entries are rebuilt from their source files
    (see core/runs.py) and must come out exactly the size the plan expects.
    """

    def __init__(self, schema: Schema, compression: Compression,
                 feature_transforms: Mapping[str, FeatureTransform], *, direct_io: bool) -> None:
        self._schema = schema
        self._direct_io = direct_io
        self._compression = compression
        self._transforms = dict(feature_transforms)
        self._records = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_written")
        self._reread = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_reread_from_source")
        self._bytes = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "shard_bytes_written")

    def setup(self) -> None:
        self._builder = RecordBuilder(self._schema, self._transforms)

    def process(self, task: ShardTask) -> Iterator[ShardInfo]:
        writer = storage.HashingWriter(direct_io.open_write(task.temp_path, direct=self._direct_io), self._compression)
        count = 0
        rebuilt = 0
        record_bytes = 0
        pending: list[bytes | memoryview] = []
        pending_bytes = 0
        slices = [self._load_slice(ref) for ref in task.sources]
        with ExitStack() as stack:
            streams = []
            for source in slices:
                handle = stack.enter_context(direct_io.open_read(source.path, direct=self._direct_io))
                handle.seek(source.start)
                streams.append(handle)
            for entry in merge_slices(streams, slices):
                count += 1
                if entry_kind(entry) == RECORD:
                    framed = entry_record(entry)
                    record_bytes += len(framed)
                    pending.append(framed)  # joined into bigger writes
                    pending_bytes += len(framed)
                else:
                    record = self._rebuild(entry)
                    rebuilt += 1
                    size = framed_size(len(record))
                    record_bytes += size
                    header, footer = frame_parts(record)
                    if len(record) < _JOIN_MAX_RECORD_BYTES:
                        pending += (header, record, footer)
                        pending_bytes += size
                    else:  # large: written as it is, without a copy
                        writer.write(b"".join((*pending, header)))
                        writer.write(record)
                        pending, pending_bytes = [footer], len(footer)
                if pending_bytes >= _WRITE_CHUNK_BYTES:
                    writer.write(b"".join(pending))
                    pending, pending_bytes = [], 0
        writer.write(b"".join(pending))
        crc32c = writer.close()
        if count != task.spec.num_records or record_bytes != task.spec.num_record_bytes:
            raise CorruptShardError(task.temp_path, f"wrote {count} records / {record_bytes} bytes, the plan "
                                                    f"expected {task.spec.num_records} / {task.spec.num_record_bytes}")
        self._reread.inc(rebuilt)  # metrics once per shard: each increment costs a lookup in Beam's tracker
        self._records.inc(count)
        self._bytes.inc(writer.num_bytes)
        yield ShardInfo(filename=task.filename, split=task.spec.split, index=task.spec.index, num_records=count,
                        num_bytes=writer.num_bytes, num_record_bytes=record_bytes, crc32c=crc32c)

    @staticmethod
    def _load_slice(ref: SliceRef) -> RunSlice:
        offset, length = ref.index_bytes
        with storage.open_read(ref.index_path) as handle:
            handle.seek(offset)
            return ref.resolve(handle.read(length))

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

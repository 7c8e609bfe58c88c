"""ReadTFRecordDataset: a published dataset's records in a Beam pipeline, its shards split into record ranges.

A splittable DoFn over record indices (``OffsetRange``); the shard's format reads a range from where its first
record begins (``ShardFormat.read_range``). See docs/inputs.md, "Reading a dataset in Beam".
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.transforms.core import RestrictionProvider

from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.core.record_schema import RAW_FEATURE, holds_verbatim_payloads
from beam_tfrecord.core.units import MiB
from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.engine import traits_of, use_fixed_dask_runner
from beam_tfrecord.errors import CorruptShardError, ReaderError
from beam_tfrecord.formats import ShardFormat, shard_format
from beam_tfrecord.formats.joined import StoredNames, column_shard, joined_record, needs_join
from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder

DEFAULT_SPLIT_BYTES = 64 * MiB  # a range's (framed) bytes: a runner balances work in pieces of about this much
RANGES_COUNTER = "record_ranges_read"  # restrictions the splittable DoFn processed (a bundle reads one or more)


class RecordOutput(enum.Enum):
    """What ``ReadTFRecordDataset`` yields per record."""

    DICTS = "dicts"  # {feature: NumPy value}, as read_numpy gives (the manifest's schema)
    SERIALIZED = "serialized"  # the record's bytes as stored (a serialized Example, or a verbatim payload)


@dataclasses.dataclass(frozen=True)
class RecordRangeTask:
    """One shard to read (records ``start`` to ``stop``; the splittable path starts from the whole shard),
    and about how many bytes a range of it holds; its column files (``column_paths``, read alongside and joined)
    and the version's renames and drops (``names``)."""

    path: str
    shard: ShardInfo
    compression: Compression
    split_bytes: int
    shard_format: ShardFormat
    start: int = 0
    stop: int | None = None
    column_paths: tuple[str, ...] = ()
    names: StoredNames = dataclasses.field(default_factory=StoredNames)

    @property
    def record_bytes(self) -> float:
        """Mean framed bytes of a record (1 for an empty shard)."""
        return self.shard.num_record_bytes / self.shard.num_records if self.shard.num_records else 1.0

    def is_live(self, index: int) -> bool:
        """Whether record ``index`` of the shard is read (not in its deletion vector): a range claims every index,
        deleted or not, so that restrictions and their sizes stay the file's."""
        return self.shard.deletions is None or index not in self.shard.deletions.positions


def read_records(task: RecordRangeTask, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
    """``(index, data)`` of records ``start`` to ``stop`` of a shard, as its format reads a range.

    Raises:
        CorruptShardError: naming the shard, on a CRC mismatch, truncation, or fewer records than listed.
    """
    records = task.shard_format.read_range(task.path, task.shard, compression=task.compression, start=start, stop=stop)
    if not needs_join(task.shard, task.names):
        return records
    rows = [task.shard_format.read_range(path, column_shard(task.shard, column), compression=task.compression,
                                         start=start, stop=stop)
            for path, column in zip(task.column_paths, task.shard.columns, strict=True)]
    return ((index, joined_record([data, *(_row_of(row, index, path) for row, path in zip(rows, task.column_paths))],
                                  task.names, where=f"{task.path} record {index}")) for index, data in records)


def _row_of(rows: Iterator[tuple[int, bytes]], index: int, path: str) -> bytes:
    """The row of record ``index`` from a column file's range (``CorruptShardError`` when it is not there)."""
    found = next(rows, None)
    if found is None or found[0] != index:
        raise CorruptShardError(path, f"no row for record {index} of its base shard: not aligned with it")
    return found[1]


class RecordRanges(RestrictionProvider):
    """Restrictions over a shard's record indices, cut into ranges of about the task's ``split_bytes``.

    A compressed shard is one range (its records are found by reading from its start).
    """

    def initial_restriction(self, task: RecordRangeTask) -> OffsetRange:
        return OffsetRange(task.start, task.shard.num_records if task.stop is None else task.stop)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, task: RecordRangeTask, restriction: OffsetRange) -> Iterator[OffsetRange]:
        if task.compression is not Compression.NONE:
            yield restriction
            return
        yield from restriction.split(max(1, int(task.split_bytes / task.record_bytes)))

    def restriction_size(self, task: RecordRangeTask, restriction: OffsetRange) -> float:
        return restriction.size() * task.record_bytes


class _Decode:
    """A record's output: its bytes, or its dict (verbatim raw payloads whole, as the schema's one feature)."""

    def __init__(self, manifest: Manifest, output: RecordOutput) -> None:
        self._output = output
        self._verbatim_raw = holds_verbatim_payloads(manifest.metadata)
        self._decoder = RecordDecoder(manifest.schema)

    def __call__(self, data: bytes, task: RecordRangeTask, index: int) -> Any:
        if self._output is RecordOutput.SERIALIZED:
            return data
        if self._verbatim_raw:
            return {RAW_FEATURE: data}
        return self._decoder.decode(data, shard=task.path, offset=index)


_RECORD_RANGES = beam.DoFn.RestrictionParam(RecordRanges())  # how Beam finds a splittable DoFn's provider


class ReadRecordRangesFn(beam.DoFn):
    """Splittable: claims each record index of its restriction, and yields the record."""

    def __init__(self, decode: _Decode) -> None:
        self._decode = decode
        self._ranges = beam.metrics.Metrics.counter(METRICS_NAMESPACE, RANGES_COUNTER)

    def process(self, task: RecordRangeTask,
                tracker: OffsetRestrictionTracker = _RECORD_RANGES) -> Iterator[Any]:  # type: ignore[assignment]
        restriction = tracker.current_restriction()
        self._ranges.inc()
        for index, data in read_records(task, restriction.start, restriction.stop):
            if not tracker.try_claim(index):
                return
            if task.is_live(index):
                yield self._decode(data, task, index)


class ReadRangeFn(beam.DoFn):
    """Not splittable (runners without splittable DoFns: Beam's DaskRunner): reads one planned range."""

    def __init__(self, decode: _Decode) -> None:
        self._decode = decode

    def process(self, task: RecordRangeTask) -> Iterator[Any]:
        stop = task.shard.num_records if task.stop is None else task.stop
        for index, data in read_records(task, task.start, stop):
            if task.is_live(index):
                yield self._decode(data, task, index)


class ReadTFRecordDataset(beam.PTransform):
    """Reads a published dataset's split in a Beam pipeline: ``ReadFromTFRecord`` with the manifest's checks,
    whose shards a runner can rebalance.

    ``ReadFromTFRecord`` reads each file as one unsplittable piece; this splits a shard into ranges of
    records (a splittable DoFn), which runners with dynamic splitting rebalance. On Beam's DaskRunner
    (no splittable DoFns) the same ranges are planned up front and read by a plain ``ParDo``: the same
    records. Each record's CRCs are checked, and each shard's record count and size (a
    ``CorruptShardError`` naming the shard); the whole file's CRC32C is ``verify_dataset``'s. Records a version
    deleted (its shards' deletion vectors) are read past, never output; a shard with none live is not read.

    Args:
        path: the dataset: a directory, a versioned root, a Beam ``file_path_prefix`` it was written
            under, or its manifest's path. Read when the transform is built.
        split: the split to read.
        output: ``RecordOutput.DICTS`` (the manifest's schema, as ``read_numpy`` gives) or ``SERIALIZED``.
        split_bytes: about how many (framed) bytes a range holds.

    Raises:
        DatasetNotFoundError, UnknownSplitError: when built, for a path with no dataset or another split.
        ReaderError: for options out of range, or shards that are not TFRecord.
    """

    def __init__(self, path: str, *, split: str = "train", output: RecordOutput = RecordOutput.DICTS,
                 split_bytes: int = DEFAULT_SPLIT_BYTES) -> None:
        super().__init__()
        if not isinstance(output, RecordOutput):
            raise ReaderError(f"output must be a RecordOutput ({[o.name for o in RecordOutput]}), got {output!r}")
        if isinstance(split_bytes, bool) or not isinstance(split_bytes, int) or split_bytes < 1:
            raise ReaderError(f"split_bytes must be an int >= 1, got {split_bytes!r}")
        dataset = open_dataset(path)
        stored = shard_format(dataset.manifest.file_format)
        if "ReadTFRecordDataset" not in stored.readers:
            raise ReaderError(f"{path!r} holds {dataset.manifest.file_format.value} shards; ReadTFRecordDataset "
                              f"reads TFRecord (read these with {' or '.join(stored.readers)})")
        shards = dataset.manifest.split(split).shards
        names = StoredNames.of(dataset.manifest)
        self._tasks = [RecordRangeTask(full, shard, dataset.manifest.compression, split_bytes, stored,
                                       column_paths=tuple(dataset.shard_path(column_shard(shard, column))
                                                          for column in shard.columns), names=names)
                       for shard, full in zip(shards, dataset.shard_paths(split), strict=True) if shard.num_live]
        self._decode = _Decode(dataset.manifest, output)

    def planned_ranges(self) -> list[RecordRangeTask]:
        """The ranges read on a runner without splittable DoFns: each shard cut as ``RecordRanges`` cuts it."""
        provider = RecordRanges()
        return [dataclasses.replace(task, start=piece.start, stop=piece.stop) for task in self._tasks
                for piece in provider.split(task, provider.initial_restriction(task))]

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        pipeline = pbegin.pipeline
        use_fixed_dask_runner(pipeline)
        if not traits_of(pipeline).splittable_dofns:
            return (pbegin
                    | "Ranges" >> beam.Create(self.planned_ranges(), reshuffle=False)
                    | "ReadRanges" >> beam.ParDo(ReadRangeFn(self._decode)))
        return (pbegin
                | "Shards" >> beam.Create(self._tasks, reshuffle=False)
                | "ReadRecords" >> beam.ParDo(ReadRecordRangesFn(self._decode)))

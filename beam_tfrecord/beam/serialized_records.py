"""The encode stage for records that arrive serialized: record -> spill entry, shape and dead letters.

Records are placed and summarized, never re-encoded, and no TensorFlow is imported. Each DoFn has one output,
its kinds told apart by type (see ``encode_fn``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from google.protobuf.message import Message

from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.hashing import content_hash, key_hash
from beam_tfrecord.core.record_schema import (
    RAW_SHAPE,
    RecordShape,
    RecordsSummary,
    SummaryTracker,
    merge_summaries,
    record_shape,
    unnameable_feature,
    wrap_raw,
)
from beam_tfrecord.core.runs import SpilledRun, make_record_entry
from beam_tfrecord.core.sample_encoder import describe_value
from beam_tfrecord.core.samples import DeadLetter, Stage
from beam_tfrecord.core.side_files import EncodedChunk, SideFiles
from beam_tfrecord.encoding.entries import EncodedBatch
from beam_tfrecord.errors import SampleError, WriterOptionError
from beam_tfrecord.quality.digest_files import DigestFile
from beam_tfrecord.quality.split_groups import RecordGroupPlacement
from beam_tfrecord.spill.run_files import RunWriting

# The element -> its key (a stable id), for records whose content is not the right key.
KeyFn = Callable[[Any], str]


class Payload(enum.Enum):
    """What the records are.

    AUTO: serialized Examples and SequenceExamples are kept as they are; anything else is a raw
        payload, stored inside an Example with one bytes feature (``record_schema.RAW_FEATURE``).
    EXAMPLE: every record must be an Example or SequenceExample; another is a dead letter.
    RAW: every record is a raw payload (for serialized protos of other types, which may happen to
        parse as an Example).
    VERBATIM: every record is written byte for byte, as ``WriteToTFRecord`` writes it (any consumer of
        the files reads back what was given); Examples give the schema, and a dataset holding any
        other record has the raw payloads' schema, its records returned whole (not parsed).
    """

    AUTO = "auto"
    EXAMPLE = "example"
    RAW = "raw"
    VERBATIM = "verbatim"


def record_bytes(element: Any) -> bytes | None:
    """The serialized record of an element: bytes as they are, a protobuf message serialized
    deterministically (map keys sorted: the same message always gives the same bytes); None for
    anything else."""
    if isinstance(element, bytes):
        return element
    if isinstance(element, (bytearray, memoryview)):
        return bytes(element)
    if isinstance(element, Message):
        return element.SerializeToString(deterministic=True)
    return None


@dataclasses.dataclass(frozen=True)
class PlacedRecord:
    """One record, ready for the plan: its entry (hash, kind and framed record), its shape and its key."""

    entry: bytes
    shape: RecordShape
    key: str = ""


class RecordEntryMaker:
    """Turns one input element into an ``PlacedRecord`` or a ``DeadLetter``. Build in ``DoFn.setup``.

    Args:
        payload: what the records are (``Payload``).
        salt: hash salt.
        max_record_bytes: the hard shard cap; a larger (framed) record is a dead letter.
        key_fn: the element's key; None places records by a content hash of their bytes (a dead
            letter is then named ``content:<hash>``).
        placement: places each record by its group (``split_key_fn``) and key; None: by its key.
    """

    def __init__(self, *, payload: Payload, salt: str, max_record_bytes: int, key_fn: KeyFn | None,
                 placement: RecordGroupPlacement | None = None) -> None:
        self._payload = payload
        self._salt = salt
        self._max_record_bytes = max_record_bytes
        self._key_fn = key_fn
        self._placement = placement

    def make(self, element: Any) -> PlacedRecord | DeadLetter:
        """The element's record, placed and looked at, or its dead letter."""
        key = f"{type(element).__name__} element"
        try:
            if self._key_fn is not None:
                key = self._key(element)
        except Exception as err:  # whatever a user's key function raises is this element's problem
            return DeadLetter.from_error(key, Stage.READ, err)
        data = record_bytes(element)
        if data is None:
            error = SampleError(key, None, "bytes or a protobuf message (a tf.train.Example)", describe_value(element))
            return DeadLetter.from_error(key, Stage.READ, error)
        if self._key_fn is None:
            hashed = content_hash(data, self._salt)
            key = f"content:{hashed:016x}"
        else:
            hashed = key_hash(key, self._salt)
        if self._placement is not None:
            try:
                hashed = int.from_bytes(self._placement.digest(element, key), "big")
            except Exception as err:  # whatever a user's split_key_fn raises is this element's problem
                return DeadLetter.from_error(key, Stage.VALIDATE, err)
        shape = None if self._payload is Payload.RAW else record_shape(data)
        unnameable = None if shape is None else unnameable_feature(shape)
        if unnameable is not None:
            name, got = unnameable
            error = SampleError(key, name, "a feature name a schema can hold (non-empty, one kind of feature)", got)
            return DeadLetter.from_error(key, Stage.VALIDATE, error)
        if shape is None:
            if self._payload is Payload.EXAMPLE:
                error = SampleError(key, None, "a serialized tf.train.Example or SequenceExample (payload=EXAMPLE)",
                                    f"{len(data)} bytes starting {data[:8]!r}")
                return DeadLetter.from_error(key, Stage.VALIDATE, error)
            data, shape = (data if self._payload is Payload.VERBATIM else wrap_raw(data)), RAW_SHAPE
        size = framed_size(len(data))
        if size > self._max_record_bytes:
            error = SampleError(key, None, f"a record of at most {self._max_record_bytes} bytes (the hard shard-size "
                                           "cap)", f"{size} bytes")
            return DeadLetter.from_error(key, Stage.ENCODE, error)
        return PlacedRecord(make_record_entry(hashed, data), shape, key)

    def _key(self, element: Any) -> str:
        key = self._key_fn(element)  # type: ignore[misc]
        if not isinstance(key, str):
            raise SampleError(repr(key)[:60], None, "key_fn to return a str", describe_value(key))
        return key


@dataclasses.dataclass(frozen=True)
class SummarizedBatch(EncodedBatch):
    """The shuffle path's element: one record's entry (or dead letter), and the bundle's summary
    when this record changed it."""

    summary: RecordsSummary | None = None


class _EncodeRecordsFn(beam.DoFn):
    """What both DoFns share: the entry maker, a summary tracker (and digests) per bundle, the counters."""

    def __init__(self, *, payload: Payload, salt: str, max_record_bytes: int, key_fn: KeyFn | None,
                 side_files: tuple[SideFiles, ...] = (), placement: RecordGroupPlacement | None = None) -> None:
        self._options = dict(payload=payload, salt=salt, max_record_bytes=max_record_bytes, key_fn=key_fn,
                             placement=placement)
        self._side_files = side_files
        self._encoded = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_encoded")
        self._rejected = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_rejected")
        self._raw = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_stored_as_raw_payloads")

    def setup(self) -> None:
        self._maker = RecordEntryMaker(**self._options)  # type: ignore[arg-type]

    def start_bundle(self) -> None:
        self._tracker = SummaryTracker()

    def finish_bundle(self) -> None:
        for side in self._side_files:  # the bundle counts only once its side files are on storage
            side.finish()

    def _make(self, element: Any) -> tuple[PlacedRecord | DeadLetter, RecordsSummary | None, list[Any]]:
        """One element's outcome, the bundle's summary if it changed, and the side files it started."""
        outcome = self._maker.make(element)
        if type(outcome) is DeadLetter:
            self._rejected.inc()
            return outcome, None, []
        self._encoded.inc()
        if outcome.shape is RAW_SHAPE:
            self._raw.inc()
        chunk = EncodedChunk((outcome.entry,), (outcome.key,))
        for side in self._side_files:
            side.add(chunk)
        started = [file for side in self._side_files for file in side.announce()]
        return outcome, self._tracker.add(outcome.shape), started


class EncodeRecordsToRunsFn(_EncodeRecordsFn):
    """Spill path: records into hash-sorted runs (``beam_tfrecord.spill.run_files``), as ``EncodeToRunsFn`` does
    with samples. Output: ``SpilledRun`` (announced when it starts), ``DeadLetter``, ``RecordsSummary``."""

    def __init__(self, *, runs_dir: str, run_bytes: int, direct_io: bool, payload: Payload, salt: str,
                 max_record_bytes: int, key_fn: KeyFn | None, side_files: tuple[SideFiles, ...] = (),
                 placement: RecordGroupPlacement | None = None) -> None:
        self._run_writing = RunWriting(runs_dir, run_bytes=run_bytes, direct=direct_io)  # the last side file
        super().__init__(payload=payload, salt=salt, max_record_bytes=max_record_bytes, key_fn=key_fn,
                         side_files=(*side_files, self._run_writing), placement=placement)

    def teardown(self) -> None:
        self._run_writing.stop()

    def process(self, element: Any) -> Iterator[SpilledRun | DeadLetter | RecordsSummary | DigestFile]:
        outcome, summary, started = self._make(element)
        if type(outcome) is DeadLetter:
            yield outcome
            return
        yield from started  # digest files, then the run
        if summary is not None:
            yield summary


class EncodeRecordsToBatchesFn(_EncodeRecordsFn):
    """Shuffle path: one ``SummarizedBatch`` per record. Side-effect free, so a runner may run it again."""

    def process(self, element: Any) -> Iterator[SummarizedBatch]:
        outcome, summary, started = self._make(element)
        if type(outcome) is DeadLetter:
            yield SummarizedBatch((), (outcome,))
        else:
            yield SummarizedBatch((outcome.entry,), digest_files=tuple(started), summary=summary)


class MergeSummariesFn(beam.CombineFn):
    """Merges ``RecordsSummary`` values (accumulator: the join so far, None for none)."""

    def create_accumulator(self) -> RecordsSummary | None:
        return None

    def add_input(self, accumulator: RecordsSummary | None, summary: RecordsSummary) -> RecordsSummary | None:
        return merge_summaries((accumulator, summary))

    def merge_accumulators(self, accumulators: Iterable[RecordsSummary | None]) -> RecordsSummary | None:
        return merge_summaries(accumulators)

    def extract_output(self, accumulator: RecordsSummary | None) -> RecordsSummary | None:
        return accumulator


def _summary_of(batch: SummarizedBatch) -> Iterator[RecordsSummary]:
    if batch.summary is not None:
        yield batch.summary


class SummarizeBatches(beam.PTransform):
    """The shuffle path's ``SummarizedBatch``es -> one merged ``RecordsSummary`` (none for no record)."""

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return (batches
                | "Summaries" >> beam.FlatMap(_summary_of)  # a few per bundle
                | "Merge" >> beam.CombineGlobally(MergeSummariesFn()).without_defaults())


@dataclasses.dataclass(frozen=True)
class RecordsEncoding:
    """The writer's encode stage for serialized records (``WriteTFRecordDataset``'s ``encoding`` hook).

    Attributes:
        payload: what the records are.
        key_fn: the element's key, or None for a content hash.
        placement: places records by their group (``split_key_fn``); None: by their key.
    """

    payload: Payload = Payload.AUTO
    key_fn: KeyFn | None = None
    placement: RecordGroupPlacement | None = None

    def to_runs_fn(self, *, runs_dir: str, run_bytes: int, direct_io: bool, salt: str,
                   max_record_bytes: int, side_files: tuple[SideFiles, ...] = ()) -> beam.DoFn:
        return EncodeRecordsToRunsFn(runs_dir=runs_dir, run_bytes=run_bytes, direct_io=direct_io, payload=self.payload,
                                     salt=salt, max_record_bytes=max_record_bytes, key_fn=self.key_fn,
                                     side_files=side_files, placement=self.placement)

    def to_batches_fn(self, *, salt: str, max_record_bytes: int, side_files: tuple[SideFiles, ...] = ()
                      ) -> beam.DoFn:
        return EncodeRecordsToBatchesFn(payload=self.payload, salt=salt, max_record_bytes=max_record_bytes,
                                        key_fn=self.key_fn, side_files=side_files, placement=self.placement)

    def summarize_batches(self) -> beam.PTransform:
        return SummarizeBatches()


def check_key_fn(key_fn: Any) -> KeyFn | None:
    if key_fn is not None and not callable(key_fn):
        raise WriterOptionError(f"key_fn must be a function of the element returning a str, or None, got {key_fn!r}")
    return key_fn

"""EncodeToRunsFn: samples -> encoded records spilled into hash-sorted runs, plus dead letters."""

from __future__ import annotations

import concurrent.futures
import pickle
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_tfrecord import direct_io, storage
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.beam.records import FeatureTransform, RecordBuilder, has_file_refs
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.runs import RunIndex, SpilledRun, make_record_entry, make_reference_entry, write_run
from beam_tfrecord.core.samples import DeadLetter, Sample, Stage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import SampleError

DEAD_LETTERS = "dead_letters"


class EncodeToRunsFn(beam.DoFn):
    """Loads, transforms, validates and encodes samples; spills records into sorted runs.

    Input: a ``Sample`` or a list of them (chunks keep per-element overhead low for small rows).
    Main output: one ``SpilledRun`` per run written (its index is a file beside it). Tagged output
    ``dead_letters``: ``DeadLetter``.
    Memory: up to two runs per worker (one being encoded, one being written).
    """

    def __init__(self, schema: Schema, *, runs_dir: str, salt: str, max_record_bytes: int,
                 run_bytes: int, feature_transforms: Mapping[str, FeatureTransform], reread_min_bytes: int,
                 direct_io: bool) -> None:
        self._schema = schema
        self._reread_min_bytes = reread_min_bytes
        self._runs_dir = runs_dir
        self._salt = salt
        self._max_record_bytes = max_record_bytes
        self._run_bytes = run_bytes
        self._direct_io = direct_io
        self._transforms = dict(feature_transforms)
        self._encoded = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "samples_encoded")
        self._rejected = {stage: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"samples_rejected_{stage.value}")
                          for stage in Stage}
        self._runs = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "spill_runs")
        self._listed = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_planned_from_listed_sizes")

    def setup(self) -> None:
        self._builder = RecordBuilder(self._schema, self._transforms)
        # Records rebuilt by the shard writers must come out byte-identical: never re-run transforms.
        self._reread = self._reread_min_bytes > 0 and not self._builder.has_transforms
        # Runs are written by a thread while the next one is encoded (file writes release the GIL).
        self._run_writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spill-run")

    def teardown(self) -> None:
        self._run_writer.shutdown(wait=True)

    def start_bundle(self) -> None:
        self._buffer: list[bytes] = []  # run entries (see core/runs.py)
        self._buffered_bytes = 0
        self._writing: concurrent.futures.Future | None = None

    def process(self, element: Sample | DeadLetter | list[Sample | DeadLetter]) -> Iterator[Any]:
        encoded = 0
        encode_one = self._encode_one
        for sample in element if isinstance(element, list) else (element,):
            # Sources emit a DeadLetter for an input they could not even turn into a sample
            # (a malformed row, a path outside the allowed root), so every input is counted here.
            outcome = sample if sample.__class__ is DeadLetter else encode_one(sample)
            if outcome.__class__ is DeadLetter:
                self._rejected[outcome.stage].inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTERS, outcome)
                continue
            encoded += 1
            self._buffer.append(outcome)
            self._buffered_bytes += len(outcome)
            if self._buffered_bytes >= self._run_bytes:
                yield self._flush()
        self._encoded.inc(encoded)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._buffer:
            yield WindowedValue(self._flush(), MIN_TIMESTAMP, [GlobalWindow()])
        self._wait_for_run()  # the bundle (and every run index it emitted) counts only once its runs are on storage

    def _encode_one(self, sample: Sample) -> bytes | DeadLetter:
        stand_in = self._listed_stand_in(sample)
        record = self._builder.build(sample if stand_in is None else stand_in)
        if record.__class__ is DeadLetter:
            return record
        size = framed_size(len(record))
        if size > self._max_record_bytes:
            error = SampleError(sample.key, None, f"a record of at most {self._max_record_bytes} bytes "
                                                  "(the hard shard-size cap)", f"{size} bytes")
            return DeadLetter.from_error(sample.key, Stage.ENCODE, error)
        hashed = key_hash(sample.key, self._salt)
        if stand_in is not None or (self._reread and size >= self._reread_min_bytes and has_file_refs(sample)):
            # Large and file-backed: spill the reference; the shard writer reads the file (again,
            # unless it was planned from its listed size), so the payload is written once,
            # straight into its shard.
            return make_reference_entry(hashed, size, pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL))
        return make_record_entry(hashed, record)

    def _listed_stand_in(self, sample: Sample) -> Sample | None:
        """For a large file-backed sample whose record size follows from listed file sizes: the
        stand-in to plan it with, so its files are read only once, by its shard writer."""
        if not self._reread or not has_file_refs(sample):  # the common case for rows, checked cheaply
            return None
        stand_in = self._builder.stand_in(sample, min_file_bytes=self._reread_min_bytes)
        if stand_in is not None:
            self._listed.inc()
        return stand_in

    def _flush(self) -> SpilledRun:
        """Sorts the buffer and starts writing it as a run; at most one run is being written at a time."""
        entries = sorted(self._buffer)  # entries start with the big-endian hash: bytes order is hash order
        run = SpilledRun(storage.join(self._runs_dir, f"{uuid.uuid4().hex}.run"), len(entries))
        index = RunIndex.of_entries(run.path, entries)
        self._wait_for_run()
        self._writing = self._run_writer.submit(self._write_run, run, entries, index)
        self._runs.inc()  # metrics are per thread: counted here, not in the writing thread
        self._buffer = []
        self._buffered_bytes = 0
        return run

    def _write_run(self, run: SpilledRun, entries: list[bytes], index: RunIndex) -> None:
        with direct_io.open_write(run.path, direct=self._direct_io) as handle:
            write_run(handle, entries)
        with storage.open_write(run.index_path) as handle:
            handle.write(index.to_bytes())

    def _wait_for_run(self) -> None:
        """Waits for the run being written, raising its error if the write failed."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

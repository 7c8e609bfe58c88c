"""The encoding DoFns of both fan-in paths: samples -> entries (see core/runs.py) and dead letters.

Each has one output (the Dask runner sends every output of a multi-output ParDo down every
branch): ``EncodeToRunsFn`` emits ``SpilledRun`` and ``DeadLetter`` elements, which the writer
separates by type; ``EncodeToBatchesFn`` emits one ``EncodedBatch`` per input element.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import apache_beam as beam
import google_crc32c
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_tfrecord import direct_io, storage
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.beam.entries import EncodedBatch, EntryEncoder
from beam_tfrecord.beam.records import FeatureTransform
from beam_tfrecord.core.runs import RunIndex, SpilledRun, write_run
from beam_tfrecord.core.samples import DeadLetter, Sample, Stage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.progress import ProgressSink


class _EncodeFn(beam.DoFn):
    """What both encoding DoFns share: the encoder, built in ``setup``, and the counters."""

    def __init__(self, schema: Schema, *, salt: str, max_record_bytes: int,
                 feature_transforms: Mapping[str, FeatureTransform], reread_min_bytes: int,
                 progress_dir: str | None = None) -> None:
        self._schema = schema
        self._progress_dir = progress_dir
        self._salt = salt
        self._max_record_bytes = max_record_bytes
        self._transforms = dict(feature_transforms)
        self._reread_min_bytes = reread_min_bytes
        self._encoded = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "samples_encoded")
        self._rejected = {stage: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"samples_rejected_{stage.value}")
                          for stage in Stage}
        self._listed = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "records_planned_from_listed_sizes")

    def setup(self) -> None:
        self._encoder = EntryEncoder(self._schema, salt=self._salt, max_record_bytes=self._max_record_bytes,
                                     feature_transforms=self._transforms, reread_min_bytes=self._reread_min_bytes)
        self._progress = ProgressSink(self._progress_dir) if self._progress_dir else None

    def _flush_progress(self) -> None:
        if self._progress is not None:
            self._progress.flush()

    def _encode_element(self, element: Sample | DeadLetter | list[Sample | DeadLetter]
                        ) -> Iterator[bytes | DeadLetter]:
        """Entries and dead letters of one element; counts them."""
        encoded = rejected = 0
        listed_before = self._encoder.num_listed
        encode = self._encoder.encode
        for sample in element if isinstance(element, list) else (element,):
            # Sources emit a DeadLetter for an input they could not even turn into a sample
            # (a malformed row, a path outside the allowed root), so every input is counted here.
            outcome = sample if type(sample) is DeadLetter else encode(sample)
            if type(outcome) is DeadLetter:
                self._rejected[outcome.stage].inc()
                rejected += 1
            else:
                encoded += 1
            yield outcome
        self._encoded.inc(encoded)
        if self._progress is not None:
            self._progress.add(encoded=encoded, rejected=rejected)
        if self._encoder.num_listed > listed_before:
            self._listed.inc(self._encoder.num_listed - listed_before)


class EncodeToBatchesFn(_EncodeFn):
    """Shuffle path: one ``EncodedBatch`` (entries and dead letters) per input element.

    Stateless between elements and without side effects, so a runner may run it again (a retried
    bundle, a lost worker, a recomputed side input) and get the same batch.
    """

    def process(self, element: Sample | DeadLetter | list[Sample | DeadLetter]) -> Iterator[EncodedBatch]:
        entries: list[bytes] = []
        dead: list[DeadLetter] = []
        for outcome in self._encode_element(element):
            if type(outcome) is DeadLetter:
                dead.append(outcome)
            else:
                entries.append(outcome)
        yield EncodedBatch(tuple(entries), tuple(dead))

    def finish_bundle(self) -> None:
        self._flush_progress()


def run_name(entries: list[bytes], index: RunIndex) -> str:
    """A run's file name, from its content: writing the same entries again gives the same file."""
    digest = google_crc32c.Checksum()
    for entry in entries:
        digest.update(entry)
    return hashlib.blake2b(index.to_bytes() + digest.digest(), digest_size=12).hexdigest() + ".run"


class EncodeToRunsFn(_EncodeFn):
    """Spill path: spills entries into hash-sorted runs of bounded size.

    Input: a ``Sample`` or a list of them (chunks keep per-element overhead low for small rows).
    Output: one ``SpilledRun`` per run written (its index is a file beside it) and a ``DeadLetter``
    per rejected sample. Runs are named by their content, so a re-executed bundle rewrites the
    same files. Memory: up to two runs per worker (one being encoded, one being written).
    """

    def __init__(self, schema: Schema, *, runs_dir: str, salt: str, max_record_bytes: int,
                 run_bytes: int, feature_transforms: Mapping[str, FeatureTransform], reread_min_bytes: int,
                 direct_io: bool, progress_dir: str | None = None) -> None:
        super().__init__(schema, salt=salt, max_record_bytes=max_record_bytes, feature_transforms=feature_transforms,
                         reread_min_bytes=reread_min_bytes, progress_dir=progress_dir)
        self._runs_dir = runs_dir
        self._run_bytes = run_bytes
        self._direct_io = direct_io
        self._runs = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "spill_runs")

    def setup(self) -> None:
        super().setup()
        # Runs are written by a thread while the next one is encoded (file writes release the GIL).
        self._run_writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spill-run")

    def teardown(self) -> None:
        self._run_writer.shutdown(wait=True)

    def start_bundle(self) -> None:
        self._buffer: list[bytes] = []  # run entries (see core/runs.py)
        self._buffered_bytes = 0
        self._writing: concurrent.futures.Future | None = None

    def process(self, element: Sample | DeadLetter | list[Sample | DeadLetter]) -> Iterator[Any]:
        for outcome in self._encode_element(element):
            if type(outcome) is DeadLetter:
                yield outcome
                continue
            self._buffer.append(outcome)
            self._buffered_bytes += len(outcome)
            if self._buffered_bytes >= self._run_bytes:
                yield self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._buffer:
            yield WindowedValue(self._flush(), MIN_TIMESTAMP, (GlobalWindow(),))
        self._wait_for_run()  # the bundle (and every run index it emitted) counts only once its runs are on storage
        self._flush_progress()

    def _flush(self) -> SpilledRun:
        """Sorts the buffer and starts writing it as a run; at most one run is being written at a time."""
        entries = sorted(self._buffer)  # entries start with the big-endian hash: bytes order is hash order
        index = RunIndex.of_entries("", entries)
        run = SpilledRun(storage.join(self._runs_dir, run_name(entries, index)), len(entries))
        # The index is written now: the histogram combine, fused after this DoFn, reads it at once.
        # The run follows in the writing thread; readers of runs come after the bundle has finished.
        with storage.open_write(run.index_path) as handle:
            handle.write(index.to_bytes())
        self._wait_for_run()
        self._writing = self._run_writer.submit(self._write_run, run, entries)
        self._runs.inc()  # metrics are per thread: counted here, not in the writing thread
        self._buffer = []
        self._buffered_bytes = 0
        return run

    def _write_run(self, run: SpilledRun, entries: list[bytes]) -> None:
        with direct_io.open_write(run.path, direct=self._direct_io) as handle:
            write_run(handle, entries)

    def _wait_for_run(self) -> None:
        """Waits for the run being written, raising its error if the write failed."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

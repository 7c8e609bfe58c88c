"""The encoding DoFns of both fan-in paths: samples -> entries (see core/runs.py) and dead letters.

Each has one output (the Dask runner sends every output of a multi-output ParDo down every
branch): ``EncodeToRunsFn`` emits ``SpilledRun`` and ``DeadLetter`` elements, which the writer
separates by type; ``EncodeToBatchesFn`` emits one ``EncodedBatch`` per input element. Neither
emits from ``finish_bundle`` (the Dask runner drops what is emitted there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import apache_beam as beam
import numpy as np

from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.core.hashing import key_digests
from beam_tfrecord.core.runs import SpilledRun
from beam_tfrecord.core.samples import DeadLetter, Sample, Stage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.encoding.entries import EncodedBatch, EntryEncoder
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.progress import ProgressSink
from beam_tfrecord.spill import RunWriting
from beam_tfrecord.spill_resume import read_reused_hashes, skipped, write_resume_file


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
                        ) -> tuple[list[bytes], list[DeadLetter]]:
        """(entries, dead letters) of one element, each in input order; counts them."""
        listed_before = self._encoder.num_listed
        # Sources emit a DeadLetter for an input they could not even turn into a sample (a
        # malformed row, a path outside the allowed root), so every input is counted here.
        if isinstance(element, list):
            outcomes = self._encoder.encode_chunk(element)
        else:
            outcomes = [element if type(element) is DeadLetter else self._encoder.encode(element)]
        entries: list[bytes] = []
        dead: list[DeadLetter] = []
        for outcome in outcomes:
            if type(outcome) is DeadLetter:
                dead.append(outcome)
            else:
                entries.append(outcome)
        for letter in dead:
            self._rejected[letter.stage].inc()
        self._encoded.inc(len(entries))
        if self._progress is not None:
            self._progress.add(encoded=len(entries), rejected=len(dead))
        if self._encoder.num_listed > listed_before:
            self._listed.inc(self._encoder.num_listed - listed_before)
        return entries, dead


class EncodeToBatchesFn(_EncodeFn):
    """Shuffle path: one ``EncodedBatch`` (entries and dead letters) per input element.

    Stateless between elements and without side effects, so a runner may run it again (a retried
    bundle, a lost worker, a recomputed side input) and get the same batch.
    """

    def process(self, element: Sample | DeadLetter | list[Sample | DeadLetter]) -> Iterator[EncodedBatch]:
        entries, dead = self._encode_element(element)
        yield EncodedBatch(tuple(entries), tuple(dead))

    def finish_bundle(self) -> None:
        self._flush_progress()


@dataclasses.dataclass(frozen=True)
class RunsResume:
    """What makes a spill build resumable, and what it resumes (``beam_tfrecord.spill_resume``).

    Attributes:
        temp_dir: the build's temp folder, where ``resume.json`` goes before any run.
        fingerprint: that file's text.
        reused_hashes_path: the key hashes of the samples a killed build's runs hold (skipped), if resuming.
    """

    temp_dir: str
    fingerprint: str
    reused_hashes_path: str | None = None


class EncodeToRunsFn(_EncodeFn):
    """Spill path: spills entries into hash-sorted runs of bounded size (``beam_tfrecord.spill``).

    Input: a ``Sample`` or a list of them (chunks keep per-element overhead low for small rows).
    Output: one ``SpilledRun`` per run, emitted when the run starts (its files are on storage once
    the bundle has finished: nothing is emitted from ``finish_bundle``, which the Dask runner
    drops), and a ``DeadLetter`` per rejected sample. Memory: up to two runs per worker.
    Given ``resume``, it writes the build's ``resume.json`` in ``setup`` (before any run) and skips
    the samples a resumed build's runs already hold.
    """

    def __init__(self, schema: Schema, *, runs_dir: str, salt: str, max_record_bytes: int,
                 run_bytes: int, feature_transforms: Mapping[str, FeatureTransform], reread_min_bytes: int,
                 direct_io: bool, progress_dir: str | None = None, resume: RunsResume | None = None) -> None:
        super().__init__(schema, salt=salt, max_record_bytes=max_record_bytes, feature_transforms=feature_transforms,
                         reread_min_bytes=reread_min_bytes, progress_dir=progress_dir)
        self._run_writing = RunWriting(runs_dir, run_bytes=run_bytes, direct=direct_io)
        self._runs = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "spill_runs")
        self._resume = resume
        self._reused_counter = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "samples_reused")

    def setup(self) -> None:
        super().setup()
        self._reused = np.zeros(0, np.uint64)
        if self._resume is not None:
            write_resume_file(self._resume.temp_dir, self._resume.fingerprint)  # once per build: the first worker
            if self._resume.reused_hashes_path:
                self._reused = read_reused_hashes(self._resume.reused_hashes_path)
        self._run_writing.start()

    def _encode_element(self, element: Sample | DeadLetter | list[Sample | DeadLetter]
                        ) -> tuple[list[bytes], list[DeadLetter]]:
        if len(self._reused):
            element = self._not_reused(element)
        return super()._encode_element(element)

    def _not_reused(self, element: Sample | DeadLetter | list[Sample | DeadLetter]
                    ) -> Sample | DeadLetter | list[Sample | DeadLetter]:
        """The element, less the samples whose records a reused run holds (dead letters kept: no run holds them)."""
        items = element if isinstance(element, list) else [element]
        samples = [i for i, item in enumerate(items) if type(item) is not DeadLetter]
        digests = key_digests([items[i].key for i in samples], self._salt)
        held = skipped(np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64), self._reused)
        self._reused_counter.inc(int(held.sum()))
        if self._progress is not None:  # the progress line counts samples done: a reused one is
            self._progress.add(encoded=int(held.sum()), rejected=0)
        if not held.any():
            return element
        drop = {samples[i] for i in np.flatnonzero(held).tolist()}
        return [item for i, item in enumerate(items) if i not in drop]

    def teardown(self) -> None:
        self._run_writing.stop()

    def start_bundle(self) -> None:
        self._spiller = self._run_writing.spiller()

    def process(self, element: Sample | DeadLetter | list[Sample | DeadLetter]) -> Iterator[SpilledRun | DeadLetter]:
        entries, dead = self._encode_element(element)
        yield from dead
        started = self._spiller.add_many(entries)
        if started:
            self._runs.inc(len(started))  # metrics are per thread: counted here, not in the writing thread
        yield from started

    def finish_bundle(self) -> None:
        self._spiller.finish()  # the bundle (and every run it announced) counts only once its runs are on storage
        self._flush_progress()

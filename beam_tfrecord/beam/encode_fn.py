"""EncodeToRunsFn: samples -> encoded records spilled into hash-sorted runs, plus dead letters."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_tfrecord import storage
from beam_tfrecord.core.encode import SampleEncoder
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.runs import RunIndex, encode_run, make_entry
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.errors import FeatureTransformError, SampleError, SampleReadError


DEAD_LETTERS = "dead_letters"
_NAMESPACE = "beam_tfrecord"

# A per-feature function applied after files are loaded and before validation (e.g. decode and
# resize an image). Whatever it raises sends the sample to the dead letters with stage DECODE, with a
# message naming the feature. Absent (None) values are not transformed.
FeatureTransform = Callable[[Any], Any]


def load_file_refs(sample: Sample) -> Sample:
    """Replaces every FileRef value with the file's bytes; raises SampleReadError naming the file."""
    if FileRef not in set(map(type, sample.values.values())):
        return sample
    values = dict(sample.values)
    for name, value in sample.values.items():
        if isinstance(value, FileRef):
            try:
                values[name] = storage.read_bytes(value.path)
            except Exception as err:  # FileSystems raises BeamIOError, OSError and GCS client errors
                reason = f"{type(err).__name__}: {err}"
                raise SampleReadError(sample.key, name, value.path, reason[:300]) from err
    return Sample(sample.key, values)


class EncodeToRunsFn(beam.DoFn):
    """Loads, transforms, validates and encodes samples; spills records into sorted runs.

    Input: a ``Sample`` or a list of them (chunks keep per-element overhead low for small rows).
    Main output: one ``RunIndex`` per spilled run. Tagged output ``dead_letters``: ``DeadLetter``.
    """

    def __init__(self, schema: Schema, *, runs_dir: str, salt: str, max_record_bytes: int,
                 run_bytes: int, feature_transforms: Mapping[str, FeatureTransform]) -> None:
        self._schema = schema
        self._runs_dir = runs_dir
        self._salt = salt
        self._max_record_bytes = max_record_bytes
        self._run_bytes = run_bytes
        self._transforms = dict(feature_transforms)
        self._encoded = beam.metrics.Metrics.counter(_NAMESPACE, "samples_encoded")
        self._rejected = {stage: beam.metrics.Metrics.counter(_NAMESPACE, f"samples_rejected_{stage.value}")
                          for stage in Stage}
        self._runs = beam.metrics.Metrics.counter(_NAMESPACE, "spill_runs")

    def setup(self) -> None:
        self._encoder = SampleEncoder(self._schema)

    def start_bundle(self) -> None:
        self._buffer: list[bytes] = []  # run entries: hash prefix + framed record
        self._buffered_bytes = 0

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

    def _encode_one(self, sample: Sample) -> bytes | DeadLetter:
        stage = Stage.READ
        try:
            sample = load_file_refs(sample)
            stage = Stage.DECODE
            if self._transforms:
                sample = self._transform(sample)
            stage = Stage.VALIDATE
            record = self._encoder.encode(sample)
        except (SampleError, SampleReadError) as err:
            return DeadLetter.from_error(sample.key, stage, err)
        except FeatureTransformError as err:  # named after the transform's own error type
            return DeadLetter(key=sample.key, stage=stage, error_type=type(err.cause).__name__,
                              message=str(err), feature=err.feature)
        except Exception as err:  # a user transform or decoder failing is a per-sample problem
            if stage is Stage.VALIDATE:
                raise
            return DeadLetter.from_error(sample.key, stage, err)
        if framed_size(len(record)) > self._max_record_bytes:
            error = SampleError(sample.key, None, f"a record of at most {self._max_record_bytes} bytes "
                                                  "(the hard shard-size cap)", f"{framed_size(len(record))} bytes")
            return DeadLetter.from_error(sample.key, Stage.ENCODE, error)
        return make_entry(key_hash(sample.key, self._salt), record)

    def _transform(self, sample: Sample) -> Sample:
        values = dict(sample.values)
        for name, transform in self._transforms.items():
            if values.get(name) is None:
                continue  # absent: the encoder applies the default or rejects it
            try:
                values[name] = transform(values[name])
            except Exception as err:  # whatever a decoder raises is this sample's problem
                raise FeatureTransformError(sample.key, name, err) from err
        return Sample(sample.key, values)

    def _flush(self) -> RunIndex:
        entries = sorted(self._buffer)  # entries start with the big-endian hash: bytes order is hash order
        path = storage.join(self._runs_dir, f"{uuid.uuid4().hex}.run")
        with storage.open_write(path) as handle:
            handle.write(encode_run(entries))
        self._runs.inc()
        index = RunIndex.of_entries(path, entries)
        self._buffer = []
        self._buffered_bytes = 0
        return index

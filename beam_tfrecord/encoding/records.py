"""RecordBuilder: one sample to one serialized record, or to a dead letter with its stage.

Used by the encoding stage for every sample, and by shard writers to rebuild the records of
file-backed samples that were spilled as references (their payload is read from the source
again instead of being written to a spill run and read back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.errors import FeatureTransformError, SampleError, SampleReadError

# A per-feature function applied after files are loaded and before validation (e.g. decode and
# resize an image). Whatever it raises sends the sample to the dead letters with stage DECODE, with a
# message naming the feature. Absent (None) values are not transformed.
FeatureTransform = Callable[[Any], Any]


def has_file_refs(sample: Sample) -> bool:
    return FileRef in map(type, sample.values.values())


def load_file_refs(sample: Sample) -> Sample:
    """Replaces every FileRef value with the file's bytes; raises SampleReadError naming the file."""
    if not has_file_refs(sample):
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


class RecordBuilder:
    """Loads, transforms, validates and encodes samples of one schema. Build in ``DoFn.setup``."""

    def __init__(self, schema: Schema, feature_transforms: Mapping[str, FeatureTransform]) -> None:
        self._encoder = SampleEncoder(schema)
        self._transforms = dict(feature_transforms)
        # Features whose record size depends only on the length of their bytes, not on the content.
        self._any_bytes = {name for name, feature in schema.features.items()
                           if isinstance(feature, Scalar) and feature.dtype is DType.BYTES}

    @property
    def has_transforms(self) -> bool:
        return bool(self._transforms)

    def build(self, sample: Sample) -> bytes | DeadLetter:
        """The serialized record of ``sample``, or a DeadLetter naming the stage that failed."""
        stage = Stage.READ
        try:
            sample = load_file_refs(sample)
            stage = Stage.DECODE
            if self._transforms:
                sample = self._transform(sample)
            stage = Stage.VALIDATE
            return self._encoder.encode(sample)
        except (SampleError, SampleReadError) as err:
            return DeadLetter.from_error(sample.key, stage, err)
        except FeatureTransformError as err:  # named after the transform's own error type
            return DeadLetter(key=sample.key, stage=stage, error_type=type(err.cause).__name__,
                              message=str(err), feature=err.feature)
        except Exception as err:  # a user transform or decoder failing is a per-sample problem
            if stage is Stage.VALIDATE:
                raise
            return DeadLetter.from_error(sample.key, stage, err)

    def stand_in(self, sample: Sample, *, min_file_bytes: int) -> Sample | None:
        """The sample with each file's bytes replaced by zeros of its listed size, or None.

        Its record has exactly the size of the real one, so the writer can plan a file-backed
        sample without reading the file. Only when every file feeds a feature that takes any
        bytes (``Scalar(DType.BYTES)``: content cannot make it invalid), carries its
        ``size_bytes``, the files hold at least ``min_file_bytes`` together, and no transform
        applies; otherwise None.
        """
        if self._transforms:
            return None
        sizes = {}
        for name, value in sample.values.items():
            if value.__class__ is FileRef:
                if value.size_bytes is None or name not in self._any_bytes:
                    return None
                sizes[name] = value.size_bytes
        if not sizes or sum(sizes.values()) < min_file_bytes:
            return None
        return Sample(sample.key, {**sample.values, **{name: bytes(size) for name, size in sizes.items()}})

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

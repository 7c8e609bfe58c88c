"""RecordBuilder: one sample to one serialized record, or to a dead letter with its stage.

Used by the encoding stage for every sample, and by shard writers to rebuild the records of
file-backed samples that were spilled as references (their payload is read from the source
again instead of being written to a spill run and read back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core import wire
from beam_tfrecord.core.batch_encoder import BatchEncoder
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.errors import FeatureTransformError, SampleError, SampleReadError, StoreError

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
            except StoreError:
                raise  # the store failed, not this sample: the job stops with it
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
        except StoreError:
            raise  # the store failed, not this sample (``load_file_refs``): the job stops with it
        except Exception as err:  # a user transform or decoder failing is a per-sample problem
            if stage is Stage.VALIDATE:
                raise
            return DeadLetter.from_error(sample.key, stage, err)

    def listed_record_bytes(self, sample: Sample, *, min_file_bytes: int) -> int | DeadLetter | None:
        """The length of the sample's record, from its files' listed sizes (none is read), or None.

        Lets the writer plan a file-backed sample without reading its files. Only when its files
        can be spliced in (``_file_scalars``), each carries its ``size_bytes`` and they hold at least
        ``min_file_bytes`` together; otherwise None. The sample's other values are validated and
        encoded as in ``build`` (a DeadLetter names a bad one), with each file's value empty; the
        files' sizes are then added to the record's lengths (``wire.record_bytes_with_values``).
        """
        sizes = self._listed_file_sizes(sample, min_file_bytes)
        if sizes is None:
            return None
        record = self._with_empty_files(sample, list(sizes))
        if type(record) is DeadLetter:
            return record
        return wire.record_bytes_with_values(record, sizes)

    def listed_record_bytes_of_chunk(self, samples: Sequence[Sample], batch: BatchEncoder, *,
                                     min_file_bytes: int) -> list[int] | None:
        """``listed_record_bytes`` of every sample of a chunk at once (``BatchEncoder.listed_record_bytes``),
        or None: then sample by sample. Only when every sample qualifies as there, all with the same
        file features, and the batch encoder covers their other values (a bad value: None, so that
        ``listed_record_bytes`` names it)."""
        listed = [self._listed_file_sizes(sample, min_file_bytes) for sample in samples]
        first = listed[0] if listed else None
        if first is None or any(sizes is None or sizes.keys() != first.keys() for sizes in listed):
            return None
        columns = {name: [sizes[name] for sizes in listed if sizes is not None] for name in first}
        empty = dict.fromkeys(first, b"")
        return batch.listed_record_bytes([{**sample.values, **empty} for sample in samples], columns)

    def _listed_file_sizes(self, sample: Sample, min_file_bytes: int) -> dict[str, int] | None:
        """Each file's listed size, by feature, when the sample's record can be sized from the listing:
        its files can be spliced in (``_file_scalars``), each carries its ``size_bytes``, and they
        hold at least ``min_file_bytes`` together; otherwise None."""
        names = self._file_scalars(sample)
        if names is None:
            return None
        sizes = {name: sample.values[name].size_bytes for name in names}
        if None in sizes.values() or sum(sizes.values()) < min_file_bytes:
            return None
        return sizes

    def build_parts(self, sample: Sample) -> tuple[list[bytes], int] | DeadLetter | None:
        """``build``'s record as parts (and its length) with the files' bytes not copied, or None.

        For a sample whose files can be spliced in (``_file_scalars``); otherwise None (``build``
        it). Large files' records are rebuilt so by their shard writer: the protobuf library encodes
        the other values, and the files' bytes go from their read to the shard without a copy.
        """
        names = self._file_scalars(sample)
        if names is None:
            return None
        try:
            loaded = load_file_refs(sample)
        except SampleReadError as err:
            return DeadLetter.from_error(sample.key, Stage.READ, err)
        record = self._with_empty_files(sample, names)
        if type(record) is DeadLetter:
            return record
        return wire.record_parts_with_values(record, {name: loaded.values[name] for name in names})

    def _file_scalars(self, sample: Sample) -> list[str] | None:
        """The names of the sample's files when every file feeds a feature that takes any bytes
        (``Scalar(DType.BYTES)``: content cannot make it invalid) and no transform applies; else None."""
        if self._transforms:
            return None
        names = [name for name, value in sample.values.items() if value.__class__ is FileRef]
        if not names or not self._any_bytes.issuperset(names):
            return None
        return names

    def _with_empty_files(self, sample: Sample, names: list[str]) -> bytes | DeadLetter:
        """``build`` of the sample with each named file's value empty."""
        return self.build(Sample(sample.key, {**sample.values, **dict.fromkeys(names, b"")}))

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


class RecordRebuilder:
    """``RecordBuilder(schema, feature_transforms).build``, the builder made at the first call (it pickles until
    then): a side file that needs a spilled sample's record again (``quality.digest_files.DigestBuffer``)."""

    def __init__(self, schema: Schema, feature_transforms: Mapping[str, FeatureTransform]) -> None:
        self._schema = schema
        self._transforms = dict(feature_transforms)
        self._builder: RecordBuilder | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_builder": None}

    def __call__(self, sample: Sample) -> bytes | DeadLetter:
        if self._builder is None:
            self._builder = RecordBuilder(self._schema, self._transforms)
        return self._builder.build(sample)

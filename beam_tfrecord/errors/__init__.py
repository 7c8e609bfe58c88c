"""Typed errors raised by beam-tfrecord, importable from here (``from beam_tfrecord.errors import X``).

Each names what was wrong, where and what was expected, and reports this package as its module, so that
pickled names and a worker's error text stay stable.
"""

from beam_tfrecord.errors.base import (
    BeamTFRecordError,
)
from beam_tfrecord.errors.dataset import (
    CorruptShardError,
    DatasetNotFoundError,
    IncompatibleSchemasError,
    ManifestError,
    ManifestVersionError,
    MissingShardError,
    ReaderError,
    RecordSchemaError,
    SchemaError,
    ShardChangedError,
    ShardNameError,
    StatisticsFileError,
    UnknownSplitError,
)
from beam_tfrecord.errors.inputs import (
    MAX_REJECTED_ARGUMENT,
    MAX_REJECTED_FLAG,
    AudioDecodeError,
    DuplicatesFoundError,
    FeatureTransformError,
    ImageDecodeError,
    InputChangedError,
    MalformedRowError,
    PathOutsideRootError,
    RejectedSamplesError,
    SampleError,
    SampleReadError,
    SourceError,
)
from beam_tfrecord.errors.job import (
    ClusterStalledError,
    DiskFullError,
    DriftHeldError,
    DriftThresholdsError,
    DurationError,
    EncodePoolError,
    InputIndexError,
    InputsMismatchError,
    LatestPointerError,
    LeaseHolderLike,
    LocalPathError,
    OutputLockedError,
    OutputPathError,
    PipelineInvariantError,
    RefreshError,
    ResumeMismatchError,
    ShardingError,
    UnboundedInputError,
    WriterOptionError,
)

__all__ = [
    "MAX_REJECTED_ARGUMENT",
    "MAX_REJECTED_FLAG",
    "AudioDecodeError",
    "BeamTFRecordError",
    "ClusterStalledError",
    "CorruptShardError",
    "DatasetNotFoundError",
    "DiskFullError",
    "DriftHeldError",
    "DriftThresholdsError",
    "DuplicatesFoundError",
    "DurationError",
    "EncodePoolError",
    "FeatureTransformError",
    "ImageDecodeError",
    "IncompatibleSchemasError",
    "InputChangedError",
    "InputIndexError",
    "InputsMismatchError",
    "LatestPointerError",
    "LeaseHolderLike",
    "LocalPathError",
    "MalformedRowError",
    "ManifestError",
    "ManifestVersionError",
    "MissingShardError",
    "OutputLockedError",
    "OutputPathError",
    "PathOutsideRootError",
    "PipelineInvariantError",
    "ReaderError",
    "RecordSchemaError",
    "RefreshError",
    "RejectedSamplesError",
    "ResumeMismatchError",
    "SampleError",
    "SampleReadError",
    "SchemaError",
    "ShardChangedError",
    "ShardNameError",
    "ShardingError",
    "SourceError",
    "StatisticsFileError",
    "UnboundedInputError",
    "UnknownSplitError",
    "WriterOptionError",
]

for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type):
        _value.__module__ = __name__

"""The errors package: every error imports from ``beam_tfrecord.errors`` and is named as one of its members."""

from __future__ import annotations

import pickle
import traceback

import pytest

from beam_tfrecord import errors
from beam_tfrecord.engine import error_from_worker

# Every name ``beam_tfrecord/errors.py`` held before it became a package (one module per family).
NAMES = (
    "LeaseHolderLike", "BeamTFRecordError", "SchemaError", "RecordSchemaError", "SampleError", "SampleReadError",
    "ManifestError", "ManifestVersionError", "UnknownSplitError", "DatasetNotFoundError", "ShardNameError",
    "ShardingError", "WriterOptionError", "LocalPathError", "InputsMismatchError", "ResumeMismatchError",
    "UnboundedInputError", "CorruptShardError", "PipelineInvariantError", "EncodePoolError",
    "MAX_REJECTED_ARGUMENT", "MAX_REJECTED_FLAG", "RejectedSamplesError", "MalformedRowError",
    "PathOutsideRootError", "SourceError", "ImageDecodeError", "ReaderError", "IncompatibleSchemasError",
    "MissingShardError", "FeatureTransformError", "RefreshError", "LatestPointerError", "OutputLockedError",
    "AudioDecodeError", "InputChangedError", "ClusterStalledError", "InputIndexError", "DurationError",
    "DiskFullError",
    "OutputPathError",  # added with WriteBalancedTFRecord's file_path_prefix (issue 47)
    "DriftHeldError", "DriftThresholdsError", "StatisticsFileError",  # the drift check (issue 50)
    "DuplicatesFoundError",  # duplicates=fail (issue 48)
    "ShardChangedError",  # a shard changed under a DataLoader worker's reference (issue 49)
    "StoreError", "BucketNotFoundError", "StoreUnreachableError", "StoreTimeoutError", "StoreAccessError",
    "StoreThrottledError", "StoreDeadlinesError",  # a store that fails (issues 64 and 65)
    "NotSelfContainedError",  # an outside reader given a version that shares shards (issue 60)
    "ColumnsError", "FeatureNameError", "DuplicateFeatureKeyError", "MissingFeatureValuesError",
    "UnknownKeyError",  # features added to a published version (issue 61)
    "StreamingRunnerError",  # a streaming write on a runner that cannot stream (issue 62)
    "WorkerProcessLostError",  # a local worker process killed (out of memory) while the job waited for it
)
ERRORS = [getattr(errors, name) for name in NAMES if name.endswith("Error")]


def test_every_name_imports_from_the_package():
    assert sorted(errors.__all__) == sorted(NAMES)
    namespace: dict[str, object] = {}
    exec(f"from beam_tfrecord.errors import {', '.join(NAMES)}", namespace)  # the import users write
    assert all(namespace[name] is getattr(errors, name) for name in NAMES)


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_each_error_is_named_as_a_member_of_the_package(cls):
    assert cls.__module__ == "beam_tfrecord.errors"
    assert issubclass(cls, errors.BeamTFRecordError)


@pytest.mark.parametrize("err", [errors.ShardingError("bad"), errors.DiskFullError("/d/x", 10, 2),
                                 errors.CorruptShardError("s", "data CRC mismatch", 16),
                                 errors.BucketNotFoundError(store="s3", bucket="b", path="s3://b/ds", kind="bucket",
                                                            endpoint="http://127.0.0.1:1")],
                         ids=lambda err: type(err).__name__)
def test_a_workers_error_text_names_the_package_and_reads_back(err):
    text = "".join(traceback.format_exception_only(err)).strip()
    assert text == f"beam_tfrecord.errors.{type(err).__name__}: {err}"
    restored = error_from_worker(RuntimeError(f"{text} [while running 'Write/Spill/WriteShards']"))
    assert type(restored) is type(err) and str(restored) == str(err)


def test_an_error_pickles_by_its_package_name():
    data = pickle.dumps(errors.ShardingError("bad"))
    assert b"beam_tfrecord.errors\x94" in data or b"beam_tfrecord.errors\n" in data
    assert str(pickle.loads(data)) == "bad"

"""Typed errors raised by beam-tfrecord.

Every error names what was wrong, where, and what was expected, so that a
message read in a Dataflow log is enough to find the bad input.
"""

from __future__ import annotations

import math
from typing import Protocol


class LeaseHolderLike(Protocol):
    """What an ``OutputLockedError`` says of the job holding the lease (``lease.LeaseHolder``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def started_at(self) -> str: ...


class BeamTFRecordError(Exception):
    """Base class of every error this package raises on purpose."""


class SchemaError(BeamTFRecordError, ValueError):
    """A schema (feature spec) is malformed: a bad dtype, shape or option."""


class RecordSchemaError(SchemaError):
    """Serialized records given to ``WriteBalancedTFRecord`` share no schema (a feature holds int64
    values in some records and floats in others): no parse spec reads them all."""


class SampleError(BeamTFRecordError, ValueError):
    """One sample cannot be written: it names the sample, the feature and the expectation.

    Attributes:
        sample_key: the stable key of the sample (its source path, row id...).
        feature: the feature name, or None when the problem is the whole sample.
        expected: what the schema asks for.
        got: a short description of what was found.
    """

    def __init__(self, sample_key: str, feature: str | None, expected: str, got: str) -> None:
        self.sample_key = sample_key
        self.feature = feature
        self.expected = expected
        self.got = got
        where = f"feature {feature!r}: " if feature is not None else ""
        super().__init__(f"{where}expected {expected}, got {got} in sample {sample_key!r}")


class SampleReadError(BeamTFRecordError, OSError):
    """The payload of a sample (a file it points to) could not be read."""

    def __init__(self, sample_key: str, feature: str | None, path: str, reason: str) -> None:
        self.sample_key = sample_key
        self.feature = feature
        self.path = path
        self.reason = reason
        where = f"feature {feature!r}: " if feature is not None else ""
        super().__init__(f"{where}cannot read {path!r} ({reason}) in sample {sample_key!r}")


class ManifestError(BeamTFRecordError, ValueError):
    """A manifest is missing, unreadable or malformed."""


class ManifestVersionError(ManifestError):
    """A manifest was written by a format version this code does not read."""

    def __init__(self, found: object, supported: int) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"manifest format version {found!r} is not supported; this beam-tfrecord reads version {supported}"
        )


class UnknownSplitError(ManifestError, LookupError):
    """A split name that the dataset does not have."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"split {name!r} is not in this dataset; it has {known}")


class DatasetNotFoundError(BeamTFRecordError, FileNotFoundError):
    """No published dataset (no manifest) exists at a path."""


class ShardNameError(BeamTFRecordError, ValueError):
    """A file name does not follow the shard naming template."""


class ShardingError(BeamTFRecordError, ValueError):
    """Sharding options are inconsistent, or a plan cannot meet them."""


class WriterOptionError(BeamTFRecordError, ValueError):
    """An option of the writer (not of sharding) is out of range, or does not fit the runner."""


class LocalPathError(WriterOptionError):
    """A local path given to a job whose workers may run on other machines, where it names another
    disk or nothing (``beam_tfrecord.beam.worker_placement``). Raised before any work starts.

    Attributes:
        role: what the path is (``--output``, ``output_dir``...).
        path: the local path.
        reason: why the workers may not see it (the runner and its options).
    """

    def __init__(self, role: str, path: str, reason: str, declare: str) -> None:
        self.role = role
        self.path = path
        self.reason = reason
        super().__init__(f"{role} {path!r} is a local path, but {reason}: they would not see it. Put it on "
                         f"storage every worker reads (gs://BUCKET/...), or, if every worker mounts this path "
                         f"(NFS, a bucket mounted with gcsfuse), say so with {declare}")


class InputsMismatchError(BeamTFRecordError):
    """The workers read other inputs than the client planned (listed, counted, took labels from):
    they do not see the client's files, or the inputs changed while the job ran. Nothing is published.

    Attributes:
        planned: inputs the client planned.
        found: inputs the workers read.
    """

    def __init__(self, where: str, planned: int, found: int, detail: str) -> None:
        self.planned = planned
        self.found = found
        super().__init__(f"{where}: the workers read {found} inputs where the client planned {planned}{detail}; "
                         "nothing was published. Either the workers do not see the client's inputs (workers on "
                         "other machines see shared storage, gs://..., and only the folders they mount) or the "
                         "inputs changed while the job ran")


class ResumeMismatchError(BeamTFRecordError):
    """A build asked to resume found only killed builds made with other inputs or options: their records
    would not be this build's (``beam_tfrecord.spill_resume``). Nothing is reused or published."""

    def __init__(self, temp_dir: str, output_dir: str) -> None:
        self.temp_dir = temp_dir
        super().__init__(f"cannot resume in {output_dir!r}: the killed build in {temp_dir!r} was made from other "
                         "inputs or options (files added, changed or removed since, or another schema, split, "
                         "sharding, salt or transform); run without resume for a clean build (its folder is "
                         "left as it is), or with the inputs and options of that build")


class UnboundedInputError(WriterOptionError):
    """The writer was given an unbounded PCollection (a streaming source): it is a batch writer,
    which writes one dataset of its whole input. Raised when the pipeline is built."""


class CorruptShardError(BeamTFRecordError):
    """A shard's bytes do not match the TFRecord framing or the manifest.

    Attributes:
        shard: the shard's path.
        offset: byte offset (in the uncompressed record stream) where the problem was found,
            or None when the problem concerns the whole file (size, checksum, count).
        reason: what was wrong.
    """

    def __init__(self, shard: str, reason: str, offset: int | None = None) -> None:
        self.shard = shard
        self.offset = offset
        self.reason = reason
        at = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"shard {shard!r}{at}: {reason}")


class PipelineInvariantError(BeamTFRecordError, RuntimeError):
    """Two steps of the pipeline disagree in a way correct code never produces: a bug in
    beam-tfrecord or in the runner, not in the inputs or the options.

    Attributes:
        stage: the step that found it ("plan", "shard 12", "publish").
        reason: what disagreed with what.
    """

    def __init__(self, stage: str, reason: str) -> None:
        self.stage = stage
        self.reason = reason
        super().__init__(f"pipeline invariant broken at {stage}: {reason} (a bug in beam-tfrecord or the runner, "
                         "not in the inputs; please report it)")


class EncodePoolError(BeamTFRecordError, RuntimeError):
    """A process of the writer's encoding pool died or failed: the bundle fails (and nothing is published)."""


# How a caller sets the rejection threshold, as RejectedSamplesError's hint spells it.
MAX_REJECTED_ARGUMENT = "max_rejected_fraction="  # the writer transforms' argument (Python)
MAX_REJECTED_FLAG = "--max_rejected_fraction="  # the jobs' flag (command line)


class RejectedSamplesError(BeamTFRecordError):
    """More samples were rejected than the job allows, or every one; the dataset was not published.

    The message ends with the threshold that would let these rejections through, spelled as the
    caller sets it (``option``: ``MAX_REJECTED_ARGUMENT`` from Python, ``MAX_REJECTED_FLAG`` from a job);
    none when every input was rejected (a dataset of 0 records is never published).
    """

    def __init__(self, num_rejected: int, num_inputs: int, max_fraction: float, dead_letter_path: str,
                 examples: list[str], *, option: str = MAX_REJECTED_ARGUMENT) -> None:
        self.num_rejected = num_rejected
        self.num_inputs = num_inputs
        self.max_fraction = max_fraction
        self.dead_letter_path = dead_letter_path
        shown = "\n  ".join(examples)
        every = num_rejected == num_inputs  # no threshold publishes a dataset of 0 records from inputs
        how_many = (f"all {num_inputs} input samples were rejected (a dataset of 0 records is never published)"
                    if every else f"{num_rejected} of {num_inputs} input samples were rejected, more than the "
                                  f"allowed fraction {max_fraction:g}")
        enough = math.ceil(num_rejected / max(num_inputs, 1) * 10_000) / 10_000  # rounded up: lets them through
        hint = "" if every else f"\n(Allow skipping with {option}{min(enough, 1.0):g} or more.)"
        super().__init__(
            f"{how_many}; the dataset was NOT published. Every reason is in {dead_letter_path}. "
            f"First reasons:\n  {shown}{hint}"
        )


class MalformedRowError(SampleError):
    """A manifest row (CSV/JSONL/Parquet) cannot be turned into a sample, e.g. too few columns."""


class PathOutsideRootError(SampleReadError):
    """A manifest points to a file outside the root the user restricted paths to."""

    def __init__(self, sample_key: str, feature: str | None, path: str, root: str) -> None:
        super().__init__(sample_key, feature, path, f"it resolves outside the allowed root {root!r}")
        self.root = root


class SourceError(BeamTFRecordError, ValueError):
    """A source (manifest, array file, folder) is unusable as a whole: no files, no header, bad options."""


class ImageDecodeError(BeamTFRecordError, ValueError):
    """Image bytes could not be decoded (truncated, corrupt, or not an image at all)."""


class ReaderError(BeamTFRecordError, ValueError):
    """Read options are invalid: a malformed split expression, a bad worker index or batch size."""


class IncompatibleSchemasError(ReaderError):
    """Datasets mixed in one read have schemas that differ, so their examples cannot share batches.

    Attributes:
        first, second: the two datasets' paths.
        feature: the first feature that differs.
        reason: how it differs.
    """

    def __init__(self, first: str, second: str, feature: str, reason: str) -> None:
        self.first, self.second, self.feature, self.reason = first, second, feature, reason
        super().__init__(f"datasets {first!r} and {second!r} cannot be mixed: feature {feature!r} {reason}")


class MissingShardError(CorruptShardError, FileNotFoundError):
    """A shard the manifest lists is not on storage."""

    def __init__(self, shard: str) -> None:
        super().__init__(shard, "listed in the manifest but missing from storage")


class FeatureTransformError(BeamTFRecordError, ValueError):
    """A per-feature transform (decode, resize...) failed on one sample's value.

    Attributes:
        sample_key: the sample's key.
        feature: the feature whose transform failed.
        cause: the exception the transform raised.
    """

    def __init__(self, sample_key: str, feature: str, cause: BaseException) -> None:
        self.sample_key = sample_key
        self.feature = feature
        self.cause = cause
        super().__init__(f"feature {feature!r}: {cause} in sample {sample_key!r}")


class RefreshError(BeamTFRecordError):
    """A versioned dataset root (ROOT/LATEST, ROOT/versions/<id>/) is inconsistent or cannot be refreshed."""


class LatestPointerError(RefreshError, ValueError):
    """A dataset root's LATEST pointer is unreadable or names a version that is not complete.

    Attributes:
        root: the dataset root.
        reason: what was wrong with the pointer.
    """

    def __init__(self, root: str, reason: str) -> None:
        self.root = root
        self.reason = reason
        super().__init__(f"dataset root {root!r}: LATEST pointer {reason}")


class OutputLockedError(BeamTFRecordError):
    """Another job holds the lease on an output directory (see ``lease.py``).

    Attributes:
        path: the output.
        holder: the job that holds it (a ``lease.LeaseHolder``: run id, pid, host, start time).
    """

    def __init__(self, path: str, holder: "LeaseHolderLike") -> None:
        self.path = path
        self.holder = holder
        super().__init__(f"{path} is being written by another job: run {holder.run_id} (pid {holder.pid} on "
                         f"{holder.host}), started {holder.started_at}; wait for it, or pass --break_lock if "
                         "it is known to be dead")


class AudioDecodeError(BeamTFRecordError, ValueError):
    """Audio bytes could not be decoded (not a WAV file, truncated, unsupported encoding)."""


class InputChangedError(BeamTFRecordError):
    """A file-backed sample read again while writing its shard no longer gives the planned record.

    Large file-backed records are read from their source twice (validated, then written); a file
    changed or deleted in between would make the shard differ from the plan, so the job fails.
    """

    def __init__(self, sample_key: str, reason: str) -> None:
        self.sample_key = sample_key
        self.reason = reason
        super().__init__(f"input of sample {sample_key!r} changed while the job ran: {reason}; "
                         "re-run the job once the inputs are stable")


class ClusterStalledError(BeamTFRecordError):
    """A distributed cluster could not go on with the job: its workers stayed paused or kept being
    restarted for lack of memory. Raised instead of waiting forever (paused workers never resume
    while what they hold is not released) or of the engine's bare ``KilledWorker``.

    Attributes:
        reason: what was seen (workers paused, restarted, for how long).
        memory_limit_bytes: each worker's memory limit, when the scheduler reports one.
    """

    def __init__(self, reason: str, memory_limit_bytes: int | None) -> None:
        self.reason = reason
        self.memory_limit_bytes = memory_limit_bytes
        limit = (f"{memory_limit_bytes / 2**30:.2f} GiB per worker" if memory_limit_bytes
                 else "no memory limit reported")
        super().__init__(f"the Dask cluster stalled: {reason} (memory limit: {limit}); give each worker more memory "
                         "(--dask_memory_limit for the cluster a job starts, the workers' --memory-limit otherwise) "
                         "or hold less per task (a smaller --dask_partition_size or --spill_run_mib)")


class InputIndexError(RefreshError):
    """A version's input index (``input_index.json``) is malformed or disagrees with its manifest.

    An incremental refresh then builds the version in full instead; the message says why.

    Attributes:
        path: the index file.
        reason: what was wrong.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"input index {path}: {reason}")
        self.path = path
        self.reason = reason


class DurationError(BeamTFRecordError, ValueError):
    """A duration given as text (an option such as ``--min_version_age``) is not one this project reads.

    Attributes:
        text: the text given.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(f"bad duration {text!r}: expected a number with a unit, d (days), h (hours), m (minutes) "
                         "or s (seconds), parts adding up (24h, 30m, 1h30m, 90s), or 0")


class DiskFullError(BeamTFRecordError, OSError):
    """A write ran out of space (ENOSPC, or EDQUOT: the user's quota) on a local disk.

    The job that meets it publishes nothing and deletes its temporary files; run it again once
    there is room (``disk_space.raise_typed_when_full`` raises it where the writer writes).

    Attributes:
        path: the file being written.
        needed_bytes: how many bytes that write needed (a spill run, a shard's records, a small file).
        free_bytes: what the filesystem had free just after the failure, when it could be asked.
    """

    def __init__(self, path: str, needed_bytes: int, free_bytes: int | None = None) -> None:
        self.path = path
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        free = f", {free_bytes} bytes free there" if free_bytes is not None else ""
        super().__init__(f"disk full writing {path!r}: it needed {needed_bytes} bytes{free}; nothing was "
                         "published and the job's temporary files were deleted: free space (or write elsewhere) "
                         "and run it again")

"""Errors of a build as configured and run: writer and sharding options, paths workers cannot see,
inputs that differ from the plan, resume, locks, refreshes, the cluster and the disk."""

from __future__ import annotations

import signal
from typing import Protocol

from beam_tfrecord.errors.base import BeamTFRecordError


class ShardingError(BeamTFRecordError, ValueError):
    """Sharding options are inconsistent, or a plan cannot meet them."""


class WriterOptionError(BeamTFRecordError, ValueError):
    """An option of the writer (not of sharding) is out of range, or does not fit the runner."""


class LocalPathError(WriterOptionError):
    """A local path given to a job whose workers may run on other machines, where it names another
    disk or nothing (``beam_tfrecord.engine.worker_placement``). Raised before any work starts.

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


class OutputPathError(WriterOptionError):
    """The output's path cannot take this dataset: its folder is a file, or files another job wrote match the
    names its shards would take. Raised when the writer is built, before any work.

    Attributes:
        path: the path at fault (the folder that is a file, or the first file in the way).
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)


class UnboundedInputError(WriterOptionError):
    """The writer was given an unbounded PCollection (a streaming source): it is a batch writer,
    which writes one dataset of its whole input. Raised when the pipeline is built."""


class StreamingRunnerError(UnboundedInputError):
    """A streaming write (an unbounded input) on a runner that cannot stream (``RunnerTraits.streams``: Beam's
    DaskRunner runs bounded pipelines only). Raised when the pipeline is built, before any work.

    Attributes:
        runner: the runner's name.
    """

    def __init__(self, runner: str) -> None:
        self.runner = runner
        super().__init__(f"the {runner} cannot run a streaming pipeline: this writer's input is unbounded (a "
                         "streaming source). Run it on a runner that streams (the DirectRunner with --streaming, "
                         "Dataflow or Flink with --streaming), or give it a bounded input")


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
    would not be this build's (``beam_tfrecord.spill.resume``). Nothing is reused or published."""

    def __init__(self, temp_dir: str, output_dir: str) -> None:
        self.temp_dir = temp_dir
        super().__init__(f"cannot resume in {output_dir!r}: the killed build in {temp_dir!r} was made from other "
                         "inputs or options (files added, changed or removed since, or another schema, split, "
                         "sharding, salt or transform); run without resume for a clean build (its folder is "
                         "left as it is), or with the inputs and options of that build")


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


class WorkerProcessLostError(BeamTFRecordError, RuntimeError):
    """A local worker process ended while the job still needed it (killed: the kernel's out-of-memory killer,
    a crash in native code; or exited on its own). Raised instead of waiting forever for its answers, as Beam
    2.77's engine does; the job fails as when a DoFn fails (a dataset is published only once its manifest is
    written).

    Attributes:
        worker_id: the runner's name for the worker (``worker_1``).
        exit_code: its exit code as ``subprocess`` gives it (negative: the signal that ended it), or None
            when it could not be told.
    """

    def __init__(self, worker_id: str, exit_code: int | None) -> None:
        self.worker_id = worker_id
        self.exit_code = exit_code
        super().__init__(f"local worker process {worker_id} ended while the job still needed it: "
                         f"{_how_it_ended(exit_code)}; the job failed. If it ran out of memory, run with fewer "
                         "local workers (--direct_num_workers=N) or smaller spill runs (--spill_run_mib)")


def _how_it_ended(exit_code: int | None) -> str:
    """``"killed by SIGKILL (exit code -9), the signal of the kernel's out-of-memory killer (see dmesg)"``,
    ``"it exited with code 3"``: how a worker process ended, from its exit code."""
    if exit_code is None:
        return "its exit code is unknown"
    if exit_code >= 0:
        return f"it exited with code {exit_code}"
    try:
        name = signal.Signals(-exit_code).name
    except ValueError:
        name = f"signal {-exit_code}"
    oom = ", the signal of the kernel's out-of-memory killer (see dmesg)" if -exit_code == signal.SIGKILL else ""
    return f"killed by {name} (exit code {exit_code}){oom}"


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


class DurationError(BeamTFRecordError, ValueError):
    """A duration given as text (an option such as ``--min_version_age``) is not one this project reads.

    Attributes:
        text: the text given.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(f"bad duration {text!r}: expected a number with a unit, d (days), h (hours), m (minutes) "
                         "or s (seconds), parts adding up (24h, 30m, 1h30m, 90s), or 0")


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


class RefreshError(BeamTFRecordError):
    """A versioned dataset root (ROOT/LATEST, ROOT/versions/<id>/) is inconsistent or cannot be refreshed."""


class DriftThresholdsError(BeamTFRecordError, ValueError):
    """A drift thresholds file (docs/drift.md) is unreadable or holds an unknown key or a bad value.

    Attributes:
        path: the file.
        reason: what was wrong, naming the key.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"drift thresholds {path}: {reason}")


class DriftHeldError(RefreshError):
    """A refresh run with ``--on_drift hold`` wrote a version whose statistics moved past the drift thresholds
    against LATEST's: LATEST was not moved, the version is kept for inspection (``drift.json`` in it).

    Attributes:
        root: the dataset root.
        version_id: the held version.
        latest: the version LATEST still names.
        lines: one line per measure past its threshold (split, feature, measure, value, threshold).
    """

    def __init__(self, root: str, version_id: str, latest: str, lines: tuple[str, ...]) -> None:
        self.root = root
        self.version_id = version_id
        self.latest = latest
        self.lines = lines
        super().__init__(f"dataset root {root!r}: version {version_id} held, LATEST still names {latest}: "
                         f"{len(lines)} drift measure(s) past their thresholds:\n" + "\n".join(lines))


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

"""What the writer must know of each Beam runner: one table, read by the writer, the jobs and the Dask set-up.

Every workaround for a runner's behaviour keys on a trait here, never on a runner's name
elsewhere, so supporting a new runner is one row. A runner not in the table is taken to be a
distributed service with a disk-backed shuffle (Dataflow, Flink, Spark, Samza...).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, PortableOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

from beam_tfrecord import errors
from beam_tfrecord.errors import WriterOptionError


@dataclasses.dataclass(frozen=True)
class RunnerTraits:
    """A runner's behaviour that changes how the writer builds its pipeline.

    Attributes:
        in_memory_shuffle: its GroupByKey keeps what it groups in memory (no spill to disk, or only
            under memory pressure, after the fact): payload bytes must not go through it, so the
            writer spills sorted runs to storage instead (``FanIn.SPILL``).
        recomputes_side_inputs: it computes a side input again, from the start of the pipeline,
            inside every task that reads it (Beam 2.77's DaskRunner: a nested compute of the
            unoptimised graph): the writer joins with GroupByKey instead.
        drops_finish_bundle_output: what a DoFn emits in ``finish_bundle`` is lost (the DaskRunner
            collects a partition's outputs before calling it). The writer's DoFns emit nothing
            there; this row documents why.
        workers_on_this_machine: its workers run on this machine, so they can share a local
            folder (the live progress display).
    """

    in_memory_shuffle: bool = False
    recomputes_side_inputs: bool = False
    drops_finish_bundle_output: bool = False
    workers_on_this_machine: bool = False


_LOCAL = RunnerTraits(in_memory_shuffle=True, workers_on_this_machine=True)
_DISTRIBUTED = RunnerTraits()
_DASK = RunnerTraits(in_memory_shuffle=True, recomputes_side_inputs=True, drops_finish_bundle_output=True)
_DIRECT_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "TestDirectRunner", "LocalBatchRunner")
FIXED_DASK_RUNNER = "beam_tfrecord.beam.dask_runner.DaskRunner"  # Beam's, two defects fixed (see that module)
BEAM_DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"

# Keyed by the runner's dotted path (looked up first) or class name, and by Beam's short names.
_TABLE: Mapping[str, RunnerTraits] = {
    **dict.fromkeys(("DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner", "FnApiRunner",
                     "LocalBatchRunner", "PrismRunner", "InteractiveRunner", "TestDirectRunner", "direct", "prism"),
                    _LOCAL),
    "DaskRunner": _DASK,
    FIXED_DASK_RUNNER: dataclasses.replace(_DASK, drops_finish_bundle_output=False),
}


def traits_of_name(runner: str, *, job_endpoint: str | None = None) -> RunnerTraits:
    """The traits of the runner named ``runner`` (a class name, dotted path or Beam short name).

    The PortableRunner is local when it embeds its job service (no endpoint, or ``embed``) and
    takes the traits of a distributed runner when it submits to a job server (Flink, Spark).
    """
    name = runner.rsplit(".", 1)[-1]
    if name == "PortableRunner":
        return _LOCAL if job_endpoint in (None, "embed") else _DISTRIBUTED
    return _TABLE.get(runner, _TABLE.get(name, _DISTRIBUTED))


def runner_name_of(options: PipelineOptions) -> str:
    """The runner ``options`` choose, as they name it (a class name, dotted path or short name), or the
    class name of a runner object; DirectRunner when they name none."""
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    return runner if isinstance(runner, str) else type(runner).__name__


def traits_of_options(options: PipelineOptions) -> RunnerTraits:
    """The traits of the runner ``options`` choose (the DirectRunner when they name none)."""
    return traits_of_name(runner_name_of(options), job_endpoint=options.view_as(PortableOptions).job_endpoint)


def traits_of(pipeline: beam.Pipeline) -> RunnerTraits:
    """The traits of the runner ``pipeline`` runs on."""
    endpoint = pipeline.options.get_all_options().get("job_endpoint")
    runner = type(pipeline.runner)
    return traits_of_name(f"{runner.__module__}.{runner.__name__}", job_endpoint=endpoint)


class LocalBatchRunner(PipelineRunner):
    """The DirectRunner's batch engine (Beam's ``FnApiRunner``), set up as the DirectRunner sets it up,
    without the DirectRunner's first choice of Prism, and with beam-tfrecord's errors typed again.

    Beam 2.77's DirectRunner runs a pipeline on Prism when it can download it (online), where the
    Python workers run in the launching process and ``direct_running_mode`` has no effect; offline it
    runs this engine. The jobs, and pipelines the writer gives worker processes (``use_local_workers``),
    run this engine either way, so they use the worker processes the summary reports online and
    offline alike.

    A worker process's error reaches the launching process as a ``RuntimeError`` holding the
    worker's traceback as text; when it names a beam-tfrecord error, that error is raised instead
    (``error_from_worker``), as one in-memory worker raises it.
    """

    def run_pipeline(self, pipeline: beam.Pipeline, options: PipelineOptions) -> Any:
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        try:
            return fn_runner.FnApiRunner(provision_info=provision).run_pipeline(pipeline, options)
        except Exception as err:
            ours = error_from_worker(err)
            if ours is None:
                raise
            raise ours from err


# How Beam's worker harness words a DoFn's error: "<module>.<class>: <message> [while running '<step>']".
_NAMED_ERROR = re.compile(r"beam_tfrecord\.errors\.(\w+): ")
_STEP_SUFFIX = re.compile(r"(?: \[while running '[^']*'\])+\s*$")


def error_from_worker(err: BaseException) -> errors.BeamTFRecordError | None:
    """The beam-tfrecord error that ``err`` (a runner's error from a worker process) reports as text:
    the same class and message, without the attributes the original carried (the worker kept them).
    None when ``err`` already is one, or names none."""
    if isinstance(err, errors.BeamTFRecordError):
        return None
    text = str(err)
    named = list(_NAMED_ERROR.finditer(text))
    if not named:
        return None
    cls = getattr(errors, named[-1].group(1), None)  # the last: the error the DoFn raised
    if not (isinstance(cls, type) and issubclass(cls, errors.BeamTFRecordError)):
        return None
    restored = cls.__new__(cls)
    BaseException.__init__(restored, _STEP_SUFFIX.sub("", text[named[-1].end():]))
    return restored


def local_batch_runner_for(options: PipelineOptions) -> LocalBatchRunner | None:
    """``LocalBatchRunner`` when ``options`` choose the DirectRunner (by name, or by naming no runner),
    else None (the runner the options name)."""
    runner = options.view_as(StandardOptions).runner
    if runner is None or (isinstance(runner, str) and runner.rsplit(".", 1)[-1] == "DirectRunner"):
        return LocalBatchRunner()
    return None


def runs_on_direct_runner(pipeline: beam.Pipeline) -> bool:
    """Whether ``pipeline`` runs on Beam's DirectRunner (the only runner ``use_local_workers`` configures)."""
    return type(pipeline.runner).__name__ in _DIRECT_RUNNERS


def uses_dask_runner(options: PipelineOptions) -> bool:
    """Whether ``options`` choose a DaskRunner, Beam's or ``FIXED_DASK_RUNNER`` (the jobs run the latter,
    on a local cluster when the options name no scheduler)."""
    runner = options.view_as(StandardOptions).runner or ""
    return isinstance(runner, str) and runner.rsplit(".", 1)[-1] == "DaskRunner"


LOCAL_WORKERS_ENV = "BEAM_TFRECORD_LOCAL_WORKERS"  # the default number of local workers, when set


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity: ``taskset`` and containers' cpusets count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def runner_parallelism_chosen(options: PipelineOptions, flags: Sequence[str] = ()) -> bool:
    """Whether the user chose how the runner runs: ``flags`` (a job's command line) name
    ``--direct_num_workers`` or ``--direct_running_mode``, or ``options`` set either to other than
    Beam's defaults, or choose a runner other than the DirectRunner. A user's own pipeline built with
    ``--direct_num_workers=1`` cannot be told from Beam's default (``local_workers=1`` says it there).
    """
    given = {flag[2:].split("=", 1)[0] for flag in flags if flag.startswith("--")}
    if given & {"direct_num_workers", "direct_running_mode"}:
        return True
    runner = options.view_as(StandardOptions).runner
    runner_name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    if runner_name is not None and runner_name.rsplit(".", 1)[-1] not in _DIRECT_RUNNERS:
        return True
    direct = options.view_as(DirectOptions)
    return direct.direct_num_workers != 1 or direct.direct_running_mode != "in_memory"


SMALL_JOB_MAX_SAMPLES = 2_000
SMALL_JOB_MAX_INPUT_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class InputSize:
    """What a job knows of its input before it builds: what decides a small job.

    Attributes:
        samples: the samples it will read at most (an image listing's count, a manifest's rows, the
            arrays' first axis), or None when it cannot tell without reading them.
        num_bytes: the bytes of its input files (None: not known).
    """

    samples: int | None
    num_bytes: int | None

    def is_small(self) -> bool:
        """At most ``SMALL_JOB_MAX_SAMPLES`` samples in at most ``SMALL_JOB_MAX_INPUT_BYTES``.

        Two worker processes cost ~2 s before any data (start-up, Beam's imports in each, a gRPC
        round per stage) and save at most ~40% of the encoding time on 2 cores; the heaviest common
        sample, a 256-px JPEG decoded, resized and re-encoded, takes ~1 ms in one worker: below
        ~2,000 of them (or 64 MiB of input at ~0.5 GB/s), one in-memory worker is done first.
        Measured: ``docs/performance.md#small-jobs``.
        """
        return (self.samples is not None and self.samples <= SMALL_JOB_MAX_SAMPLES
                and self.num_bytes is not None and self.num_bytes <= SMALL_JOB_MAX_INPUT_BYTES)

    def describe(self) -> str:
        """``"300 samples, 1.2 MB"``: what the summary says the choice was made from."""
        samples = "? samples" if self.samples is None else f"{self.samples:,} samples"
        num_bytes = "? bytes" if self.num_bytes is None else f"{self.num_bytes / 1e6:,.1f} MB"
        return f"{samples}, {num_bytes}"


@dataclasses.dataclass(frozen=True)
class LocalWorkersChoice:
    """How many worker processes the DirectRunner is asked for, and why (the job summary's words)."""

    workers: int
    reason: str


def choose_local_workers(options: PipelineOptions, *, requested: int | None, flags: Sequence[str] = (),
                         input_size: InputSize | None = None) -> LocalWorkersChoice:
    """How many worker processes the writer asks the DirectRunner for (1: the runner as it is), and why.

    In this order: ``requested`` when given; 1 when the user chose the runner's parallelism
    (``runner_parallelism_chosen``: ``--direct_num_workers``, ``--direct_running_mode``, another
    runner); ``$BEAM_TFRECORD_LOCAL_WORKERS`` when set; 1 (one in-memory worker) when
    ``input_size`` is small (``InputSize.is_small``); else every core this process may use
    (``available_cores``).

    Raises:
        WriterOptionError: ``requested`` or the environment variable is not a whole number >= 1.
    """
    if requested is not None:
        reason = "as asked"
    elif runner_parallelism_chosen(options, flags):
        return LocalWorkersChoice(1, "the runner's own options")
    else:
        text = os.environ.get(LOCAL_WORKERS_ENV, "").strip()
        if text:
            try:
                requested = int(text)
            except ValueError:
                raise WriterOptionError(f"{LOCAL_WORKERS_ENV} must be a whole number >= 1, got {text!r}") from None
            reason = f"${LOCAL_WORKERS_ENV}"
        elif input_size is not None and input_size.is_small():
            return LocalWorkersChoice(1, f"a small input: {input_size.describe()}, at most "
                                         f"{SMALL_JOB_MAX_SAMPLES:,} samples and "
                                         f"{SMALL_JOB_MAX_INPUT_BYTES >> 20} MiB; --direct_num_workers=N to choose")
        else:
            return LocalWorkersChoice(available_cores(), "one per core by default")
    if requested < 1:
        raise WriterOptionError(f"local_workers must be >= 1, got {requested}")
    return LocalWorkersChoice(requested, reason)


def local_workers_for(options: PipelineOptions, *, requested: int | None, flags: Sequence[str] = (),
                      input_size: InputSize | None = None) -> int:
    """How many worker processes the writer asks the DirectRunner for: ``choose_local_workers``'s count."""
    return choose_local_workers(options, requested=requested, flags=flags, input_size=input_size).workers


def use_local_workers(pipeline: beam.Pipeline, workers: int) -> None:
    """Has ``pipeline`` (on the DirectRunner) run in ``workers`` worker processes (the DirectRunner's
    ``multi_processing`` mode): each runs whole fused stages (read, encode, spill; write shards), so
    no record crosses a process. It then runs on ``LocalBatchRunner``, which is the engine that mode
    belongs to (Prism, the DirectRunner's first choice online, ignores it).

    The workers are fresh interpreters: they get this process's ``sys.path`` (through
    ``PYTHONPATH``, which they inherit with the environment) so that they import what this process
    imports, as the in-memory worker did (a script's sibling modules, a notebook's folder).
    Measured: ``docs/performance.md#every-core-by-default``. Does nothing for one worker.
    """
    if workers <= 1:
        return
    if type(pipeline.runner).__name__ in ("DirectRunner", "SwitchingDirectRunner"):
        pipeline.runner = LocalBatchRunner()
    direct = pipeline.options.view_as(DirectOptions)
    direct.direct_running_mode = "multi_processing"
    direct.direct_num_workers = workers
    _quiet_worker_start_up()
    paths = [path for path in sys.path if path]
    known = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*known, *(p for p in paths if p not in known)]))


def use_fixed_dask_runner(pipeline: beam.Pipeline) -> None:
    """Has ``pipeline``, when it runs on Beam's DaskRunner, run on ``FIXED_DASK_RUNNER`` instead: Beam's
    runner with the defect that holds a job's whole input in worker memory fixed (measured: Beam's
    fails with ``CancelledError`` on 4.4 GB over two 1 GiB workers; the fixed one writes the same
    bytes at a 1.91 GiB peak). The jobs choose it themselves; this is for a user's own pipeline. The
    fixed runner is a subclass, so everything else (options, client, result) is Beam's. Applies to the
    whole pipeline the writer is part of; any other runner is left as it is.
    """
    runner = type(pipeline.runner)
    if f"{runner.__module__}.{runner.__name__}" != BEAM_DASK_RUNNER:
        return
    from beam_tfrecord.beam.dask_runner import DaskRunner  # Beam's DaskRunner is importable, so is this

    pipeline.runner = DaskRunner()
    logging.getLogger(__name__).info("running the pipeline on %s (Beam's DaskRunner, fixed) instead of %s",
                                     FIXED_DASK_RUNNER, BEAM_DASK_RUNNER)


WORKER_LOG_RELAY = "apache_beam.runners.portability.local_job_service"  # logs what worker processes log
# What every DirectRunner worker process logs at WARNING as it starts (Beam 2.77), relayed to this
# process's log: true of every run, and nothing a user can act on.
_WORKER_START_UP_NOISE = ("No semi_persistent_directory found", "Discarding unparseable args")


class _DropWorkerStartUpNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(noise in message for noise in _WORKER_START_UP_NOISE)


def _quiet_worker_start_up() -> None:
    """Drops the two start-up warnings of each worker (once per process; other worker logs pass)."""
    relay = logging.getLogger(WORKER_LOG_RELAY)
    if not any(isinstance(f, _DropWorkerStartUpNoise) for f in relay.filters):
        relay.addFilter(_DropWorkerStartUpNoise())


def local_workers_of(options: PipelineOptions) -> int:
    """The worker processes a finished or built pipeline's options give the DirectRunner (1: this one)."""
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode != "multi_processing":  # in_memory, multi_threading: threads of this process
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1

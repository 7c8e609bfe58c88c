"""Local worker processes: how many the DirectRunner is asked for (every core by default, one
in-memory worker for a small job or when the user chose the runner's parallelism), and setting
a pipeline up to run in them. Measured: ``docs/performance.md#every-core-by-default``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from beam_tfrecord.engine.local_engine import LocalBatchRunner
from beam_tfrecord.engine.table import DIRECT_RUNNERS
from beam_tfrecord.errors import WriterOptionError

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
    if runner_name is not None and runner_name.rsplit(".", 1)[-1] not in DIRECT_RUNNERS:
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

        Two worker processes cost ~1.5 s (forked from the job: start-up, a gRPC round per stage;
        ~2 s more where they start as fresh interpreters, importing Beam) and save at most ~40% of
        the encoding time on 2 cores; the heaviest common sample, a 256-px JPEG decoded, resized and
        re-encoded, takes ~1 ms in one worker: below ~2,000 of them (or 64 MiB of input at ~0.5
        GB/s), one in-memory worker is done first.
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

    The workers are forked from this process where that is safe (``forked_workers``), else fresh
    interpreters: they get this process's ``sys.path`` (through ``PYTHONPATH``, which they inherit
    with the environment) so that they import what this process imports, as the in-memory worker
    did (a script's sibling modules, a notebook's folder).
    Measured: ``docs/performance.md#every-core-by-default``. Does nothing for one worker.
    """
    if workers <= 1:
        return
    if type(pipeline.runner).__name__ in ("DirectRunner", "SwitchingDirectRunner"):
        pipeline.runner = LocalBatchRunner()
    direct = pipeline.options.view_as(DirectOptions)
    direct.direct_running_mode = "multi_processing"
    direct.direct_num_workers = workers
    quiet_worker_start_up()
    paths = [path for path in sys.path if path]
    known = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*known, *(p for p in paths if p not in known)]))



WORKER_LOG_RELAY = "apache_beam.runners.portability.local_job_service"  # logs what worker processes log
# What every DirectRunner worker process logs at WARNING as it starts (Beam 2.77), relayed to this
# process's log: true of every run, and nothing a user can act on.
_WORKER_START_UP_NOISE = ("No semi_persistent_directory found", "Discarding unparseable args")


class _DropWorkerStartUpNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(noise in message for noise in _WORKER_START_UP_NOISE)


def quiet_worker_start_up() -> None:
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


"""What the writer must know of each Beam runner: one table, read by the writer, the jobs and the Dask set-up.

Every workaround for a runner's behaviour keys on a trait here, never on a runner's name
elsewhere, so supporting a new runner is one row. A runner not in the table is taken to be a
distributed service with a disk-backed shuffle (Dataflow, Flink, Spark, Samza...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, PortableOptions, StandardOptions


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
FIXED_DASK_RUNNER = "beam_tfrecord.beam.dask_runner.DaskRunner"  # Beam's, two defects fixed (see that module)

# Keyed by the runner's dotted path (looked up first) or class name, and by Beam's short names.
_TABLE: Mapping[str, RunnerTraits] = {
    **dict.fromkeys(("DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner", "FnApiRunner",
                     "PrismRunner", "InteractiveRunner", "TestDirectRunner", "direct", "prism"), _LOCAL),
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


def traits_of_options(options: PipelineOptions) -> RunnerTraits:
    """The traits of the runner ``options`` choose (the DirectRunner when they name none)."""
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    name = runner if isinstance(runner, str) else type(runner).__name__
    return traits_of_name(name, job_endpoint=options.view_as(PortableOptions).job_endpoint)


def traits_of(pipeline: beam.Pipeline) -> RunnerTraits:
    """The traits of the runner ``pipeline`` runs on."""
    endpoint = pipeline.options.get_all_options().get("job_endpoint")
    runner = type(pipeline.runner)
    return traits_of_name(f"{runner.__module__}.{runner.__name__}", job_endpoint=endpoint)


def uses_dask_runner(options: PipelineOptions) -> bool:
    """Whether ``options`` choose a DaskRunner, Beam's or ``FIXED_DASK_RUNNER`` (the jobs run the latter,
    on a local cluster when the options name no scheduler)."""
    runner = options.view_as(StandardOptions).runner or ""
    return isinstance(runner, str) and runner.rsplit(".", 1)[-1] == "DaskRunner"


def encode_processes_for(options: PipelineOptions, *, requested: int | None,
                         flags: Sequence[str] = ()) -> int | None:
    """How many processes the writer's encoding stage runs in (``beam.encode_pool``).

    Every core of this machine (None: the pool's automatic size) on the DirectRunner unless the
    user chose how it runs: ``requested`` when given; 1 (the runner's own worker) when ``flags``
    (a job's command line) name a runner, ``--direct_num_workers`` or ``--direct_running_mode``,
    or when ``options`` set any of them to other than Beam's defaults, or choose another runner.
    A user's own pipeline built with ``--direct_num_workers=1`` cannot be told from Beam's default;
    ``WriteTFRecordDataset(encode_processes=1)`` says it there.
    """
    if requested is not None:
        return requested
    given = {flag[2:].split("=", 1)[0] for flag in flags if flag.startswith("--")}
    runner = options.view_as(StandardOptions).runner
    runner_name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    if given & {"direct_num_workers", "direct_running_mode"}:
        return 1
    if runner_name is not None and runner_name.rsplit(".", 1)[-1] not in ("DirectRunner", "SwitchingDirectRunner"):
        return 1
    direct = options.view_as(DirectOptions)
    if direct.direct_num_workers != 1 or direct.direct_running_mode != "in_memory":
        return 1
    return None

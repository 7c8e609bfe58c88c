"""What the writer must know of each Beam runner: one table, read by the writer, the jobs and the Dask set-up.

Every workaround for a runner's behaviour keys on a trait here, never on a runner's name
elsewhere, so supporting a new runner is one row. A runner not in the table is taken to be a
distributed service with a disk-backed shuffle (Dataflow, Flink, Spark, Samza...).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Mapping

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions


class Workers(enum.Enum):
    """Where a runner's workers run, and so whether they see this machine's local paths (``worker_placement``)."""

    THIS_MACHINE = "this machine"
    ELSEWHERE = "other machines"
    BY_ENVIRONMENT = "where --environment_type puts them"  # LOOPBACK: here; containers or a worker pool: anywhere
    BY_SCHEDULER = "where the scheduler's are"  # a cluster started here, or one given by address (asked: dask_probe)


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
        workers_on_this_machine: its workers run on this machine, so they can share a local
            folder (the live progress display).
        workers: where its workers run, for the paths they must see.
        splittable_dofns: it runs a splittable DoFn's restrictions (Beam's DaskRunner does not translate
            them): otherwise a reader plans its ranges up front (``beam/read_dataset.py``).
        dry_run: ``--dry_run=True`` builds its job without submitting it (``pipelines/dry_run.py``).
        streams: it runs unbounded PCollections (a streaming write, ``beam/windowed_write.py``); a runner that
            does not is refused before any work (``StreamingRunnerError``).
    """

    in_memory_shuffle: bool = False
    recomputes_side_inputs: bool = False
    workers_on_this_machine: bool = False
    workers: Workers = Workers.ELSEWHERE
    splittable_dofns: bool = True
    dry_run: bool = False
    streams: bool = True


_LOCAL = RunnerTraits(in_memory_shuffle=True, workers_on_this_machine=True, workers=Workers.THIS_MACHINE)
_DISTRIBUTED = RunnerTraits()
# Beam's DaskRunner also drops what a DoFn emits in ``finish_bundle`` (it collects a partition's outputs
# before calling it): no trait, because the writer's DoFns never emit there (``beam/encode_fn.py``).
_DASK = RunnerTraits(in_memory_shuffle=True, recomputes_side_inputs=True, workers=Workers.BY_SCHEDULER,
                     splittable_dofns=False, streams=False)
_DATAFLOW = RunnerTraits(dry_run=True)
DIRECT_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "TestDirectRunner", "LocalBatchRunner")
FIXED_DASK_RUNNER = "beam_tfrecord.engine.dask_runner.DaskRunner"  # Beam's, two defects fixed (see that module)
BEAM_DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"

# Keyed by the runner's dotted path (looked up first) or class name, and by Beam's short names.
_TABLE: Mapping[str, RunnerTraits] = {
    **dict.fromkeys(("DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner", "FnApiRunner",
                     "LocalBatchRunner", "PrismRunner", "InteractiveRunner", "TestDirectRunner", "direct", "prism"),
                    _LOCAL),
    "DaskRunner": _DASK,
    FIXED_DASK_RUNNER: _DASK,
    **dict.fromkeys(("DataflowRunner", "TestDataflowRunner", "dataflow"), _DATAFLOW),
}
# The engines the project runs a runner on, named as the user chose the runner (the job summary's words).
_CHOSEN_AS = {"LocalBatchRunner": "DirectRunner"}


def traits_of_name(runner: str, *, job_endpoint: str | None = None) -> RunnerTraits:
    """The traits of the runner named ``runner`` (a class name, dotted path or Beam short name).

    The PortableRunner is local when it embeds its job service (no endpoint, or ``embed``) and
    takes the traits of a distributed runner when it submits to a job server (Flink, Spark).
    """
    name = runner.rsplit(".", 1)[-1]
    if name == "PortableRunner":
        traits = _LOCAL if job_endpoint in (None, "embed") else _DISTRIBUTED
        return dataclasses.replace(traits, workers=Workers.BY_ENVIRONMENT)
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
    endpoint = pipeline.options.view_as(PortableOptions).job_endpoint  # not get_all_options: 10x the time
    runner = type(pipeline.runner)
    return traits_of_name(f"{runner.__module__}.{runner.__name__}", job_endpoint=endpoint)


def runner_name(pipeline: beam.Pipeline) -> str:
    """The class name of the runner ``pipeline`` runs on, as the user chose it (the DirectRunner, not the batch
    engine the project runs it on): what summaries and errors call it."""
    name = type(pipeline.runner).__name__
    return _CHOSEN_AS.get(name, name)


def runs_on_direct_runner(pipeline: beam.Pipeline) -> bool:
    """Whether ``pipeline`` runs on Beam's DirectRunner (the only runner ``use_local_workers`` configures)."""
    return type(pipeline.runner).__name__ in DIRECT_RUNNERS


def uses_dask_runner(options: PipelineOptions) -> bool:
    """Whether ``options`` choose a DaskRunner, Beam's or ``FIXED_DASK_RUNNER`` (the jobs run the latter,
    on a local cluster when the options name no scheduler)."""
    runner = options.view_as(StandardOptions).runner or ""
    return isinstance(runner, str) and runner.rsplit(".", 1)[-1] == "DaskRunner"



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
    from beam_tfrecord.engine.dask_runner import DaskRunner  # Beam's DaskRunner is importable, so is this

    pipeline.runner = DaskRunner()
    logging.getLogger(__name__).info("running the pipeline on %s (Beam's DaskRunner, fixed) instead of %s",
                                     FIXED_DASK_RUNNER, BEAM_DASK_RUNNER)



def import_runner_options() -> None:
    """Registers the options of runners whose module defines them (the DaskRunner's) with Beam, when installed.

    Importing Beam's DaskRunner (Dask, distributed) takes ~0.4 s, on a job's critical path before any work, so
    ``JobCommand.parse`` calls this only for a command line naming an option Beam does not know without it.
    """
    try:
        import apache_beam.runners.dask.dask_runner  # noqa: F401
    except ImportError:
        pass

"""Where a runner's workers run, and so which paths they can see.

On a runner whose workers may run elsewhere, every local path a worker would touch is refused before any work,
unless ``--shared_filesystem`` or (a Dask scheduler) its workers show they see it (``dask_probe``).
See docs/command-line.md, "Workers on other machines see only shared storage".
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

from beam_tfrecord import storage
from beam_tfrecord.engine.table import Workers, runner_name, traits_of_name
from beam_tfrecord.errors import LocalPathError

# Dask schedulers of clusters this process started on this machine (``scheduler_on_this_machine``).
_LOCAL_SCHEDULERS: set[str] = set()


@contextlib.contextmanager
def scheduler_on_this_machine(address: str) -> Iterator[None]:
    """Declares, while the block runs, that the Dask scheduler at ``address`` belongs to a cluster whose
    workers run on this machine (a ``LocalCluster`` this process started): jobs on it may use local paths.
    The jobs' own cluster (``dask_cluster.local_cluster_for``) is declared so."""
    _LOCAL_SCHEDULERS.add(address)
    try:
        yield
    finally:
        _LOCAL_SCHEDULERS.discard(address)


def remote_workers_reason(runner_name: str, options: PipelineOptions) -> str | None:
    """Why the workers of ``runner_name`` (a class name or dotted path) with ``options`` may run on other machines
    and not see this machine's files; None when they run on this machine.

    A DaskRunner without a scheduler address starts a cluster here; given one (``--dask_client_address``
    or ``--dask_scheduler_file``), its workers may be anywhere: even a scheduler on this machine
    cannot say whether its workers mount this machine's folders, unless this process started the
    cluster (``scheduler_on_this_machine``).
    """
    name = runner_name.rsplit(".", 1)[-1]
    workers = traits_of_name(runner_name, job_endpoint=options.view_as(PortableOptions).job_endpoint).workers
    if workers is Workers.BY_ENVIRONMENT:
        environment = (options.view_as(PortableOptions).environment_type or "DOCKER").upper()
        if environment == "LOOPBACK":
            return None
        return (f"the {name} starts its SDK workers with --environment_type={environment} "
                "(containers, or a worker pool that may run on other machines)")
    if workers is Workers.BY_SCHEDULER:
        dask = _dask_options(options)
        scheduler = dask.address or dask.scheduler_file
        if not scheduler or scheduler in _LOCAL_SCHEDULERS:
            return None
        return f"the {name} runs on the Dask scheduler {scheduler}, whose workers may run on other machines"
    if workers is Workers.THIS_MACHINE:  # the DirectRunner, Prism and their kin
        return None
    return f"the {name}'s workers run on other machines"


def _dask_options(options: PipelineOptions) -> Any:
    """A Dask job's options: the scheduler they name (``address`` or ``scheduler_file``; neither: a cluster here)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions  # the [dask] extra, there with the runner

    return options.view_as(DaskOptions)


# Given local paths, why the workers do not see them as this machine does (None: they do).
WorkersProbe = Callable[[Sequence[str]], "str | None"]


def workers_probe(runner_name: str, options: PipelineOptions) -> WorkersProbe | None:
    """How to ask the workers of ``runner_name`` with ``options`` whether they see local paths: a Dask cluster's
    scheduler, given by address, can be asked (``dask_probe``); None for the other runners."""
    if traits_of_name(runner_name).workers is not Workers.BY_SCHEDULER:
        return None
    from beam_tfrecord.engine.dask_probe import workers_unseen_reason

    dask = _dask_options(options)
    if not (dask.address or dask.scheduler_file):
        return None
    return functools.partial(workers_unseen_reason, address=dask.address, scheduler_file=dask.scheduler_file)


def require_shared_paths(paths: Mapping[str, str | None], *, remote_reason: str | None, shared_filesystem: bool,
                         declare: str, probe: WorkersProbe | None = None) -> bool:
    """Refuses a local path among ``paths`` when the workers may run elsewhere and do not show they see it.

    Args:
        paths: what each path is, as the caller's user names it (``--input``, ``output_dir``), to the path.
            None and empty paths are skipped.
        remote_reason: ``remote_workers_reason``'s answer; None lets every path through.
        shared_filesystem: the user declared that every worker mounts these local paths.
        declare: how that user declares it (``--shared_filesystem``, ``shared_filesystem=True``).
        probe: ``workers_probe``'s answer, asked before a local path is refused; None refuses it outright.

    Returns:
        Whether the workers see this machine's local paths (they run here, were declared or shown to).

    Raises:
        LocalPathError: the first local path, with the reason (which workers miss which path) and both fixes.
    """
    if remote_reason is None or shared_filesystem:
        return True
    local = {role: path for role, path in paths.items() if path and not storage.is_remote(path)}
    if not local:
        return False
    if probe is not None:
        unseen = probe(list(local.values()))
        if unseen is None:
            return True
        remote_reason = unseen
    role, path = next(iter(local.items()))
    raise LocalPathError(role, path, remote_reason, declare)


def require_pipeline_paths(pipeline: beam.Pipeline, paths: Mapping[str, str | None], *, shared_filesystem: bool,
                           declare: str) -> bool:
    """``require_shared_paths`` for the workers of the runner ``pipeline`` runs on (the writers' check)."""
    runner = runner_name(pipeline)
    return require_shared_paths(paths, remote_reason=remote_workers_reason(runner, pipeline.options),
                                shared_filesystem=shared_filesystem, declare=declare,
                                probe=workers_probe(runner, pipeline.options))

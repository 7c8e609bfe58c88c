"""Where a runner's workers run, and so which paths they can see.

On a runner whose workers may run elsewhere, every local path a worker would touch is refused before any work,
unless ``--shared_filesystem``. See docs/command-line.md, "Workers on other machines see only shared storage".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

from beam_tfrecord import storage
from beam_tfrecord.beam.runners.table import traits_of_name
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
    if name == "PortableRunner":
        environment = (options.view_as(PortableOptions).environment_type or "DOCKER").upper()
        if environment == "LOOPBACK":
            return None
        return (f"the PortableRunner starts its SDK workers with --environment_type={environment} "
                "(containers, or a worker pool that may run on other machines)")
    if name == "DaskRunner":
        from apache_beam.runners.dask.dask_runner import DaskOptions  # the [dask] extra, there with the runner

        dask = options.view_as(DaskOptions)
        scheduler = dask.address or dask.scheduler_file
        if not scheduler or scheduler in _LOCAL_SCHEDULERS:
            return None
        return f"the DaskRunner runs on the Dask scheduler {scheduler}, whose workers may run on other machines"
    if traits_of_name(name).workers_on_this_machine:  # the DirectRunner, Prism and their kin
        return None
    return f"the {name}'s workers run on other machines"


def require_shared_paths(paths: Mapping[str, str | None], *, remote_reason: str | None, shared_filesystem: bool,
                         declare: str) -> None:
    """Refuses a local path among ``paths`` when the workers may run elsewhere.

    Args:
        paths: what each path is, as the caller's user names it (``--input``, ``output_dir``), to the path.
            None and empty paths are skipped.
        remote_reason: ``remote_workers_reason``'s answer; None lets every path through.
        shared_filesystem: the user declared that every worker mounts these local paths.
        declare: how that user declares it (``--shared_filesystem``, ``shared_filesystem=True``).

    Raises:
        LocalPathError: the first local path, with the reason and both fixes.
    """
    if remote_reason is None or shared_filesystem:
        return
    for role, path in paths.items():
        if path and not storage.is_remote(path):
            raise LocalPathError(role, path, remote_reason, declare)

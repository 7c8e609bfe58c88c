"""A local ``dask.distributed`` cluster for Beam's DaskRunner when no scheduler is given.

Beam's DaskRunner connects to ``--dask_client_address``; without one it starts whatever
``distributed.Client()`` defaults to and never stops it. Jobs here instead start a
``LocalCluster`` of worker *processes* (at least two: a real distributed run, with pickling
between processes and a scheduler that re-runs the tasks of a worker that dies), hand its
address to the runner, and close it when the job ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

DEFAULT_LOCAL_WORKERS = 2


def uses_dask_runner(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner or ""
    return runner.rsplit(".", 1)[-1] == "DaskRunner"


@contextlib.contextmanager
def local_cluster_for(options: PipelineOptions, *, n_workers: int = DEFAULT_LOCAL_WORKERS) -> Iterator[str | None]:
    """Starts a LocalCluster for a DaskRunner job that names no scheduler; yields its address.

    Yields None (and starts nothing) for other runners, or when ``--dask_client_address`` or
    ``--dask_scheduler_file`` is given.
    """
    if not uses_dask_runner(options):
        yield None
        return
    from apache_beam.runners.dask.dask_runner import DaskOptions  # needs the [dask] extra
    from distributed import LocalCluster

    dask_options = options.view_as(DaskOptions)
    if dask_options.address or dask_options.scheduler_file:
        yield None
        return
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask_options.address = cluster.scheduler_address
        try:
            yield cluster.scheduler_address
        finally:
            dask_options.address = None

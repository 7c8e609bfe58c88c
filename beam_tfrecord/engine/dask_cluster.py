"""A local ``dask.distributed`` cluster for a DaskRunner job that names no scheduler.

Beam's DaskRunner without ``--dask_client_address`` starts whatever ``distributed.Client()`` defaults
to and never stops it; ``local_cluster_for`` starts ``--dask_local_workers`` worker processes (at
least two: pickling between processes, a scheduler that re-runs a dead worker's tasks), each capped
by ``--dask_memory_limit``, and stops them with the job. The stall watchdog lives in ``dask_watch``
(its names are importable from here too). ``docs/operations.md`` ("Dask").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.engine.dask_watch import DaskClusterOptions, DaskRunReport, wait_for_dask
from beam_tfrecord.engine.table import uses_dask_runner
from beam_tfrecord.engine.worker_placement import scheduler_on_this_machine

__all__ = ["DaskClusterOptions", "DaskRunReport", "local_cluster_for", "wait_for_dask"]


@contextlib.contextmanager
def local_cluster_for(options: PipelineOptions) -> Iterator[str | None]:
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
    settings = options.view_as(DaskClusterOptions)
    with LocalCluster(n_workers=settings.dask_local_workers, threads_per_worker=1, processes=True,
                      memory_limit=settings.dask_memory_limit, dashboard_address=None) as cluster:
        dask_options.address = cluster.scheduler_address
        try:
            with scheduler_on_this_machine(cluster.scheduler_address):  # its workers see this machine's files
                yield cluster.scheduler_address
        finally:
            dask_options.address = None

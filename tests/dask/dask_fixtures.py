"""A LocalCluster of two worker processes (a real dask.distributed scheduler) for the Dask tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address

"""A LocalCluster of two worker processes (a real dask.distributed scheduler) for the Dask tests."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from beam_tfrecord.core.samples import Sample

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
RECORD_BYTES = 256 * 1024
PER_ELEMENT = 8


def incompressible_records(element: int) -> list[Sample]:
    """``PER_ELEMENT`` records of ``RECORD_BYTES`` random bytes, made on the worker (so the input is
    held nowhere by construction). Here rather than in a test module: a worker that unpickles it
    imports only this module, as a real job's worker imports only the job's code."""
    rng = np.random.default_rng(element)
    start = element * PER_ELEMENT
    return [Sample(f"r/{i:07d}", {"payload": rng.bytes(RECORD_BYTES), "index": i})
            for i in range(start, start + PER_ELEMENT)]


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address

"""Shared fixtures, built once per test session: a small sample image folder and a Dask LocalCluster."""

import os
from collections.abc import Iterator

import pytest

from pipelines.make_sample_images import write_sample_images

# Functions defined in test modules are pickled by reference; worker subprocesses of the
# multi-processing and portable runners must be able to import them as pytest does.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_TESTS_DIR, os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="session")
def sample_images(tmp_path_factory) -> str:
    """300 deterministic 64x64 JPEGs in three class folders."""
    root = tmp_path_factory.mktemp("images")
    write_sample_images(str(root), per_class=100, size=64, seed=0)
    return str(root)


@pytest.fixture(scope="session")
def dask_address() -> Iterator[str]:
    """One LocalCluster of two worker processes (a real dask.distributed scheduler) for the whole session.

    Jobs given its address (``--dask_client_address``) skip a cluster start and the workers' Beam
    imports. Tests that kill workers, cap their memory or need the workers to inherit a changed
    environment start their own cluster.
    """
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address

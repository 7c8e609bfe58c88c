"""Shared fixtures, built once per test session: a small sample image folder and a Dask LocalCluster."""

import os
from collections.abc import Iterator

import pytest

from beam_tfrecord.beam.runners.local_workers import LOCAL_WORKERS_ENV
from pipelines.make_sample_images import write_sample_images

# Functions defined in test modules are pickled by reference; worker subprocesses of the
# multi-processing and portable runners must be able to import them as pytest does.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_TESTS_DIR, os.environ.get("PYTHONPATH")]))
# The writer's default on the DirectRunner is one worker process per core
# (beam.runners.local_workers.local_workers_for): worth it for a real build, ~2 s of worker
# start-up for each of the suite's hundreds of small ones.
# The suite runs them in one in-memory worker; the tests of the default remove this (and inherit
# it in the jobs they start as commands). See tests/beam/test_local_workers.py.
os.environ[LOCAL_WORKERS_ENV] = "1"


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
    environment start their own cluster. Not declared local: as a user's own cluster, its workers
    show they see the tests' folders when a job asks them (``beam_tfrecord.beam.dask_probe``).
    """
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


# The suite's heaviest files (minutes each), started first: pytest-xdist's --dist loadfile hands files to its
# workers in collection order, so a heavy file collected last would run alone at the end while the other
# worker idles. Measured with `bash scripts/test.sh --durations=120`; the rest keep their order.
HEAVY_FIRST = (
    "tests/test_determinism.py",
    "tests/resume/test_resume_shards.py",
    "tests/dask/test_dask_memory.py",
    "tests/docs/test_doc_examples.py",
    "tests/beam/test_shard_pieces.py",
    "tests/refresh/test_incremental.py",
    "tests/gcs/test_flaky_store.py",
    "tests/resume/test_resume_build.py",
    "tests/cli/test_command_line.py",
    "tests/runners/test_dataflow_dry_run.py",
    "tests/stores/test_store_end_to_end.py",
    "tests/beam/test_write_balanced.py",
    "tests/resume/test_resume_stores.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))  # stable sort

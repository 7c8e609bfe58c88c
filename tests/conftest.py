"""Shared fixtures, built once per test session: a small sample image folder and a Dask LocalCluster."""

import os
from collections.abc import Iterator

import pytest

from beam_tfrecord.engine.local_workers import LOCAL_WORKERS_ENV
from pipelines.make_sample_images import write_sample_images

# Functions defined in test modules are pickled by reference; worker subprocesses of the
# multi-processing and portable runners must be able to import them as pytest does.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_TESTS_DIR, os.environ.get("PYTHONPATH")]))
# The writer's default on the DirectRunner is one worker process per core
# (engine.local_workers.local_workers_for): worth it for a real build, ~2 s of worker
# start-up for each of the suite's hundreds of small ones.
# The suite runs them in one in-memory worker; the tests of the default remove this (and inherit
# it in the jobs they start as commands). See tests/engine/test_local_workers.py.
os.environ[LOCAL_WORKERS_ENV] = "1"
# Every Dask cluster of the suite (the session's, the tests' own, the jobs'), workers included (they inherit the
# environment): no statistical profiler (a thread sampling every thread's stack each 10 ms) and the event loop's
# health tick every second rather than 20 ms. Both feed only the dashboard and its warnings; with them an idle
# LocalCluster of two workers took 0.13 of a core, without them 0.04 (measured here, 30 s idle). The session
# cluster lives through the whole run in each pytest process. Memory limits, pausing and heartbeats are untouched.
os.environ.setdefault("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", "False")
os.environ.setdefault("DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL", "1s")


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
    show they see the tests' folders when a job asks them (``beam_tfrecord.engine.dask_probe``).
    """
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


# The suite's heaviest files (10 s or more each, heaviest first), started first: with --dist loadfile and
# --no-loadscope-reorder (scripts/test.sh), pytest-xdist hands files to its two workers in collection order, so the
# last ones to start are small and neither worker idles long at the end (by default xdist orders files by their
# number of tests, which put several one-test files of 30-45 s last). Measured with
# `bash scripts/test.sh --durations=0 --junitxml=...`; the rest keep their order.
HEAVY_FIRST = (
    "tests/dask/test_dask_memory.py",
    "tests/docs/test_doc_examples.py",
    "tests/dask/test_no_shared_disk.py",
    "tests/versions/test_incremental.py",
    "tests/storage/test_disk_full.py",
    "tests/beam/test_write_balanced.py",
    "tests/engine/test_local_workers.py",
    "tests/test_determinism.py",
    "tests/resume/test_resume_stores.py",
    "tests/storage/test_store_end_to_end.py",
    "tests/runners/test_runner_parity.py",
    "tests/engine/test_forked_workers.py",
    "tests/test_kill_safety.py",
    "tests/interop/test_ray_data.py",
    "tests/cli/test_command_line.py",
    "tests/beam/test_beam_tfrecordio_suite.py",
    "tests/dask/test_dask_library_path.py",
    "tests/beam/test_shard_pieces.py",
    "tests/beam/test_encode_pool.py",
    "tests/engine/test_worker_memory.py",
    "tests/report/test_report.py",
    "tests/storage/test_gcs_end_to_end.py",
    "tests/pipelines/test_build_image_job.py",
    "tests/beam/test_writer_inputs.py",
    "tests/resume/test_resume_build.py",
    "tests/versions/test_refresh_sources.py",
    "tests/resume/test_resume_shards.py",
    "tests/reader/test_reader_tf_data.py",
    "tests/storage/test_store_interop_files.py",
    "tests/beam/test_read_dataset.py",
    "tests/resume/test_resume_refresh.py",
    "tests/encoding/test_listed_sizes.py",
    "tests/interop/test_tfds.py",
    "tests/versions/test_retention_readers.py",
    "tests/remote_reads/test_remote_reads.py",
    "tests/beam/test_fan_in.py",
    "tests/test_bad_input_volume.py",
    "tests/storage/test_flaky_store.py",
    "tests/versions/test_refresh_kill.py",
    "tests/engine/test_worker_main.py",
    "tests/storage/test_store_lease.py",
    "tests/reader/test_block_decode.py",
    "tests/test_fuzz.py",
    "tests/runners/test_dataflow_dry_run.py",
    "tests/interop/test_light_readers.py",
    "tests/quality/test_near_duplicates_beam.py",
    "tests/dask/test_dask_worker_killed.py",
    "tests/test_layers.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))  # stable sort

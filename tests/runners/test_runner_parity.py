"""The same job, unchanged, on the DirectRunner and on Beam's DaskRunner gives byte-identical datasets.

Both fan-in paths on the DaskRunner (the spill path it picks and the shuffle path forced), on the session's
shared LocalCluster given by address. The other runners are covered where they cost nothing extra: the
multi-process DirectRunner and the portable runner (LOOPBACK, the Fn API path of Flink and Dataflow) run an
image job to the same bytes in tests/storage/test_store_end_to_end.py and the writer with many spill runs and
dead letters in tests/test_determinism.py; a DaskRunner job that starts its own LocalCluster gives the
DirectRunner's shards in tests/dask/test_dask_memory.py. Flink itself cannot run here (see deploy/flink).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import load_manifest, resolve_dataset_dir
from beam_tfrecord.verify import verify_dataset
from pipelines import refresh_image_dataset

RUNNERS = {
    "direct-in-memory": ["--runner=DirectRunner", "--direct_running_mode=in_memory"],
    # Beam's DaskRunner on the session's cluster (the ``dask_address`` fixture) given by address: the spill fan-in
    # path it picks, and the shuffle path forced.
    "dask": ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner"],
    "dask-shuffle": ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner", "--fan_in=shuffle"],
}
SHARED_CLUSTER = {"dask", "dask-shuffle"}
JOB_ARGS = ["--splits=train=0.7,validation=0.2,test=0.1", "--target_shard_bytes=5000", "--compression=gzip"]


def _content(manifest: Manifest) -> tuple:
    """What must not depend on the runner: every split's shards, their bytes and counts."""
    return tuple((split.name, tuple((s.filename, s.num_records, s.num_bytes, s.crc32c) for s in split.shards))
                 for split in manifest.splits)


@pytest.fixture(scope="module")
def built_by_runner(tiny_images: str, tmp_path_factory: pytest.TempPathFactory, dask_address: str) -> dict[str, str]:
    roots = {}
    for name, runner_args in RUNNERS.items():
        root = str(tmp_path_factory.mktemp(f"parity-{name}"))
        address = [f"--dask_client_address={dask_address}"] if name in SHARED_CLUSTER else []
        refresh_image_dataset.run(["--input", tiny_images, "--dataset_root", root, *JOB_ARGS, *runner_args, *address])
        roots[name] = root
    return roots


@pytest.mark.parametrize("runner", RUNNERS)
def test_each_runner_publishes_a_valid_dataset(built_by_runner: dict[str, str], runner: str) -> None:
    report = verify_dataset(resolve_dataset_dir(built_by_runner[runner]))
    assert report.num_records == 30 and report.num_shards >= 3


def test_runners_write_identical_shards(built_by_runner: dict[str, str]) -> None:
    contents = {name: _content(load_manifest(root)) for name, root in built_by_runner.items()}
    reference = contents["direct-in-memory"]
    assert all(content == reference for content in contents.values()), contents
    names = {name: sorted(p.name for p in Path(resolve_dataset_dir(root)).iterdir())
             for name, root in built_by_runner.items()}
    assert all(listing == names["direct-in-memory"] for listing in names.values()), names  # no leftovers

"""The same job, unchanged, on the DirectRunner and on Beam's DaskRunner gives byte-identical datasets, and
the same append refresh after them the same version (appended shards, deletion vectors).

Both fan-in paths on the DaskRunner (the spill path it picks and the shuffle path forced), on the session's
shared LocalCluster given by address. The other runners are covered where they cost nothing extra: the
multi-process DirectRunner and the portable runner (LOOPBACK, the Fn API path of Flink and Dataflow) run an
image job to the same bytes in tests/storage/test_store_end_to_end.py and the writer with many spill runs and
dead letters in tests/test_determinism.py; a DaskRunner job that starts its own LocalCluster gives the
DirectRunner's shards in tests/dask/test_dask_memory.py. Flink itself cannot run here (see deploy/flink).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import load_manifest, resolve_dataset_dir
from beam_tfrecord.verify import verify_dataset
from pipelines import refresh_image_dataset
from tests.versions.test_incremental import _change_inputs

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
    """What must not depend on the runner: every split's shards, their bytes and counts, whether each is the
    version's own, and its deleted records."""
    return tuple((split.name, tuple((s.filename, s.num_records, s.num_bytes, s.crc32c, s.stored_in is None,
                                     None if s.deletions is None else tuple(s.deletions.positions))
                                    for s in split.shards))
                 for split in manifest.splits)


@pytest.fixture(scope="module")
def built_by_runner(tiny_images: str, tmp_path_factory: pytest.TempPathFactory, dask_address: str) -> dict[str, str]:
    """Per runner, a root built from the tiny images, then refreshed (an append) after the same change."""
    images = str(tmp_path_factory.mktemp("parity-images") / "images")
    shutil.copytree(tiny_images, images)
    roots = {name: str(tmp_path_factory.mktemp(f"parity-{name}")) for name in RUNNERS}
    for build in range(2):
        if build:
            _change_inputs(images)
        for name, runner_args in RUNNERS.items():
            address = [f"--dask_client_address={dask_address}"] if name in SHARED_CLUSTER else []
            refresh_image_dataset.run(["--input", images, "--dataset_root", roots[name], *JOB_ARGS, *runner_args,
                                       *address, "--keep_versions=2", "--min_version_age=0"])
    return roots


@pytest.mark.parametrize("runner", RUNNERS)
def test_each_runner_publishes_a_valid_dataset(built_by_runner: dict[str, str], runner: str) -> None:
    report = verify_dataset(resolve_dataset_dir(built_by_runner[runner]))
    assert report.num_records == 31 and report.num_shards >= 3  # 30, 3 added and 2 removed
    assert not load_manifest(built_by_runner[runner]).self_contained  # the second version appended


def test_runners_write_identical_shards(built_by_runner: dict[str, str]) -> None:
    contents = {name: _content(load_manifest(root)) for name, root in built_by_runner.items()}
    reference = contents["direct-in-memory"]
    assert all(content == reference for content in contents.values()), contents
    names = {name: sorted(p.name for p in Path(resolve_dataset_dir(root)).iterdir())
             for name, root in built_by_runner.items()}
    assert all(listing == names["direct-in-memory"] for listing in names.values()), names  # no leftovers

"""``add-features`` on every store (gs://, s3://, Azure: the emulators) and runner (the DirectRunner's worker
processes, Dask): the records read after the add equal a native build's, and no shard is rewritten.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gcs import FakeGcs, fake_gcs, gcs_bucket  # noqa: F401  (pytest fixtures)
from fixtures_stores import Server, az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)

from beam_tfrecord import storage
from beam_tfrecord.dataset import load_manifest, read_latest
from pipelines import add_features
from tests.columns.column_data import QUIET, build_root, columns, joined_records, write_parquet

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("stores")
    data = columns()
    native = str(work / "native")
    build_root(write_parquet(work / "native.parquet", data), native)
    return {"base": write_parquet(work / "base.parquet", {k: v for k, v in data.items() if k != "emb"}),
            "emb": write_parquet(work / "emb.parquet", {"id": data["id"], "emb": data["emb"]}),
            "native": sorted(joined_records(native))}  # type: ignore[dict-item]


def _add_and_check(inputs: dict, root: str, *runner: str) -> None:
    base = build_root(inputs["base"], root)
    shards = {s.filename: storage.crc32c_and_size(f"{root}/versions/{base}/{s.filename}")
              for s in load_manifest(root).shards}
    version = add_features.run(["--dataset_root", root, "--features", inputs["emb"], "--key_column", "id", *QUIET,
                                *runner])
    assert read_latest(root) == version and load_manifest(root).column_features() == {"emb"}
    assert joined_records(root) == inputs["native"]
    assert {name: storage.crc32c_and_size(f"{root}/versions/{base}/{name}") for name in shards} == shards


@pytest.mark.parametrize("store", ["gs", "s3", "az"])
def test_an_add_on_each_store_reads_as_a_native_build(inputs, store, request):
    bucket = request.getfixturevalue({"gs": "gcs_bucket", "s3": "s3_bucket", "az": "az_container"}[store])
    _add_and_check(inputs, f"{bucket}/root")


@pytest.mark.parametrize("runner", ["multi-process", "dask"])
def test_an_add_on_each_runner_reads_as_a_native_build(inputs, runner, tmp_path: Path, request):
    options = (["--direct_num_workers=2", "--direct_running_mode=multi_processing"] if runner == "multi-process" else
               [f"--runner={DASK_RUNNER}", f"--dask_client_address={request.getfixturevalue('dask_address')}"])
    _add_and_check(inputs, str(tmp_path / "root"), *options)

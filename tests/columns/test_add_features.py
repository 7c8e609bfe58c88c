"""``beam-tfrecord add-features`` end to end on a small Parquet root (DirectRunner): the records read after an add, a
rename and a drop equal a native build's with the final schema; no shard is rewritten; each key source joins alike.
"""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import apache_beam as beam
import pytest

from beam_tfrecord import storage
from beam_tfrecord.beam.add_features import AddFeatures, PublishOptions
from beam_tfrecord.core.schema import DType, Schema, VarList
from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.job import lease
from beam_tfrecord.versions.add_features import plan_add
from pipelines import add_features
from tests.columns.column_data import QUIET, build_root, columns, joined_records, write_parquet


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The base root (no emb), the features file, and native roots built with the final schemas."""
    work = tmp_path_factory.mktemp("add")
    data = columns()
    base = {k: v for k, v in data.items() if k != "emb"}
    paths = {"base": write_parquet(work / "base.parquet", base),
             "emb": write_parquet(work / "emb.parquet", {"id": data["id"], "emb": data["emb"]}),
             "emb_by_name": write_parquet(work / "emb_by_name.parquet", {"name": data["name"], "emb": data["emb"]})}
    build_root(paths["base"], str(work / "base-root"))
    paths["native_parquet"] = write_parquet(work / "native.parquet", data)
    build_root(paths["native_parquet"], str(work / "native-root"))
    final = {"x": data["x"], "name": data["name"], "embedding": data["emb"], "id": data["id"]}
    build_root(write_parquet(work / "final.parquet", final), str(work / "final-root"))
    return {**paths, "base_root": str(work / "base-root"), "native": str(work / "native-root"),
            "final": str(work / "final-root")}


def _copy_root(inputs: dict[str, str], tmp_path: Path) -> str:
    return str(shutil.copytree(inputs["base_root"], tmp_path / "root"))


def _files(directory: str) -> dict[str, tuple[str, int]]:
    """The root's files (but LATEST, and the retention clock each version gets once superseded) and their checksums."""
    prefix = directory.rstrip("/") + "/"
    return {path[len(prefix):]: storage.crc32c_and_size(path) for path, _ in storage.list_files(prefix + "**")
            if not path.endswith(("/LATEST", "/superseded.json"))}


def _drop_key_files(root: str) -> None:
    shutil.rmtree(version_dir(root, read_latest(root)) + "/keys")


@pytest.mark.parametrize("key_source", ["key-files", "record-locations", "key-feature"])
def test_an_added_feature_reads_as_a_native_build_and_no_shard_is_rewritten(inputs, tmp_path, key_source):
    root = _copy_root(inputs, tmp_path)
    base = read_latest(root)
    if key_source == "record-locations":  # a version written before key files
        _drop_key_files(root)
    before = _files(root)
    features, key = (inputs["emb_by_name"], "name") if key_source == "key-feature" else (inputs["emb"], "id")
    version = add_features.run(["--dataset_root", root, "--features", features, "--key_column", key, *QUIET])
    assert read_latest(root) == version != base
    assert joined_records(root) == joined_records(inputs["native"])
    after = _files(root)
    assert {name: after[name] for name in before} == before  # no file of the base touched
    manifest = load_manifest(root)
    written = sorted(name for name in after if name not in before)
    assert written == sorted([f"versions/{version}/manifest.json"]
                             + [f"versions/{version}/{s.columns[0].filename}" for s in manifest.shards])
    assert all(s.stored_in == base and s.columns[0].features == ("emb",) for s in manifest.shards)
    assert manifest.version == 3 and not manifest.self_contained and "emb" in manifest.schema.features


def test_rename_and_drop_read_as_a_native_build_of_the_final_schema(inputs, tmp_path):
    root = _copy_root(inputs, tmp_path)
    base = read_latest(root)
    add_features.run(["--dataset_root", root, "--features", inputs["emb"], "--key_column", "id", *QUIET])
    before = _files(root)
    add_features.run_rename(["--dataset_root", root, "--rename", "emb=embedding", *QUIET])
    add_features.run_drop(["--dataset_root", root, "--drop", "label", *QUIET])
    manifest = load_manifest(root)
    assert (manifest.physical_names, manifest.dropped_features) == ({"embedding": "emb"}, ("label",))
    assert manifest.metadata["columns"]["indexes_version"] == base  # the chain's record locations: the base's
    assert joined_records(root) == joined_records(inputs["final"])
    after = _files(root)
    assert sorted(set(after) - set(before)) == sorted(f"versions/{v}/manifest.json" for v in
                                                      {p.split("/")[1] for p in set(after) - set(before)})
    assert len(set(after) - set(before)) == 2  # two manifests: nothing else written


@pytest.mark.parametrize("layout", [["--file_format=array_record"], ["--compression=gzip"]],
                         ids=["array_record", "gzip"])
def test_a_column_file_is_in_its_shard_s_format_and_compression(inputs, tmp_path, layout):
    root, native = str(tmp_path / "root"), str(tmp_path / "native")
    build_root(inputs["base"], root, *layout)
    build_root(inputs["native_parquet"], native, *layout)
    add_features.run(["--dataset_root", root, "--features", inputs["emb"], "--key_column", "id", *QUIET])
    manifest = load_manifest(root)
    assert all(s.columns[0].filename.endswith(s.filename) for s in manifest.shards)  # format and suffix kept
    assert joined_records(root) == joined_records(native)


def test_the_transform_adds_what_a_pipeline_computes(inputs, tmp_path):
    """The library path: a pipeline's own ``(key, {feature: value})`` elements, e.g. a model's output."""
    root = _copy_root(inputs, tmp_path)
    emb = columns()["emb"]
    with lease.held(root, run_id="test"):
        plan, sources = plan_add(root, Schema({"emb": VarList(DType.FLOAT32)}), key_column="id")
        publish = PublishOptions(("test",), keep_versions=10, min_version_age=datetime.timedelta(0))
        with beam.Pipeline() as pipeline:
            _ = (pipeline
                 | beam.Create([(str(i), {"emb": vector}) for i, vector in enumerate(emb)])
                 | AddFeatures(plan, sources, publish=publish))
    assert read_latest(root) == plan.version_id
    assert joined_records(root) == joined_records(inputs["native"])

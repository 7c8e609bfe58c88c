"""Bad input to ``add-features``, each with its exact answer: a key the dataset does not hold is a dead letter; a key
given twice, a record given no value (``--on_missing fail``), a name the dataset has (without ``--replace``) and a
value the schema refuses stop the add with a typed error naming them, and LATEST stays where it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from beam_tfrecord.core.schema import DType, FixedList, Schema
from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from pipelines import add_features
from pipelines.common import run_as_command
from tests.columns.column_data import QUIET, build_root, columns, joined_records, write_parquet

PROG = "beam-tfrecord add-features"


@pytest.fixture(scope="module")
def base_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("bad")
    data = columns()
    return build_root(write_parquet(work / "base.parquet", {k: v for k, v in data.items() if k != "emb"}),
                      str(work / "root")) and str(work / "root")


@pytest.fixture()
def root(base_root: str, tmp_path: Path) -> str:
    return str(shutil.copytree(base_root, tmp_path / "root"))


def _features(tmp_path: Path, ids: list[int], values: list | None = None, name: str = "emb") -> str:
    emb = columns()["emb"]
    return write_parquet(tmp_path / "features.parquet",
                         {"id": ids, name: values if values is not None else [emb[i % len(emb)] for i in ids]})


def _schema_file(tmp_path: Path, schema: Schema) -> str:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema.to_json()))
    return str(path)


def _refused(root: str, features: str, capsys, *extra: str) -> str:
    """The error line the command prints (exit 1); LATEST unchanged."""
    latest = read_latest(root)
    code = run_as_command(add_features.run, ["--dataset_root", root, "--features", features, "--key_column", "id",
                                             *QUIET, *extra], prog=PROG)
    assert code == 1 and read_latest(root) == latest
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_key_the_dataset_does_not_hold_is_a_dead_letter_with_its_reason(root, tmp_path):
    base = read_latest(root)
    add_features.run(["--dataset_root", root, "--features", _features(tmp_path, [*range(120), 999]),
                      "--key_column", "id", *QUIET])
    manifest = load_manifest(root)
    assert (manifest.num_rejected, manifest.dead_letters, manifest.num_written) == (1, "dead_letters.jsonl", 120)
    letters = Path(version_dir(root, read_latest(root)), "dead_letters.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in letters] == [{
        "key": "999", "stage": "validate", "error_type": "UnknownKeyError", "feature": None,
        "message": f"key '999' names no record of version {base}"}]


def test_a_key_given_twice_is_an_error_naming_it(root, tmp_path, capsys):
    line = _refused(root, _features(tmp_path, [*range(120), 5, 17]), capsys)
    assert line == (f"{PROG}: DuplicateFeatureKeyError: 2 key(s) were given values twice: '17', '5'; give each key "
                    "once; nothing was published")


def test_records_given_no_value_fail_naming_the_first_keys(root, tmp_path, capsys):
    line = _refused(root, _features(tmp_path, [i for i in range(120) if i not in (7, 30, 100)]), capsys)
    assert line == (f"{PROG}: MissingFeatureValuesError: 3 record(s) of the dataset were given no value for the "
                    "added features: '100', '30', '7'; give them values, or pass --on_missing missing to leave them "
                    "without (the schema's default, or an empty list); nothing was published")


def test_on_missing_missing_leaves_a_variable_list_empty(root, tmp_path):
    add_features.run(["--dataset_root", root, "--features", _features(tmp_path, list(range(1, 120))),
                      "--key_column", "id", "--on_missing", "missing", *QUIET])
    records = joined_records(root)
    assert sum(b"emb" not in record for record in records) == 1 and len(records) == 120


def test_on_missing_missing_needs_a_default_or_a_variable_list(root, tmp_path, capsys):
    schema = _schema_file(tmp_path, Schema({"emb": FixedList(DType.FLOAT32, 8)}))
    line = _refused(root, _features(tmp_path, list(range(120))), capsys, "--on_missing", "missing", "--schema", schema)
    assert line == (f"{PROG}: ColumnsError: --on_missing missing: feature(s) ['emb'] have no default and are not "
                    "variable lists, so a record without a value cannot be read; give them a default in the schema, "
                    "or use --on_missing fail")


def test_a_name_the_dataset_has_is_refused_unless_replace(root, tmp_path, capsys):
    features = _features(tmp_path, list(range(120)), [float(i) for i in range(120)], name="x")
    line = _refused(root, features, capsys)
    assert line == (f"{PROG}: FeatureNameError: feature(s) ['x'] are already in the dataset; pass --replace to replace "
                    "them (the old values stay in their files, dropped), or add them under other names")
    version = add_features.run(["--dataset_root", root, "--features", features, "--key_column", "id", "--replace",
                                *QUIET])
    manifest = load_manifest(root)
    assert manifest.physical_names == {"x": f"x__{version[-6:]}"} and manifest.dropped_features == ("x",)
    assert manifest.column_features() == {f"x__{version[-6:]}"}
    assert sum(b"\x00\x00\x80\x3f" in record for record in joined_records(root)) >= 1  # x = 1.0 now


def test_a_value_the_schema_refuses_is_a_dead_letter_and_the_record_has_none(root, tmp_path, capsys):
    schema = _schema_file(tmp_path, Schema({"emb": FixedList(DType.FLOAT32, 8)}))
    emb = columns()["emb"]
    values = [emb[i] if i != 3 else [1.0, 2.0, 3.0] for i in range(120)]
    line = _refused(root, _features(tmp_path, list(range(120)), values), capsys, "--schema", schema)
    assert line == (f"{PROG}: MissingFeatureValuesError: 1 record(s) of the dataset were given no value for the "
                    "added features: '3' (values were rejected, e.g. feature 'emb': expected list of 8 float32 values, "
                    "got 3 values in sample '3'); give them values, or pass --on_missing missing to leave them without "
                    "(the schema's default, or an empty list); nothing was published")

"""``beam-tfrecord refresh`` of a CSV manifest and of .npy files: versions, no-op, incremental, retention, resume.

Each source runs the same story (real DirectRunner, real files): a first refresh builds a full version; a
rerun does nothing; one changed row (CSV) or one added file (.npy) is all that is encoded, the rest kept
from LATEST, and the new version holds exactly the records and shards of a clean build of the new inputs;
retention keeps one version. The CSV's incremental refresh is first SIGKILLed once its writer started,
and resumed in place by the next run.
"""

from __future__ import annotations

import collections
import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from beam_tfrecord import cli, storage
from beam_tfrecord.core.infer import schema_json_text
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.dataset import load_manifest, read_latest, resolve_dataset_dir
from beam_tfrecord.formats import shard_format
from beam_tfrecord.sources.rows import RowOptions
from beam_tfrecord.sources.tabular import JsonlRowReader
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.commit import COMMIT_KEY
from beam_tfrecord.versions.refresh import RefreshAction, RefreshPlan, list_versions
from pipelines import build_from_arrays, build_from_manifest, compact, refresh
from pipelines.sources.manifest import index_rows
from tests.versions.live_records import live_records

LAYOUT = ["--splits=train=0.75,test=0.25", "--target_shard_bytes=600", "--runner=DirectRunner",
          "--direct_running_mode=in_memory", "--progress=none"]
CSV_ROWS = 40


def _write_csv(path: Path, rows: list[tuple[str, int, float]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "label", "score"])
        writer.writerows(rows)


class Csv:
    """A CSV manifest keyed by ``id``; the change rewrites one row's score."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "manifest.csv"
        self.rows = [(f"row-{i:03d}", i % 3, i / 4) for i in range(CSV_ROWS)]
        _write_csv(self.path, self.rows)
        self.schema = tmp_path / "schema.json"
        self.schema.write_text(schema_json_text(Schema({"label": Scalar(DType.INT64), "score": Scalar(DType.FLOAT32)})))
        self.args = ["--manifest", str(self.path), "--key_column=id", "--schema", str(self.schema)]

    def change(self, number: int) -> None:
        key, label, _ = self.rows[number]
        self.rows[number] = (key, label, 1000.0 + number)
        _write_csv(self.path, self.rows)

    def clean_build(self, output: str) -> Manifest:
        return build_from_manifest.run([*self.args, "--output", output, *LAYOUT])

    counts: ClassVar[tuple[int, int, int]] = (CSV_ROWS - 1, 1, 1)  # kept, written, deleted by the append
    total = CSV_ROWS


class Npy:
    """Three .npy files of 10 samples; the change adds a fourth."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "arrays"
        self.folder.mkdir()
        self.added = 0
        for name in "abc":
            self._save(name)
        self.args = ["--arrays", str(self.folder / "*.npy"), "--npy_feature=x"]

    def _save(self, name: str) -> None:
        seed = ord(name)
        np.save(self.folder / f"{name}.npy", np.random.default_rng(seed).random((10, 4), dtype=np.float32))

    def change(self, number: int) -> None:
        self._save("defgh"[self.added])
        self.added += 1

    def clean_build(self, output: str) -> Manifest:
        return build_from_arrays.run([*self.args, "--output", output, *LAYOUT])

    counts: ClassVar[tuple[int, int, int]] = (30, 10, 0)
    total = 30


SOURCES: dict[str, Callable[[Path], Csv | Npy]] = {"csv": Csv, "npy": Npy}


def _refresh(source: Csv | Npy, root: str, *extra: str) -> RefreshPlan:
    return refresh.run([*source.args, "--dataset_root", root, "--keep_versions=1", "--min_version_age=0",
                        *LAYOUT, *extra])


def _records(dataset_dir: str, manifest: Manifest) -> dict[str, collections.Counter]:
    """Per split, the multiset of serialized records."""
    found: dict[str, collections.Counter] = {}
    for split in manifest.splits:
        counter = found.setdefault(split.name, collections.Counter())
        for shard in split.shards:
            with shard_format(manifest.file_format).open_reader(storage.join(dataset_dir, shard.filename), shard,
                                                                compression=manifest.compression) as reader:
                counter.update(record for record, _ in reader.iter_records(0, shard.num_records))
    return found


def _assert_same_as_clean_build(source: Csv | Npy, root: str, full_dir: str) -> Manifest:
    full = source.clean_build(full_dir)
    latest_dir = resolve_dataset_dir(root)
    manifest = load_manifest(root)
    verify_dataset(latest_dir)
    assert _records(latest_dir, manifest) == _records(full_dir, full)
    assert [(s.filename, s.crc32c) for s in manifest.shards] == [(s.filename, s.crc32c) for s in full.shards]
    return manifest


def _killed_refresh(source: Csv | Npy, root: str) -> str:
    """Runs ``beam-tfrecord refresh`` in a process SIGKILLed once its writer started (its resume.json is
    there); returns the unfinished version it left."""
    command = [sys.executable, "-m", "pipelines.refresh", *source.args, "--dataset_root", root,
               "--keep_versions=1", "--min_version_age=0", *LAYOUT]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline and not storage.list_files(
            f"{root}/versions/*/.tmp-beam-tfrecord-*/resume.json"):
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    killed = list_versions(root).incomplete
    assert len(killed) == 1, f"the refresh ended before its kill (exit code {process.returncode})"
    return killed[0]


@pytest.mark.parametrize("kind", SOURCES)
def test_refresh_builds_skips_encodes_only_the_change_and_retains(kind: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """For the CSV manifest, the incremental refresh is first killed, then resumed in place by the next run."""
    source = SOURCES[kind](tmp_path)
    root = str(tmp_path / "root")
    first = _refresh(source, root)
    assert first.action is RefreshAction.BUILD and read_latest(root) == first.version_id
    assert load_manifest(root).metadata[COMMIT_KEY]["base_version"] is None  # the first version is a full build
    assert verify_dataset(resolve_dataset_dir(root)).num_records == source.total

    capsys.readouterr()
    unchanged = _refresh(source, root)
    assert (unchanged.action, unchanged.version_id) == (RefreshAction.SKIP, first.version_id)
    assert "nothing to do" in capsys.readouterr().out

    source.change(7)
    killed = _killed_refresh(source, root) if kind == "csv" else None
    assert read_latest(root) == first.version_id
    second = _refresh(source, root)
    if killed is not None:
        assert f"resuming version {killed}, which a killed refresh of these inputs left" in capsys.readouterr().out
        assert second.version_id == killed
    assert second.action is RefreshAction.BUILD and read_latest(root) == second.version_id
    # An append: the first version's shards are listed, with the changed record deleted, and only the change written.
    full = source.clean_build(str(tmp_path / "full"))
    manifest = load_manifest(root)
    assert live_records(root) == live_records(str(tmp_path / "full"))
    commit = manifest.metadata[COMMIT_KEY]
    assert (commit["base_version"], commit["kept_records"], commit["written_records"], commit["deleted_records"]) == \
        (first.version_id, *source.counts)
    assert manifest.command[0] == f"refresh_{'manifest' if kind == 'csv' else 'arrays'}"
    listing = list_versions(root)
    assert (listing.complete, listing.incomplete) == ((second.version_id,), ())  # retention: keep 1, age 0
    verify_dataset(root)  # the retired first version's shards that the second lists are still there
    compacted = compact.run(["--dataset_root", root, "--keep_versions=1", "--min_version_age=0"])
    assert compacted is not None
    _assert_same_as_clean_build(source, root, str(tmp_path / "full"))
    assert (load_manifest(root).num_written, list_versions(root).complete) == (full.num_written, (compacted,))


def test_refresh_help_lists_the_sources(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["refresh", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for line in ("  image-folder  --input     an image folder ROOT/<label>/<file>",
                 "  manifest      --manifest  CSV / JSONL / Parquet manifests (file or glob), a row per sample, "
                 "keyed by --key_column",
                 "  arrays        --arrays    .npy / .npz files (file or glob), axis 0 indexes samples"):
        assert line in out.splitlines()
    assert refresh.source_of(["--arrays=a/*.npy", "--dataset_root=r"]) == ("arrays", ["--arrays=a/*.npy",
                                                                                       "--dataset_root=r"])
    assert refresh.source_of(["manifest", "--manifest=m.csv"]) == ("manifest", ["--manifest=m.csv"])
    with pytest.raises(SystemExit) as exit_info:  # the usage on stderr, and the reason
        cli.main(["refresh", "--input=images", "--manifest=m.csv"])
    assert str(exit_info.value) == ("beam-tfrecord refresh: name the source first (image-folder, manifest, arrays, "
                                    "audio, text) or give exactly one of --input, --manifest, --arrays, --audio, "
                                    "--text")
    assert capsys.readouterr().err.startswith("usage: beam-tfrecord refresh [SOURCE] --dataset_root=ROOT")


def test_a_row_token_follows_its_content_and_the_file_it_names(tmp_path: Path) -> None:
    """JSONL rows naming files: a changed row, or a rewritten file it names, changes only that row's token."""
    (tmp_path / "files").mkdir()
    for name in "abc":
        (tmp_path / "files" / f"{name}.bin").write_bytes(name.encode())
    manifest = tmp_path / "rows.jsonl"
    rows = [{"id": name, "label": number, "blob": f"files/{name}.bin"} for number, name in enumerate("abc")]
    rows.append({"id": "a", "label": 9, "blob": "files/a.bin"})  # a key on two rows
    schema = Schema({"label": Scalar(DType.INT64), "blob": Scalar(DType.BYTES)})
    reader = JsonlRowReader(schema, RowOptions(key_column="id", file_columns=frozenset({"blob"})))

    def index(lines: list[dict]) -> dict[str, tuple[str, str]]:
        manifest.write_text("".join(json.dumps(row) + "\n" for row in lines))
        inputs, count = index_rows([("rows.jsonl", str(manifest))], reader, names_files=True)
        assert count == len(lines)
        return {i.key: (i.path, i.token) for i in inputs}

    first = index(rows)
    assert first["a"] == ("", "") and first["b"][0] == str(manifest) and len(first["b"][1]) == 64
    rows[1]["label"] = 5
    second = index(rows)
    assert second["b"] != first["b"] and second["c"] == first["c"]
    os.utime(tmp_path / "files" / "c.bin", ns=(1, 1))  # the file a row names is rewritten: another listing token
    assert index(rows)["c"] != second["c"]

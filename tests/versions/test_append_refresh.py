"""Append refresh end to end: a version lists its base's shards, deletes what changed, writes only what is new.

Each chain runs the refresh job (a full first version, then appends), and compares the live records of LATEST with
a full build of the final inputs (as a multiset of record bytes, per split). The base's shards are moved away while
an append runs: a refresh that read one would fail. ``compact`` then gives a full build's very bytes. Local and
gs:// (the emulator).
"""

from __future__ import annotations

import json
import re

import pytest

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import open_dataset, read_latest, version_dir
from beam_tfrecord.errors import InputIndexError
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.commit import COMMIT_KEY
from beam_tfrecord.versions.locations import RECORD_LOCATIONS_FILENAME, RecordLocations
from beam_tfrecord.versions.refresh import RefreshAction
from pipelines import build_image_dataset, compact, refresh_image_dataset
from tests.versions.live_records import live_records
from tests.versions.test_incremental import LAYOUT, RUNNER, _change_inputs

KEEP = ["--keep_versions=10", "--min_version_age=0"]


def _refresh(images: str, root: str, *extra: str):
    return refresh_image_dataset.run(["--input", images, "--dataset_root", root, *LAYOUT, *RUNNER, *KEEP, *extra])


def _moved_away(root: str) -> list[str]:
    """Renames every shard LATEST lists aside (a refresh that opened one would fail); the shards' paths."""
    dataset = open_dataset(root)
    paths = [dataset.shard_path(shard) for shard in dataset.manifest.shards]
    storage.rename(paths, [path + ".aside" for path in paths])
    return paths


def _append_without_reading(images: str, root: str) -> Manifest:
    """An append refresh run with every shard of LATEST out of reach; the new version's manifest."""
    paths = _moved_away(root)
    try:
        plan = _refresh(images, root)
    finally:
        storage.rename([path + ".aside" for path in paths], paths)
    assert plan.action is RefreshAction.BUILD and read_latest(root) == plan.version_id
    return open_dataset(root).manifest


def _full_build(images: str, out: str) -> Manifest:
    return build_image_dataset.run(["--input", images, "--output", out, *LAYOUT, *RUNNER])


def test_append_chain_holds_a_full_builds_records_and_compact_its_bytes(input_and_root: tuple[str, str],
                                                                         tmp_path) -> None:
    images, root = input_and_root
    with storage.open_write(f"{images}/circle/broken.jpg") as handle:  # rejected: encoded again every time
        handle.write(b"not a jpeg")
    first = _refresh(images, root)
    base = open_dataset(root).manifest
    _change_inputs(images)  # 3 added, 2 changed, 2 removed
    second = _append_without_reading(images, root)
    summary = second.metadata[COMMIT_KEY]
    assert summary["base_version"] == first.version_id
    assert (summary["deleted_records"], summary["kept_shards"]) == (4, len(base.shards))
    assert summary["written_records"] == 5 and summary["rewritten_splits"] == []
    assert {shard.stored_in for shard in second.shards} == {first.version_id, None}
    assert second.num_deleted == 4 and not second.self_contained
    full = _full_build(images, str(tmp_path / "full"))
    assert live_records(root) == live_records(str(tmp_path / "full"))
    assert [(s.name, s.num_records) for s in second.splits] == [(s.name, s.num_records) for s in full.splits]
    assert (second.num_inputs, second.num_rejected) == (full.num_inputs, full.num_rejected)

    # A second append: deletions land in the first version's shards and in the second's own.
    paths = sorted(path for path, _ in storage.list_files(images.rstrip("/") + "/square/new-*"))
    storage.delete_if_exists(paths[:1])
    with storage.open_write(f"{images}/circle/later.jpg") as handle:
        handle.write(storage.read_bytes(paths[1]))
    third = _append_without_reading(images, root)
    assert third.metadata[COMMIT_KEY]["deleted_records"] == 1
    full = _full_build(images, str(tmp_path / "full2"))
    assert live_records(root) == live_records(str(tmp_path / "full2"))

    compacted = compact.run(["--dataset_root", root, *KEEP, *RUNNER])
    assert compacted is not None and read_latest(root) == compacted
    manifest = open_dataset(root).manifest
    assert manifest.self_contained
    assert [(s.filename, s.crc32c) for s in manifest.shards] == [(s.filename, s.crc32c) for s in full.shards]
    assert verify_dataset(root).num_records == full.num_written
    assert storage.exists(storage.join(version_dir(root, compacted), "dataset_info.json"))  # TFDS reads it again
    assert compact.run(["--dataset_root", root, *KEEP, *RUNNER]) is None  # nothing left to do


def test_a_split_past_the_policy_is_rewritten(images: str, tmp_path) -> None:
    root = str(tmp_path / "root")
    _refresh(images, root)
    _change_inputs(images)
    plan = _refresh(images, root, "--max_deleted_fraction=0.0")  # any deletion rewrites its split
    manifest = open_dataset(root).manifest
    rewritten = manifest.metadata[COMMIT_KEY]["rewritten_splits"]
    assert rewritten and plan.action is RefreshAction.BUILD
    for split in manifest.splits:
        assert all(shard.deletions is None for shard in split.shards)
        if split.name in rewritten:
            assert all(shard.stored_in is None for shard in split.shards)
    _full_build(images, str(tmp_path / "full"))
    assert live_records(root) == live_records(str(tmp_path / "full"))


def test_append_false_rewrites_every_shard_as_before(images: str, tmp_path) -> None:
    root = str(tmp_path / "root")
    _refresh(images, root)
    _change_inputs(images)
    _refresh(images, root, "--append=false")
    manifest = open_dataset(root).manifest
    assert manifest.self_contained
    full = _full_build(images, str(tmp_path / "full"))
    assert [(s.filename, s.crc32c) for s in manifest.shards] == [(s.filename, s.crc32c) for s in full.shards]


@pytest.mark.parametrize("damage, reason", [
    (lambda data: b"{", "not JSON"),
    (lambda data: data.replace(b'"records":[[', b'"records":[[7,'), "expected [key, shard number, position]"),
    (lambda data: json.dumps({**json.loads(data), "shards": [["../../x", "f"]]}).encode(),
     "expected [version id, file name]"),
], ids=["not-json", "short-row", "shard-outside-the-root"])
def test_damaged_record_locations_lend_nothing(images: str, tmp_path, capsys, damage, reason: str) -> None:
    """Untrusted input: a damaged file is refused with its reason, and the refresh rewrites every split."""
    root = str(tmp_path / "root")
    first = _refresh(images, root)
    path = storage.join(first.version_dir, RECORD_LOCATIONS_FILENAME)
    damaged = damage(storage.read_bytes(path))
    with pytest.raises(InputIndexError, match=re.escape(reason)):
        RecordLocations.from_bytes(damaged, path=path)
    storage.write_bytes_atomic(path, damaged)
    _change_inputs(images)
    _refresh(images, root)
    assert "no append" in capsys.readouterr().out
    assert open_dataset(root).manifest.self_contained

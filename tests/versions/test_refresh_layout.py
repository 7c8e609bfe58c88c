"""Versioned roots: fingerprints, version ids, the LATEST pointer, adoption and retention."""

from __future__ import annotations

import datetime
import os
import shutil
from pathlib import Path

import pytest

from beam_tfrecord.core.durations import format_duration, parse_duration
from beam_tfrecord.dataset import load_manifest, open_dataset, read_latest, resolve_dataset_dir, shard_paths
from beam_tfrecord.errors import DatasetNotFoundError, DurationError, LatestPointerError, RefreshError
from beam_tfrecord.versions.refresh import (
    InputFile,
    InputFingerprint,
    RefreshAction,
    apply_retention,
    commit_version,
    fingerprint_inputs,
    list_versions,
    new_version_id,
    plan_refresh,
    stored_fingerprint,
    superseded_at,
)

IDS = ["20260101T000000.000Z-aaaaaa", "20260102T000000.000Z-bbbbbb", "20260103T000000.000Z-cccccc",
       "20260104T000000.000Z-dddddd", "20260105T000000.000Z-eeeeee"]
BASE = [InputFile("gs://b/x/a.jpg", 10, 1.0), InputFile("gs://b/x/b.jpg", 20, 2.0)]


@pytest.mark.parametrize("changed", [
    pytest.param([InputFile("gs://b/x/a.jpg", 11, 1.0), BASE[1]], id="size"),
    pytest.param([InputFile("gs://b/x/a.jpg", 10, 1.5), BASE[1]], id="update-time"),
    pytest.param([InputFile("gs://b/x/c.jpg", 10, 1.0), BASE[1]], id="renamed"),
    pytest.param([*BASE, InputFile("gs://b/x/d.jpg", 1, 3.0)], id="added"),
    pytest.param(BASE[:1], id="removed"),
])
def test_fingerprint_changes_with_any_input_change(changed: list[InputFile]) -> None:
    assert InputFingerprint.of(changed) != InputFingerprint.of(BASE)


def test_fingerprint_ignores_listing_order_and_round_trips() -> None:
    fingerprint = InputFingerprint.of(BASE)
    assert InputFingerprint.of(BASE[::-1]) == fingerprint
    assert InputFingerprint.from_json(fingerprint.to_json()) == fingerprint
    assert (fingerprint.num_files, fingerprint.num_bytes) == (2, 30)
    with pytest.raises(RefreshError, match="malformed input fingerprint"):
        InputFingerprint.from_json({"sha256": "x"})


def test_fingerprint_inputs_sees_local_mtime(images: str) -> None:
    before = fingerprint_inputs([images + "/*/*"])
    assert before.num_files == 30
    path = Path(images, "circle", "0000.jpg")
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime + 60))
    assert fingerprint_inputs([images + "/*/*"]) != before


UTC = datetime.timezone.utc


def test_version_ids_sort_by_time() -> None:
    early = new_version_id(datetime.datetime(2026, 1, 31, 2, 0, 0, 999_999, tzinfo=UTC), "ffffff")
    late = new_version_id(datetime.datetime(2026, 1, 31, 2, 0, 1, tzinfo=UTC), "000000")
    assert early == "20260131T020000.999Z-ffffff" and early < late
    with pytest.raises(RefreshError, match="bad version id"):
        new_version_id(token="XYZ")


@pytest.mark.parametrize("clock", [
    pytest.param(datetime.datetime(2026, 1, 31, 2, 0, 0, 500_000, tzinfo=UTC), id="same-millisecond"),
    pytest.param(datetime.datetime(2026, 1, 30, tzinfo=UTC), id="clock-behind"),
])
def test_new_version_id_is_after_existing_ones(clock: datetime.datetime) -> None:
    existing = ["20260131T020000.500Z-ffffff", "20260131T020000.100Z-aaaaaa"]
    version_id = new_version_id(clock, "000000", after=existing)
    assert version_id == "20260131T020000.501Z-000000" and version_id > max(existing)


def _root_with(tmp_path: Path, built_version: Path, complete: list[str], incomplete: list[str] = (),
               latest: str | None = None) -> str:
    root = tmp_path / "root"
    for version_id in complete:
        shutil.copytree(built_version, root / "versions" / version_id)
    for version_id in incomplete:  # what a killed build leaves: shards and temp files, no manifest
        shutil.copytree(built_version, root / "versions" / version_id)
        (root / "versions" / version_id / "manifest.json").unlink()
    if latest:
        commit_version(str(root), latest)
    return str(root)


def test_root_resolves_to_latest_version(tmp_path: Path, built_version: Path) -> None:
    root = _root_with(tmp_path, built_version, IDS[:2], latest=IDS[0])
    assert resolve_dataset_dir(root) == f"{root}/versions/{IDS[0]}"
    dataset = open_dataset(root)
    commit_version(root, IDS[1])  # a new version is published after the manifest was loaded
    assert dataset.directory == f"{root}/versions/{IDS[0]}"
    assert all(p.startswith(f"{root}/versions/{IDS[0]}/") for p in dataset.shard_paths("train"))
    assert all(p.startswith(f"{root}/versions/{IDS[1]}/") for p in shard_paths(root, load_manifest(root), "train"))
    assert all(p.startswith(f"{root}/versions/{IDS[1]}/") for p in shard_paths(root, dataset.manifest, "train"))
    assert resolve_dataset_dir(str(built_version)) == str(built_version)  # a plain dataset dir is itself


@pytest.mark.parametrize("content", [b"", b"garbage\n", b"20260101T000000.000Z-aaaaaa\x00junk", b"../../etc\n"],
                         ids=["empty", "garbage", "torn", "path"])
def test_corrupt_latest_is_a_typed_error(tmp_path: Path, built_version: Path, content: bytes) -> None:
    root = _root_with(tmp_path, built_version, IDS[:1], latest=IDS[0])
    Path(root, "LATEST").write_bytes(content)
    with pytest.raises(LatestPointerError, match="LATEST pointer holds"):
        load_manifest(root)


def test_unfinished_version_is_never_read(tmp_path: Path, built_version: Path) -> None:
    root = _root_with(tmp_path, built_version, [], incomplete=IDS[:1])
    with pytest.raises(DatasetNotFoundError):
        load_manifest(root)
    with pytest.raises(LatestPointerError, match="has no manifest.json"):
        commit_version(root, IDS[0])
    assert read_latest(root) is None


def test_latest_naming_a_deleted_version_is_a_typed_error(tmp_path: Path, built_version: Path) -> None:
    root = _root_with(tmp_path, built_version, IDS[:1], latest=IDS[0])
    shutil.rmtree(Path(root, "versions", IDS[0]))
    with pytest.raises(LatestPointerError, match="which has no manifest.json"):
        load_manifest(root)


def test_retention_keeps_newest_and_removes_abandoned(tmp_path: Path, built_version: Path) -> None:
    root = _root_with(tmp_path, built_version, complete=[IDS[0], IDS[2], IDS[3]], incomplete=[IDS[1], IDS[4]],
                      latest=IDS[3])
    assert apply_retention(root, keep_versions=2, min_version_age=NO_MIN_AGE) == [IDS[0], IDS[1]]
    listing = list_versions(root)
    assert listing.complete == (IDS[2], IDS[3])
    assert listing.incomplete == (IDS[4],)  # newer than LATEST: a run may be writing it
    assert apply_retention(root, keep_versions=2, min_version_age=NO_MIN_AGE) == []
    with pytest.raises(RefreshError, match="keep_versions must be >= 1"):
        apply_retention(root, keep_versions=0)


def test_retention_never_deletes_latest(tmp_path: Path, built_version: Path) -> None:
    root = _root_with(tmp_path, built_version, complete=IDS[:3], latest=IDS[1])
    assert apply_retention(root, keep_versions=1, min_version_age=NO_MIN_AGE) == [IDS[0]]
    assert list_versions(root).complete == (IDS[1], IDS[2])


NO_MIN_AGE = datetime.timedelta(0)
T0 = datetime.datetime(2026, 3, 1, tzinfo=UTC)
HOUR = datetime.timedelta(hours=1)


def test_retention_keeps_a_version_min_age_after_it_stopped_being_latest(tmp_path: Path, built_version: Path) -> None:
    root = _root_with(tmp_path, built_version, complete=IDS[:3])
    commit_version(root, IDS[0], now=T0)
    commit_version(root, IDS[1], now=T0 + 10 * HOUR)  # IDS[0] stops being LATEST: its clock starts
    commit_version(root, IDS[2], now=T0 + 20 * HOUR)
    assert superseded_at(root, IDS[0]) == T0 + 10 * HOUR and superseded_at(root, IDS[1]) == T0 + 20 * HOUR
    assert superseded_at(root, IDS[2]) is None
    day = datetime.timedelta(hours=24)
    assert apply_retention(root, keep_versions=1, min_version_age=day, now=T0 + 20 * HOUR) == []
    assert apply_retention(root, keep_versions=1, min_version_age=day, now=T0 + 34 * HOUR - HOUR / 3600) == []
    assert apply_retention(root, keep_versions=1, min_version_age=day, now=T0 + 34 * HOUR) == [IDS[0]]
    assert apply_retention(root, keep_versions=1, min_version_age=day, now=T0 + 44 * HOUR) == [IDS[1]]
    assert list_versions(root).complete == (IDS[2],)
    with pytest.raises(RefreshError, match="min_version_age must be >= 0"):
        apply_retention(root, keep_versions=1, min_version_age=-HOUR)


@pytest.mark.parametrize("record", [None, b"{not json"], ids=["missing", "unreadable"])
def test_an_old_version_without_a_record_starts_its_clock_when_retention_finds_it(
        tmp_path: Path, built_version: Path, record: bytes | None) -> None:
    """A run killed between moving LATEST and writing superseded.json, a root from before the rule,
    or a record damaged by hand: the clock starts at the first retention that sees it (late, never early)."""
    root = _root_with(tmp_path, built_version, complete=IDS[:2], latest=IDS[1])
    record_path = Path(root, "versions", IDS[0], "superseded.json")
    if record is not None:
        record_path.write_bytes(record)
    assert apply_retention(root, keep_versions=1, min_version_age=HOUR, now=T0) == []
    assert superseded_at(root, IDS[0]) == T0
    assert apply_retention(root, keep_versions=1, min_version_age=HOUR, now=T0 + HOUR / 2) == []
    assert apply_retention(root, keep_versions=1, min_version_age=HOUR, now=T0 + HOUR) == [IDS[0]]


def test_a_version_made_latest_again_loses_its_record(tmp_path: Path, built_version: Path) -> None:
    root = _root_with(tmp_path, built_version, complete=IDS[:2], latest=IDS[0])
    commit_version(root, IDS[1], now=T0)
    commit_version(root, IDS[0], now=T0 + 30 * HOUR)  # rolled back by hand
    assert superseded_at(root, IDS[0]) is None and superseded_at(root, IDS[1]) == T0 + 30 * HOUR
    commit_version(root, IDS[1], now=T0 + 40 * HOUR)
    assert superseded_at(root, IDS[0]) == T0 + 40 * HOUR  # its clock restarts, not from T0
    assert apply_retention(root, keep_versions=1, min_version_age=HOUR, now=T0 + 40 * HOUR) == []


@pytest.mark.parametrize("text, seconds", [
    ("24h", 86_400), ("30m", 1_800), ("90s", 90), ("7d", 604_800), ("1h30m", 5_400), ("0", 0), ("0s", 0),
    ("1.5h", 5_400), (" 2H ", 7_200),
])
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == datetime.timedelta(seconds=seconds)
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


@pytest.mark.parametrize("text", ["", "24", "-1h", "1 day", "h", "1w", "1h-30m", "0x"])
def test_bad_duration_is_a_typed_error(text: str) -> None:
    with pytest.raises(DurationError, match=f"bad duration {text!r}: expected a number with a unit"):
        parse_duration(text)


def test_plan_adopts_a_complete_unpublished_version(tmp_path: Path, built_version: Path) -> None:
    fingerprint = stored_fingerprint(load_manifest(str(built_version)))
    root = _root_with(tmp_path, built_version, complete=[IDS[1]])  # crashed between manifest and LATEST
    plan = plan_refresh(root, fingerprint)
    assert (plan.action, plan.version_id, plan.latest) == (RefreshAction.ADOPT, IDS[1], None)
    commit_version(root, plan.version_id)
    assert plan_refresh(root, fingerprint).action is RefreshAction.SKIP
    assert plan_refresh(root, fingerprint, force=True).action is RefreshAction.BUILD
    assert plan_refresh(root, InputFingerprint.of(BASE)).action is RefreshAction.BUILD


def test_ids_without_milliseconds_are_still_read(tmp_path: Path, built_version: Path) -> None:
    legacy = "20260101T000000Z-abcdef"
    root = _root_with(tmp_path, built_version, [legacy], latest=legacy)
    assert resolve_dataset_dir(root).endswith(legacy)
    assert new_version_id(datetime.datetime(2025, 1, 1, tzinfo=UTC), "000000", after=[legacy]) == \
        "20260101T000000.001Z-000000"


def test_adopting_a_version_completes_its_tfds_metadata(tmp_path: Path, built_version: Path) -> None:
    """A run killed between its manifest and TFDS's files: adopting the version writes them (same bytes)."""
    root = _root_with(tmp_path, built_version, complete=[IDS[1]])
    version = Path(root, "versions", IDS[1])
    expected = {name: (built_version / name).read_bytes() for name in ("dataset_info.json", "features.json")}
    for name in expected:
        (version / name).unlink()
    commit_version(root, IDS[1])
    assert {name: (version / name).read_bytes() for name in expected} == expected
    assert read_latest(root) == IDS[1]


def test_an_image_build_fingerprints_its_inputs_from_the_listing_it_plans_from(input_and_root) -> None:
    """The image folder's plan takes the inputs' fingerprint from its own listing (the build no longer lists the
    folder a second time for it): the fingerprint a listing of ``ROOT/*/*`` gives, around files that glob leaves
    out (at the root, nested deeper) or takes (hidden, not an image), and, on local disk, one it cannot size."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_tfrecord import storage
    from pipelines.sources import image_folder

    folder, _ = input_and_root
    for relative in ("notes.txt", "circle/deeper/0000.jpg", "circle/readme.md", "square/.hidden.jpg"):
        storage.write_bytes_atomic(f"{folder}/{relative}", b"not an image")
    if "://" not in folder:
        os.symlink(os.path.join(folder, "gone.jpg"), os.path.join(folder, "square", "dangling.jpg"))
    plan = image_folder.SPEC.plan(PipelineOptions([f"--input={folder}"]), job="build_image_dataset")
    listed = fingerprint_inputs([folder + "/*/*"])
    assert plan.inputs == listed
    assert listed.num_files == 30 + 2  # the images, readme.md and .hidden.jpg; not the dangling link

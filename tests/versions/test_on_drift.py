"""``--on_drift`` on the image-folder refresh (DirectRunner, local paths), and ``beam-tfrecord compare``.

Versions built before ``statistics.pb`` existed: the check computes both sides' statistics from the records.
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest

from beam_tfrecord import cli
from beam_tfrecord.dataset import read_latest, version_dir
from beam_tfrecord.errors import DriftHeldError, StatisticsFileError
from beam_tfrecord.statistics.drift_record import read_drift_record
from beam_tfrecord.versions.refresh import RefreshAction, apply_retention, commit_version, list_versions
from pipelines import refresh_image_dataset
from pipelines.make_sample_images import write_sample_images

FIRST = "20200101T000000.000Z-aaaaaa"  # the published version each test starts from


def _refresh(images: str, root: str, *extra: str):
    return refresh_image_dataset.run(["--input", images, "--dataset_root", root, *extra])


def _root(tmp_path: Path, built_version: Path) -> str:
    """A root whose LATEST is a copy of the session's version of the 30 tiny images (one build saved per test)."""
    root = tmp_path / "root"
    shutil.copytree(built_version, root / "versions" / FIRST)
    commit_version(str(root), FIRST)
    return str(root)


def test_hold_keeps_latest_on_a_removed_class_and_warn_publishes_it(
        images: str, tmp_path: Path, built_version: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, first = _root(tmp_path, built_version), FIRST
    shutil.rmtree(Path(images, "circle"))  # a class disappears upstream
    with pytest.raises(DriftHeldError) as held:
        _refresh(images, root, "--on_drift=hold")
    error = held.value
    line = "split train, feature label: l_infinity 0.3333 > 0.1 ('circle': 33.3% -> 0.0% of values)"
    assert (error.latest, error.lines) == (first, (line,))
    assert read_latest(root) == first  # LATEST unchanged
    assert list_versions(root).complete == (first, error.version_id)  # the held version is kept, complete
    record = read_drift_record(version_dir(root, error.version_id))
    assert record is not None and (record.held, record.compared_with) == (True, first)
    assert f"refresh {root}: drift: {line}" in capsys.readouterr().out

    assert cli.main(["inspect", version_dir(root, error.version_id)]) == 0
    described = capsys.readouterr().out
    assert f"  drift check: HELD: not published (on_drift=hold): drifted from version {first}\n    {line}\n" \
        in described

    # The same inputs again: the held version is adopted only through the check; warn publishes it.
    with pytest.raises(DriftHeldError):
        _refresh(images, root, "--on_drift=hold")
    assert read_latest(root) == first
    adopted = _refresh(images, root)  # --on_drift=warn, the default
    assert (adopted.action, read_latest(root)) == (RefreshAction.ADOPT, error.version_id)
    assert f"refresh {root}: drift: published with drift (on_drift=warn) from version {first}" \
        in capsys.readouterr().out


def test_halved_image_sizes_warn_publishes_and_compare_exits_1(
        images: str, tmp_path: Path, built_version: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, first = _root(tmp_path, built_version), FIRST
    shutil.rmtree(images)
    write_sample_images(images, per_class=10, size=8, seed=0)  # the same images at half the size
    second = _refresh(images, root).version_id
    assert read_latest(root) == second
    out = capsys.readouterr().out
    for name in ("image_width", "image_height"):  # the build's statistics.pb: TFDV's image custom statistics
        assert f"split train, feature image:{name}: jensen_shannon 1.0000 > 0.1 ({name})" in out

    old, new = version_dir(root, first), version_dir(root, second)
    assert cli.main(["compare", old, new]) == 1
    table = capsys.readouterr().out
    assert table.splitlines()[1].split() == ["split", "feature", "measure", "value", "threshold", "exceeded",
                                             "detail"]
    assert table.splitlines()[0] == f"drift of {new} against {old}: 3 of 8 measures past their thresholds"

    lenient = tmp_path / "lenient.json"  # JSD is at most 1: nothing is past it
    lenient.write_text(json.dumps({"defaults": {"jensen_shannon": 1.0}}))
    assert cli.main(["compare", old, new, "--thresholds", str(lenient), "--only_exceeded"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "split  feature  measure  value  threshold  exceeded  detail"]
    lenient.write_text(json.dumps({"defaults": {"jsd": 1.0}}))
    assert cli.main(["compare", old, new, "--thresholds", str(lenient)]) == 2
    assert cli.main(["compare", old, str(tmp_path / "nothing")]) == 2
    assert "beam-tfrecord compare: DriftThresholdsError: drift thresholds" in capsys.readouterr().err


def test_hold_publishes_when_nothing_drifted(images: str, tmp_path: Path, built_version: Path) -> None:
    root = _root(tmp_path, built_version)
    shutil.copy(Path(images, "square", "0001.jpg"), Path(images, "square", "extra.jpg"))  # one more of the same
    second = _refresh(images, root, "--on_drift=hold")
    assert read_latest(root) == second.version_id
    record = read_drift_record(second.version_dir)
    assert record is not None and (record.held, record.report.drifted) == (False, ())


def test_retention_counts_a_held_version_once_a_later_one_is_published(tmp_path: Path, built_version: Path) -> None:
    root = _root(tmp_path, built_version)
    held, later = "20200102T000000.000Z-bbbbbb", "20200103T000000.000Z-cccccc"
    for version_id in (held, later):
        shutil.copytree(built_version, Path(root, "versions", version_id))
    assert apply_retention(root, 1, min_version_age=datetime.timedelta(0)) == []  # nothing newer than LATEST goes
    commit_version(root, later)
    assert apply_retention(root, 2, min_version_age=datetime.timedelta(0)) == [FIRST]
    assert list_versions(root).complete == (held, later)


def test_statistics_pb_is_read_when_a_dataset_has_one(tmp_path: Path, built_version: Path) -> None:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from beam_tfrecord.report.version_statistics import statistics_of

    directory = shutil.copytree(built_version, tmp_path / "dataset")
    computed = statistics_of(str(directory))  # no statistics.pb: from the records
    assert [(d.name, d.num_examples) for d in computed.datasets] == [("train", 30)]
    written = statistics_pb2.DatasetFeatureStatisticsList()
    written.datasets.add(name="train", num_examples=7)
    (directory / "statistics.pb").write_bytes(written.SerializeToString())
    assert statistics_of(str(directory)) == written
    (directory / "statistics.pb").write_bytes(b"\xff not a proto")
    with pytest.raises(StatisticsFileError) as info:
        statistics_of(str(directory))
    assert info.value.path == f"{directory}/statistics.pb"


def test_growth_holds_a_refresh_but_not_a_watchs_interval(images: str, tmp_path: Path, built_version: Path) -> None:
    """Twice the records, the same distribution: a refresh's record count drifts (1.0 > 0.5); a watch appends every
    interval by design, so its check counts only a shrink, and ``--on_drift=hold`` does not stop it."""
    for path in list(Path(images).glob("*/*")):  # copies: the distributions stay (duplicates are only reported)
        shutil.copy(path, path.with_name(f"again-{path.name}"))
    root = _root(tmp_path, built_version)
    with pytest.raises(DriftHeldError) as held:
        _refresh(images, root, "--on_drift=hold")
    assert held.value.lines == ("split train, feature *: record_count 1.0000 > 0.5 (30 -> 60 records)",)

    watched = tmp_path / "watched"
    shutil.copytree(built_version, watched / "versions" / FIRST)
    commit_version(str(watched), FIRST)
    outcome = _refresh(images, str(watched), "--on_drift=hold", "--watch", "--triggering_frequency=0.1",
                       "--max_intervals=1")
    assert read_latest(str(watched)) == outcome.version_id != FIRST
    record = read_drift_record(version_dir(str(watched), outcome.version_id))
    assert record is not None and not record.held and not record.report.drifted

"""Planted drift through real builds on the DirectRunner: ``statistics.pb`` holds it and ``compare`` finds it."""

from __future__ import annotations

from pathlib import Path

import pytest
from drift_builds import RECORDS, absent, build, samples

from beam_tfrecord import cli
from beam_tfrecord.statistics import read_statistics
from beam_tfrecord.statistics.drift import compare


def test_a_3_sigma_shift_and_half_missing_are_found_in_the_builds_statistics(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = build(str(tmp_path / "old"), samples())
    new = build(str(tmp_path / "new"), samples(shift=3.0, absent_every=2))
    statistics = {"/".join(f.path.step): f for f in read_statistics(new).datasets[0].features}
    y = statistics["y"].num_stats.common_stats
    assert (y.num_missing, y.num_non_missing) == (absent(new, "y"), RECORDS - absent(new, "y")) == (500, 500)
    assert statistics["x"].num_stats.mean == pytest.approx(3.0, abs=0.1)
    assert read_statistics(old).datasets[0].features[1].num_stats.common_stats.num_missing == 0 == absent(old, "y")
    report = compare(read_statistics(old), read_statistics(new))
    drifted = [(r.split, r.feature, r.measure.value, r.value) for r in report.drifted]
    assert drifted[1:] == [("train", "y", "missing_rate", 0.5)]
    assert drifted[0][:3] == ("train", "x", "jensen_shannon") and drifted[0][3] == pytest.approx(0.76, abs=0.05)
    assert cli.main(["compare", old, new, "--only_exceeded"]) == 1
    printed = capsys.readouterr().out
    assert "missing_rate" in printed and "0.0% -> 50.0% missing" in printed

"""Planted drift in a build on the suite's shared Dask cluster: the statistics its workers computed find it.

The version it is compared with is built on the DirectRunner: a second Dask job doubles the test's time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from drift_builds import absent, build, samples

from beam_tfrecord.engine import FIXED_DASK_RUNNER
from beam_tfrecord.statistics import read_statistics
from beam_tfrecord.statistics.drift import compare


def test_compare_finds_the_drift_planted_between_two_dask_builds(dask_address: str, tmp_path: Path) -> None:
    old = build(str(tmp_path / "old"), samples())  # the last published version, built on the DirectRunner
    new = build(str(tmp_path / "new"), samples(shift=3.0, absent_every=2),
                f"--runner={FIXED_DASK_RUNNER}", f"--dask_client_address={dask_address}")
    assert absent(new, "y") == 500
    report = compare(read_statistics(old), read_statistics(new))
    drifted = [(r.feature, r.measure.value, r.value) for r in report.drifted]
    assert drifted[1:] == [("y", "missing_rate", 0.5)]
    assert drifted[0][:2] == ("x", "jensen_shannon") and drifted[0][2] == pytest.approx(0.76, abs=0.05)

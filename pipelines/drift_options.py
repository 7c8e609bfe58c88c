"""``--on_drift`` and ``--drift_thresholds``: the drift check of every refresh job, defined once.

A job adds ``DriftOptions`` to its option classes, passes ``drift_check(options)`` to ``publish_version``
and calls ``report_drift`` after the pipeline. Measures, thresholds and defaults: docs/drift.md.
"""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.errors import DriftHeldError, DriftThresholdsError
from beam_tfrecord.report.version_statistics import statistics_of
from beam_tfrecord.statistics.drift_record import OnDrift, read_drift_record
from beam_tfrecord.statistics.thresholds import load_thresholds
from beam_tfrecord.versions.drift_gate import DriftCheck


class DriftOptions(PipelineOptions):
    """What a refresh does when the new version's statistics moved from LATEST's."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--on_drift", choices=[mode.value for mode in OnDrift], default=OnDrift.WARN.value,
                            help="before LATEST moves, the new version's statistics are compared with LATEST's: "
                                 "warn publishes and prints what moved past the thresholds; hold keeps the "
                                 "version, leaves LATEST, and exits non-zero (see docs/drift.md)")
        parser.add_argument("--drift_thresholds", default=None,
                            help="JSON file of drift thresholds, defaults and per feature (docs/drift.md); "
                                 "default: the built-in defaults")


def drift_check(options: PipelineOptions, *, watching: bool = False) -> DriftCheck:
    """The job's drift check, its thresholds file read now (before any work); exits with the reason
    when the file is bad. ``watching`` (an interval of ``--watch``): growth is not drift, a shrink still is."""
    drift = options.view_as(DriftOptions)
    try:
        thresholds = load_thresholds(drift.drift_thresholds)
    except DriftThresholdsError as err:
        raise SystemExit(f"--drift_thresholds: {err}") from err
    return DriftCheck(statistics_of, OnDrift(drift.on_drift), thresholds, count_growth=not watching)


def report_drift(root: str, version_dir: str, version_id: str) -> None:
    """Prints the version's drift record (what moved, by how much) after the pipeline ran.

    Raises:
        DriftHeldError: the check held the version (LATEST was not moved).
    """
    record = read_drift_record(version_dir)
    if record is None:
        return
    for line in record.summary():
        print(f"refresh {root}: drift: {line}")
    if record.held:
        raise DriftHeldError(root, version_id, record.compared_with, record.report.lines())

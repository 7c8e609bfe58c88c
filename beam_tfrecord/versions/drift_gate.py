"""The drift check before LATEST moves: the new version's statistics against those of the version LATEST
names, recorded in the new version (``drift.json``) whether it is then published or held.

Measures and thresholds: ``beam_tfrecord/statistics/``; the format and defaults: docs/drift.md.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from beam_tfrecord.dataset import read_latest, version_dir
from beam_tfrecord.statistics.drift import compare
from beam_tfrecord.statistics.drift_record import DriftRecord, OnDrift, write_drift_record
from beam_tfrecord.statistics.thresholds import Thresholds

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DriftCheck:
    """How a refresh checks a new version before publishing it.

    Attributes:
        statistics_of: a dataset directory -> its ``DatasetFeatureStatisticsList`` (a module-level
            function: a pipeline step pickles it).
        on_drift: publish and warn, or hold the version.
        thresholds: the limits of each measure.
    """

    statistics_of: Callable[[str], Any]
    on_drift: OnDrift = OnDrift.WARN
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)


def check_drift(root: str, version_id: str, check: DriftCheck) -> DriftRecord | None:
    """Compares the version with LATEST's and writes the record into the version; None when there is no
    other version to compare with (a first build, or LATEST already names it)."""
    latest = read_latest(root)
    if latest is None or latest == version_id:
        return None
    report = compare(check.statistics_of(version_dir(root, latest)),
                     check.statistics_of(version_dir(root, version_id)), check.thresholds,
                     old_name=latest, new_name=version_id)
    record = DriftRecord(latest, check.on_drift, check.on_drift is OnDrift.HOLD and bool(report.drifted), report)
    write_drift_record(version_dir(root, version_id), record)
    for line in record.summary() if report.drifted else ():
        _LOG.warning("refresh %s: version %s: %s", root, version_id, line)
    return record

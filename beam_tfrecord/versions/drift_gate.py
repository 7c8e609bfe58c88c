"""The drift check before LATEST moves: the new version's statistics against those of the version LATEST
names, recorded in the new version (``drift.json``) whether it is then published or held.

Measures and thresholds: ``beam_tfrecord/statistics/``; the format and defaults: docs/drift.md.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.statistics import APPENDED_STATISTICS_FILE, read_statistics
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
        count_growth: whether a split that grew counts toward the record-count measure; False for a continuous
            refresh (``--watch``), whose every interval appends: only a split that shrank drifts there.
    """

    statistics_of: Callable[[str], Any]
    on_drift: OnDrift = OnDrift.WARN
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)
    count_growth: bool = True


MIN_APPENDED_RECORDS = 100  # an appended split's distributions are compared from this many records on


def check_drift(root: str, version_id: str, check: DriftCheck) -> DriftRecord | None:
    """Compares the version with LATEST's and writes the record into the version; None when there is no
    other version to compare with (a first build, or LATEST already names it)."""
    latest = read_latest(root)
    if latest is None or latest == version_id:
        return None
    before = _statistics(version_dir(root, latest), check)
    report = compare(before, _statistics(version_dir(root, version_id), check, before=before), check.thresholds,
                     old_name=latest, new_name=version_id, count_growth=check.count_growth)
    record = DriftRecord(latest, check.on_drift, check.on_drift is OnDrift.HOLD and bool(report.drifted), report)
    write_drift_record(version_dir(root, version_id), record)
    for line in record.summary() if report.drifted else ():
        _LOG.warning("refresh %s: version %s: %s", root, version_id, line)
    return record


def _statistics(directory: str, check: DriftCheck, *, before: Any = None) -> Any:
    """The statistics a refresh compares: a version that appended to its base compares the records it wrote
    (``APPENDED_STATISTICS_FILE``: its shared shards are not read), with each split's count the version's own
    (the record-count measure compares versions); any other version, its ``check.statistics_of``.

    A split that appended fewer than ``MIN_APPENDED_RECORDS`` records keeps the distributions of ``before`` (the
    version compared with): so few records say nothing of a distribution (one record is a Jensen-Shannon
    distance of 1), and a split that barely changed has not drifted; its record count is still compared.
    """
    appended = read_statistics(directory, APPENDED_STATISTICS_FILE)
    if appended is None:
        return check.statistics_of(directory)
    counts = {split.name: split.num_records for split in load_manifest(directory).splits}
    earlier = {dataset.name: dataset for dataset in before.datasets} if before is not None else {}
    for dataset in appended.datasets:
        if dataset.num_examples < MIN_APPENDED_RECORDS and dataset.name in earlier:
            _LOG.info("drift: split %s of %s: %d records appended, fewer than %d: its distributions are compared "
                      "as unchanged", dataset.name, directory, dataset.num_examples, MIN_APPENDED_RECORDS)
            dataset.CopyFrom(earlier[dataset.name])
        dataset.num_examples = counts.get(dataset.name, dataset.num_examples)
    return appended

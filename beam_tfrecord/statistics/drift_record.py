"""A version's drift record (``drift.json``): how it compared with the version LATEST named before it.

Written atomically by the refresh before LATEST moves; read by the job's end, ``inspect`` and ``describe``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.errors import RefreshError
from beam_tfrecord.statistics.drift import DriftReport, DriftRow

DRIFT_RECORD_FILENAME = "drift.json"


class OnDrift(enum.Enum):
    """What a refresh does when the new version drifted past the thresholds."""

    WARN = "warn"  # publish (move LATEST) and print what moved
    HOLD = "hold"  # keep the version, leave LATEST where it is, fail the job


@dataclasses.dataclass(frozen=True)
class DriftRecord:
    """The outcome of the drift check of one version.

    Attributes:
        compared_with: the version LATEST named when the check ran.
        on_drift: the mode the refresh ran with.
        held: True when the version was held (drift under ``hold``): LATEST was not moved to it.
        report: every row of the comparison.
    """

    compared_with: str
    on_drift: OnDrift
    held: bool
    report: DriftReport

    def to_json(self) -> dict[str, Any]:
        return {"compared_with": self.compared_with, "on_drift": self.on_drift.value, "held": self.held,
                "thresholds_exceeded": len(self.report.drifted), "rows": [r.to_json() for r in self.report.rows]}

    @classmethod
    def from_json(cls, data: dict[str, Any], version: str) -> "DriftRecord":
        report = DriftReport(str(data["compared_with"]), version,
                             tuple(DriftRow.from_json(row) for row in data["rows"]))
        return cls(str(data["compared_with"]), OnDrift(data["on_drift"]), bool(data["held"]), report)

    def summary(self) -> list[str]:
        """Lines for people: held or published, against which version, and each measure past its threshold."""
        if self.held:
            head = f"HELD: not published (on_drift=hold): drifted from version {self.compared_with}"
        elif self.report.drifted:
            head = f"published with drift (on_drift=warn) from version {self.compared_with}"
        else:
            head = f"no drift from version {self.compared_with} ({len(self.report.rows)} measures within thresholds)"
        return [head, *self.report.lines()]


def write_drift_record(directory: str, record: DriftRecord) -> None:
    """Writes the record into the version's directory in one step (a temporary name, then a rename)."""
    storage.write_bytes_atomic(storage.join(directory, DRIFT_RECORD_FILENAME),
                               (json.dumps(record.to_json(), indent=1, sort_keys=True) + "\n").encode())


def read_drift_record(directory: str) -> DriftRecord | None:
    """The version's drift record, or None when it has none (a first version, or one built before drift checks)."""
    path = storage.join(directory, DRIFT_RECORD_FILENAME)
    data = storage.read_bytes_or_none(path)
    if data is None:
        return None
    try:
        return DriftRecord.from_json(json.loads(data), directory.rstrip("/").rsplit("/", 1)[-1])
    except (ValueError, KeyError, TypeError) as err:
        raise RefreshError(f"{path}: malformed drift record ({type(err).__name__}: {err})") from err

"""Drift thresholds: defaults, and per-feature overrides read from a small JSON file (docs/drift.md).

A measure past its threshold (strictly greater) is drift; a schema change is always drift unless the
feature is ignored.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.errors import DriftThresholdsError


class Measure(enum.Enum):
    """What a drift row measures."""

    SCHEMA = "schema"  # a feature (or split) gone, new, or of another type: 1, against 0
    L_INFINITY = "l_infinity"  # categorical: the largest change of one value's share (TFDV's infinity_norm)
    JENSEN_SHANNON = "jensen_shannon"  # numeric: JSD of the standard histograms, log2 (TFDV's comparator)
    MISSING_RATE = "missing_rate"  # the fraction of missing values, new minus old, in absolute value
    RECORD_COUNT = "record_count"  # a split's records, |new - old| / old


# Why these defaults (a weekly refresh of a few thousand to millions of records):
# - l_infinity 0.1: one value's share moving by 10 points. Sampling noise on a share p with n records is
#   sqrt(p(1-p)/n): 0.016 at n=1000, so a tenth is 6 standard errors there, and a class removed from a
#   three-class set (0.33) or a label from 33% to 60% (0.27) is far past it.
# - jensen_shannon 0.1: the same data redrawn stays under 0.02 with the 10-bucket histograms (the tests
#   check 1% more of the same data); a mean shifted by 1 standard deviation of a normal is 0.16, and
#   disjoint histograms (image sizes halved) are 1.0.
# - missing_rate 0.05: 5 more records in 100 lacking the feature is an export bug, not noise.
# - record_count 0.5: a split halved or grown by half; weekly growth of a few percent passes.
DEFAULT_LIMITS: Mapping[Measure, float] = {Measure.L_INFINITY: 0.1, Measure.JENSEN_SHANNON: 0.1,
                                           Measure.MISSING_RATE: 0.05, Measure.RECORD_COUNT: 0.5,
                                           Measure.SCHEMA: 0.0}
_SETTABLE = (Measure.L_INFINITY, Measure.JENSEN_SHANNON, Measure.MISSING_RATE)
_IGNORE_KEY = "ignore"


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The limit of each measure, and per-feature overrides.

    Attributes:
        limits: the default limit of each measure.
        features: feature name (a path joined with ``/``, as in the statistics) -> its own limits.
        ignored: features left out of the comparison.
        source: where these came from (a file's path, or ``defaults``), for messages.
    """

    limits: Mapping[Measure, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_LIMITS))
    features: Mapping[str, Mapping[Measure, float]] = dataclasses.field(default_factory=dict)
    ignored: frozenset[str] = frozenset()
    source: str = "defaults"

    def limit(self, measure: Measure, feature: str) -> float:
        """The threshold of ``measure`` for ``feature``."""
        return self.features.get(feature, {}).get(measure, self.limits[measure])

    def to_json(self) -> dict[str, Any]:
        """The file format back (``load_thresholds`` reads it)."""
        features: dict[str, dict[str, Any]] = {name: {m.value: v for m, v in limits.items()}
                                               for name, limits in self.features.items()}
        for name in self.ignored:
            features.setdefault(name, {})[_IGNORE_KEY] = True
        return {"defaults": {m.value: self.limits[m] for m in (*_SETTABLE, Measure.RECORD_COUNT)},
                "features": dict(sorted(features.items()))}


def _limit(path: str, where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise DriftThresholdsError(path, f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


def _measure(path: str, where: str, key: str, allowed: tuple[Measure, ...]) -> Measure:
    names = [m.value for m in allowed]
    if key not in names:
        raise DriftThresholdsError(path, f"{where}: unknown key {key!r}; expected one of {names}")
    return Measure(key)


def thresholds_from_json(data: object, path: str = "<json>") -> Thresholds:
    """Thresholds from the parsed file: ``{"defaults": {...}, "features": {"name": {...}}}``.

    Raises:
        DriftThresholdsError: an unknown key, a value that is not a number >= 0, or a bad shape.
    """
    if not isinstance(data, dict):
        raise DriftThresholdsError(path, f"expected an object with 'defaults' and 'features', got {data!r}")
    unknown = sorted(set(data) - {"defaults", "features"})
    if unknown:
        raise DriftThresholdsError(path, f"unknown top-level key(s) {unknown}; expected 'defaults', 'features'")
    defaults, features = data.get("defaults", {}), data.get("features", {})
    if not isinstance(defaults, dict) or not isinstance(features, dict):
        raise DriftThresholdsError(path, "'defaults' and 'features' must be objects")
    limits = dict(DEFAULT_LIMITS)
    for key, value in defaults.items():
        limits[_measure(path, "defaults", key, (*_SETTABLE, Measure.RECORD_COUNT))] = _limit(
            path, f"defaults.{key}", value)
    overrides: dict[str, dict[Measure, float]] = {}
    ignored = set()
    for name, entry in features.items():
        if not isinstance(entry, dict):
            raise DriftThresholdsError(path, f"features.{name}: expected an object, got {entry!r}")
        for key, value in entry.items():
            if key == _IGNORE_KEY:
                if not isinstance(value, bool):
                    raise DriftThresholdsError(path, f"features.{name}.ignore: expected true or false, got {value!r}")
                if value:
                    ignored.add(name)
                continue
            measure = _measure(path, f"features.{name}", key, _SETTABLE)
            overrides.setdefault(name, {})[measure] = _limit(path, f"features.{name}.{key}", value)
    return Thresholds(limits, overrides, frozenset(ignored), path)


def load_thresholds(path: str | None) -> Thresholds:
    """The thresholds in the JSON file at ``path`` (local or remote); the defaults when ``path`` is None."""
    if path is None:
        return Thresholds()
    try:
        data = json.loads(storage.read_bytes(path))
    except (OSError, ValueError) as err:
        raise DriftThresholdsError(path, f"cannot read it as JSON ({type(err).__name__}: {err})") from err
    return thresholds_from_json(data, path)

"""Drift between two versions' statistics (TFMD ``DatasetFeatureStatisticsList``), split by split.

Rows of (split, feature, measure, value, threshold, exceeded): TFDV's L-infinity distance for categorical
features, its Jensen-Shannon divergence for numeric histograms (``measures.py``), schema changes, the
missing rate and the record count. Thresholds: ``thresholds.py``; the format and defaults: docs/drift.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from beam_tfrecord.statistics.measures import Bucket, aligned, jensen_shannon, l_infinity
from beam_tfrecord.statistics.thresholds import Measure, Thresholds

SPLIT_FEATURE = "*"  # the feature column of a row about a whole split (its record count, a split gone or new)


@dataclasses.dataclass(frozen=True)
class DriftRow:
    """One measure of one feature of one split.

    Attributes:
        split: the split's name.
        feature: the feature (its path joined with ``/``), or ``*`` for the split itself.
        measure: what was measured.
        value: the measure, new against old.
        threshold: its limit; past it (strictly greater) is drift.
        detail: the numbers behind it for people (the value that moved most, the means, the counts).
    """

    split: str
    feature: str
    measure: Measure
    value: float
    threshold: float
    detail: str

    @property
    def exceeded(self) -> bool:
        return self.value > self.threshold

    def line(self) -> str:
        """One line for a log or an error: ``split train, feature label: l_infinity 0.2667 > 0.1 (...)``."""
        return (f"split {self.split}, feature {self.feature}: {self.measure.value} {self.value:.4f} "
                f"{'>' if self.exceeded else '<='} {self.threshold:g} ({self.detail})")

    def to_json(self) -> dict[str, Any]:
        return {"split": self.split, "feature": self.feature, "measure": self.measure.value, "value": self.value,
                "threshold": self.threshold, "exceeded": self.exceeded, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DriftRow":
        return cls(str(data["split"]), str(data["feature"]), Measure(data["measure"]), float(data["value"]),
                   float(data["threshold"]), str(data["detail"]))


@dataclasses.dataclass(frozen=True)
class DriftReport:
    """Every row of a comparison of ``new`` against ``old`` (paths or version ids, for messages)."""

    old: str
    new: str
    rows: tuple[DriftRow, ...]

    @property
    def drifted(self) -> tuple[DriftRow, ...]:
        """The rows past their thresholds."""
        return tuple(row for row in self.rows if row.exceeded)

    def lines(self) -> tuple[str, ...]:
        """One line per row past its threshold."""
        return tuple(row.line() for row in self.drifted)

    def table(self, *, only_exceeded: bool = False) -> str:
        """A header line naming both sides and counting the rows past their thresholds, then the rows (all,
        or only those past their thresholds) as an aligned text table."""
        header = (f"drift of {self.new} against {self.old}: {len(self.drifted)} of {len(self.rows)} measures past "
                  "their thresholds")
        return "\n".join([header, render_table(self.drifted if only_exceeded else self.rows)])


_COLUMNS = ("split", "feature", "measure", "value", "threshold", "exceeded", "detail")


def render_table(rows: tuple[DriftRow, ...]) -> str:
    """The rows as a text table (columns split, feature, measure, value, threshold, exceeded, detail)."""
    cells = [_COLUMNS] + [(r.split, r.feature, r.measure.value, f"{r.value:.4f}", f"{r.threshold:g}",
                           "YES" if r.exceeded else "no", r.detail) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS) - 1)]
    return "\n".join(("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]).rstrip()
                     for row in cells)


def _feature_name(feature: Any) -> str:
    return "/".join(feature.path.step) if feature.path.step else feature.name


def _common(feature: Any) -> Any | None:
    kind = feature.WhichOneof("stats")
    return getattr(getattr(feature, kind), "common_stats", None) if kind else None


def _missing_rate(feature: Any) -> float:
    common = _common(feature)
    if common is None:
        return 0.0
    total = common.num_non_missing + common.num_missing
    return common.num_missing / total if total else 0.0


def _value_counts(rank_histogram: Any, top_values: Any = ()) -> dict[str, float]:
    """Value -> count: from the rank histogram as TFDV reads it, else from the top values."""
    counts = {bucket.label: bucket.sample_count for bucket in rank_histogram.buckets}
    return counts or {top.value: top.frequency for top in top_values}


def _buckets(histogram: Any) -> list[Bucket]:
    return [Bucket(b.low_value, b.high_value, b.sample_count) for b in histogram.buckets]


def _standard_histogram(feature: Any) -> Any | None:
    """The numeric feature's standard histogram (the one TFDV's JSD reads), else its quantiles."""
    histograms = list(feature.num_stats.histograms) if feature.HasField("num_stats") else []
    histograms.sort(key=lambda h: h.type)  # STANDARD (0) before QUANTILES (1)
    return histograms[0] if histograms and histograms[0].buckets else None


def _categorical_row(split: str, name: str, old: dict[str, float], new: dict[str, float],
                     thresholds: Thresholds) -> DriftRow:
    key, distance = l_infinity(old, new)
    old_share = old.get(key, 0.0) / (sum(old.values()) or 1.0)
    new_share = new.get(key, 0.0) / (sum(new.values()) or 1.0)
    return DriftRow(split, name, Measure.L_INFINITY, distance, thresholds.limit(Measure.L_INFINITY, name),
                    f"{key!r}: {old_share:.1%} -> {new_share:.1%} of values")


def _numeric_row(split: str, name: str, old: Any, new: Any, thresholds: Thresholds,
                 detail: str) -> DriftRow | None:
    old_counts, new_counts = aligned(_buckets(old), _buckets(new), old.num_nan, new.num_nan)
    divergence = jensen_shannon(old_counts, new_counts)
    if divergence is None:
        return None
    return DriftRow(split, name, Measure.JENSEN_SHANNON, divergence, thresholds.limit(Measure.JENSEN_SHANNON, name),
                    detail)


def _distribution_rows(split: str, name: str, old: Any, new: Any, thresholds: Thresholds) -> Iterator[DriftRow]:
    """The L-infinity or JSD row of a feature, and one per custom statistic holding a histogram."""
    if old.HasField("string_stats") and new.HasField("string_stats"):
        old_counts = _value_counts(old.string_stats.rank_histogram, old.string_stats.top_values)
        new_counts = _value_counts(new.string_stats.rank_histogram, new.string_stats.top_values)
        if old_counts and new_counts:
            yield _categorical_row(split, name, old_counts, new_counts, thresholds)
    old_histogram, new_histogram = _standard_histogram(old), _standard_histogram(new)
    if old_histogram is not None and new_histogram is not None:
        detail = (f"mean {old.num_stats.mean:.4g} -> {new.num_stats.mean:.4g}, "
                  f"std {old.num_stats.std_dev:.4g} -> {new.num_stats.std_dev:.4g}")
        row = _numeric_row(split, name, old_histogram, new_histogram, thresholds, detail)
        if row is not None:
            yield row
    new_custom = {custom.name: custom for custom in new.custom_stats}
    for custom in old.custom_stats:
        other = new_custom.get(custom.name)
        kind = custom.WhichOneof("val")
        if other is None or kind != other.WhichOneof("val"):
            continue
        label = f"{name}:{custom.name}"
        if kind == "rank_histogram":
            counts = (_value_counts(custom.rank_histogram), _value_counts(other.rank_histogram))
            if counts[0] and counts[1]:
                yield _categorical_row(split, label, *counts, thresholds)
        elif kind == "histogram":
            row = _numeric_row(split, label, custom.histogram, other.histogram, thresholds, custom.name)
            if row is not None:
                yield row


def _type_name(feature: Any) -> str:
    return str(type(feature).Type.Name(feature.type))


def _feature_rows(split: str, old: Any, new: Any, thresholds: Thresholds) -> Iterator[DriftRow]:
    old_features = {_feature_name(f): f for f in old.features}
    new_features = {_feature_name(f): f for f in new.features}
    schema_limit = thresholds.limits[Measure.SCHEMA]
    for name in sorted(set(old_features) | set(new_features)):
        if name in thresholds.ignored:
            continue
        before, after = old_features.get(name), new_features.get(name)
        if before is None or after is None:
            present = after if before is None else before
            state = "new" if before is None else "gone"
            yield DriftRow(split, name, Measure.SCHEMA, 1.0, schema_limit, f"feature {state} ({_type_name(present)})")
            continue
        if before.type != after.type:
            yield DriftRow(split, name, Measure.SCHEMA, 1.0, schema_limit,
                           f"type {_type_name(before)} -> {_type_name(after)}")
            continue
        yield from _distribution_rows(split, name, before, after, thresholds)
        old_rate, new_rate = _missing_rate(before), _missing_rate(after)
        yield DriftRow(split, name, Measure.MISSING_RATE, abs(new_rate - old_rate),
                       thresholds.limit(Measure.MISSING_RATE, name), f"{old_rate:.1%} -> {new_rate:.1%} missing")


def compare(old: Any, new: Any, thresholds: Thresholds | None = None, *, old_name: str = "old",
            new_name: str = "new", count_growth: bool = True) -> DriftReport:
    """Every drift row of ``new`` against ``old`` (both ``DatasetFeatureStatisticsList``), splits by name.

    ``count_growth=False``: a split's record count drifts only when it shrank (a continuous refresh appends every
    interval by design, so its early intervals each grow by more than half)."""
    thresholds = thresholds or Thresholds()
    old_splits = {dataset.name: dataset for dataset in old.datasets}
    new_splits = {dataset.name: dataset for dataset in new.datasets}
    rows: list[DriftRow] = []
    for split in sorted(set(old_splits) | set(new_splits)):
        before, after = old_splits.get(split), new_splits.get(split)
        if before is None or after is None:
            state = "new" if before is None else "gone"
            rows.append(DriftRow(split, SPLIT_FEATURE, Measure.SCHEMA, 1.0, thresholds.limits[Measure.SCHEMA],
                                 f"split {state}"))
            continue
        moved = after.num_examples - before.num_examples
        moved = abs(moved) if count_growth else max(-moved, 0)
        change = moved / before.num_examples if before.num_examples else float(moved > 0)
        rows.append(DriftRow(split, SPLIT_FEATURE, Measure.RECORD_COUNT, change,
                             thresholds.limits[Measure.RECORD_COUNT],
                             f"{before.num_examples} -> {after.num_examples} records"))
        rows.extend(_feature_rows(split, before, after, thresholds))
    return DriftReport(old_name, new_name, tuple(rows))

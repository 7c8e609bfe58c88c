"""The drift comparison on statistics protos built here: each planted drift trips exactly its measure,
and 1% more of the same data trips none."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tensorflow_metadata.proto.v0 import statistics_pb2

from beam_tfrecord.errors import DriftThresholdsError
from beam_tfrecord.statistics.drift import compare
from beam_tfrecord.statistics.thresholds import DEFAULT_LIMITS, Measure, Thresholds, load_thresholds

FeatureStats = statistics_pb2.FeatureNameStatistics


def numeric(name: str, values: np.ndarray, *, missing: int = 0, edges: np.ndarray | None = None) -> FeatureStats:
    """A FLOAT feature as TFDV writes it: common stats, mean/std, one standard histogram (10 buckets)."""
    feature = FeatureStats(type=FeatureStats.FLOAT)
    feature.path.step.append(name)
    stats = feature.num_stats
    stats.common_stats.num_non_missing, stats.common_stats.num_missing = len(values), missing
    stats.mean, stats.std_dev = float(values.mean()), float(values.std())
    counts, bounds = np.histogram(values, bins=10 if edges is None else edges)
    histogram = stats.histograms.add(type=statistics_pb2.Histogram.STANDARD)
    for count, low, high in zip(counts.tolist(), bounds[:-1].tolist(), bounds[1:].tolist()):
        histogram.buckets.add(low_value=low, high_value=high, sample_count=count)
    return feature


def categorical(name: str, counts: dict[str, int]) -> FeatureStats:
    """A STRING feature: rank histogram and top values, as TFDV writes them."""
    feature = FeatureStats(type=FeatureStats.STRING)
    feature.path.step.append(name)
    strings = feature.string_stats
    strings.common_stats.num_non_missing = sum(counts.values())
    strings.unique = len(counts)
    for rank, (value, count) in enumerate(sorted(counts.items(), key=lambda kv: -kv[1])):
        strings.top_values.add(value=value, frequency=count)
        strings.rank_histogram.buckets.add(low_rank=rank, high_rank=rank, label=value, sample_count=count)
    return feature


def statistics(num_examples: int, *features: FeatureStats, split: str = "train"):
    out = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = out.datasets.add(name=split, num_examples=num_examples)
    for feature in features:
        dataset.features.add().CopyFrom(feature)
    return out


def exceeded(report) -> list[tuple[str, str, str, float]]:
    return [(r.split, r.feature, r.measure.value, round(r.value, 4)) for r in report.drifted]


THREE = {"cat": 100, "dog": 100, "fox": 100}


@pytest.mark.parametrize("new_counts, value, detail", [
    ({"cat": 150, "dog": 150}, 0.3333, "'fox': 33.3% -> 0.0% of values"),  # a class removed
    ({"cat": 180, "dog": 60, "fox": 60}, 0.2667, "'cat': 33.3% -> 60.0% of values"),  # 33% -> 60%
], ids=["class_removed", "share_33_to_60"])
def test_label_drift_trips_l_infinity(new_counts: dict[str, int], value: float, detail: str) -> None:
    report = compare(statistics(300, categorical("label", THREE)), statistics(300, categorical("label", new_counts)))
    assert exceeded(report) == [("train", "label", "l_infinity", value)]
    assert report.drifted[0].detail == detail and report.drifted[0].threshold == 0.1


def test_image_sizes_halved_trip_jensen_shannon() -> None:
    old = statistics(300, numeric("image/width", np.full(300, 64.0)), numeric("image/height", np.full(300, 48.0)))
    new = statistics(300, numeric("image/width", np.full(300, 32.0)), numeric("image/height", np.full(300, 24.0)))
    assert exceeded(compare(old, new)) == [("train", "image/height", "jensen_shannon", 1.0),
                                           ("train", "image/width", "jensen_shannon", 1.0)]


def test_numeric_shift_of_three_standard_deviations_trips_jensen_shannon() -> None:
    rng = np.random.default_rng(0)
    old = statistics(10_000, numeric("x", rng.normal(5.0, 2.0, 10_000)))
    new = statistics(10_000, numeric("x", rng.normal(11.0, 2.0, 10_000)))
    report = compare(old, new)
    assert [(r.feature, r.measure) for r in report.drifted] == [("x", Measure.JENSEN_SHANNON)]
    # Two normals 3 standard deviations apart have JSD 0.76 (log2, by numerical integration); 10-bucket
    # histograms stay within a few hundredths of it.
    assert report.drifted[0].value == pytest.approx(0.76, abs=0.03)
    assert report.drifted[0].detail.startswith("mean 5.0")


def test_half_missing_trips_missing_rate_only() -> None:
    values = np.random.default_rng(1).normal(0.0, 1.0, 1000)
    old = statistics(1000, numeric("x", values))
    new = statistics(1000, numeric("x", values[::2], missing=500))  # the same distribution, half of it gone
    report = compare(old, new)
    assert exceeded(report) == [("train", "x", "missing_rate", 0.5)]
    assert report.drifted[0].detail == "0.0% -> 50.0% missing"


def test_one_percent_more_of_the_same_data_passes_every_default() -> None:
    rng = np.random.default_rng(2)
    values = rng.normal(0.0, 1.0, 10_100)
    widths = rng.choice([32.0, 64.0, 128.0], 10_100)
    labels = rng.choice(["cat", "dog", "fox"], 10_100, p=[0.5, 0.3, 0.2])

    def version(n: int):
        return statistics(n, numeric("x", values[:n]), numeric("image/width", widths[:n]),
                          categorical("label", dict(zip(*np.unique(labels[:n], return_counts=True)))))

    report = compare(version(10_000), version(10_100))
    assert report.drifted == () and len(report.rows) == 7  # count; per feature: distribution and missing rate
    assert max(r.value for r in report.rows if r.measure is Measure.JENSEN_SHANNON) < 0.02


def test_schema_changes_and_splits() -> None:
    old = statistics(10, numeric("gone", np.ones(10)), numeric("kept", np.ones(10)), categorical("kind", {"a": 10}))
    new = statistics(10, numeric("new", np.ones(10)), numeric("kept", np.ones(10)),
                     numeric("kind", np.ones(10)))
    new.datasets.add(name="test", num_examples=3)
    report = compare(old, new)
    assert [(r.split, r.feature, r.detail) for r in report.drifted] == [
        ("test", "*", "split new"), ("train", "gone", "feature gone (FLOAT)"),
        ("train", "kind", "type STRING -> FLOAT"), ("train", "new", "feature new (FLOAT)")]
    assert {r.measure for r in report.drifted} == {Measure.SCHEMA}


def test_record_count_change() -> None:
    report = compare(statistics(1000, numeric("x", np.ones(5))), statistics(400, numeric("x", np.ones(5))))
    assert exceeded(report) == [("train", "*", "record_count", 0.6)]
    assert report.drifted[0].line() == "split train, feature *: record_count 0.6000 > 0.5 (1000 -> 400 records)"


@pytest.mark.parametrize("before, after, drifted", [
    (10, 100, []),  # a watch's early interval: ten times the records, growth by design
    (1000, 400, [("train", "*", "record_count", 0.6)]),  # a shrink is still drift
    (0, 50, []),
    (1000, 1000, []),
])
def test_a_watch_counts_only_a_shrink(before: int, after: int, drifted: list) -> None:
    report = compare(statistics(before, numeric("x", np.ones(5))), statistics(after, numeric("x", np.ones(5))),
                     count_growth=False)
    assert exceeded(report) == drifted
    assert exceeded(compare(statistics(before), statistics(after))) == ([] if before == after else  # a refresh's
        [("train", "*", "record_count", round(abs(after - before) / before if before else 1.0, 4))])


def test_thresholds_file_overrides_per_feature_and_ignores(tmp_path: Path) -> None:
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps({"defaults": {"record_count": 0.7},
                                "features": {"label": {"l_infinity": 0.3}, "gone": {"ignore": True}}}))
    thresholds = load_thresholds(str(path))
    assert thresholds.limit(Measure.L_INFINITY, "label") == 0.3
    assert thresholds.limit(Measure.L_INFINITY, "other") == DEFAULT_LIMITS[Measure.L_INFINITY]
    old = statistics(1000, categorical("label", THREE), numeric("gone", np.ones(3)))
    new = statistics(400, categorical("label", {"cat": 180, "dog": 60, "fox": 60}))
    assert compare(old, new, thresholds).drifted == ()  # 0.2667 <= 0.3, 0.6 <= 0.7, "gone" ignored
    assert load_thresholds(None) == Thresholds()
    assert Thresholds(**{**vars(thresholds)}).to_json() == thresholds.to_json()


@pytest.mark.parametrize("content, reason", [
    ({"default": {}}, "unknown top-level key(s) ['default']; expected 'defaults', 'features'"),
    ({"defaults": {"linf": 0.1}}, "defaults: unknown key 'linf'; expected one of ['l_infinity', 'jensen_shannon', "
                                  "'missing_rate', 'record_count']"),
    ({"features": {"x": {"record_count": 0.1}}}, "features.x: unknown key 'record_count'; expected one of "
                                                 "['l_infinity', 'jensen_shannon', 'missing_rate']"),
    ({"features": {"x": {"jensen_shannon": -1}}}, "features.x.jensen_shannon: expected a number >= 0, got -1"),
    ({"features": {"x": {"ignore": "yes"}}}, "features.x.ignore: expected true or false, got 'yes'"),
], ids=["top_level", "default_key", "feature_key", "negative", "ignore_not_bool"])
def test_bad_thresholds_file_names_the_key(tmp_path: Path, content: object, reason: str) -> None:
    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps(content))
    with pytest.raises(DriftThresholdsError) as info:
        load_thresholds(str(path))
    assert (info.value.path, info.value.reason) == (str(path), reason)

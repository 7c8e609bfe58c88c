"""SplitStatistics -> TFMD's ``DatasetFeatureStatistics``, field for field as TFDV fills them.

Histograms as TFDV's: 10 standard buckets of equal width over [min, max] and 10 quantile buckets; 20 top values;
image features as TFDV's image stats generator (``image_format_histogram``, ``image_max_width``...).
"""

from __future__ import annotations

import itertools
from typing import Any

from tensorflow_metadata.proto.v0 import statistics_pb2

from beam_tfrecord.statistics.accumulator import FeatureStats, Kind, SplitStatistics
from beam_tfrecord.statistics.sketches import Numbers

NUM_BUCKETS = 10
NUM_TOP_VALUES = 20
NUM_RANK_BUCKETS = 50
_FEATURE = statistics_pb2.FeatureNameStatistics
_TYPE = {Kind.NUMBER: _FEATURE.FLOAT, Kind.STRING: _FEATURE.STRING, Kind.LABEL: _FEATURE.INT,
         Kind.BYTES: _FEATURE.BYTES, Kind.IMAGE: _FEATURE.BYTES}


def _quantiles_histogram(numbers: Numbers, histogram: Any) -> None:
    histogram.type = statistics_pb2.Histogram.QUANTILES
    histogram.num_nan = numbers.nan
    if not numbers.count:
        return
    edges = numbers.quantiles([i / NUM_BUCKETS for i in range(NUM_BUCKETS + 1)])
    edges[0], edges[-1] = numbers.minimum, numbers.maximum
    for low, high in itertools.pairwise(edges):
        histogram.buckets.add(low_value=low, high_value=high, sample_count=numbers.count / NUM_BUCKETS)


def _standard_histogram(numbers: Numbers, histogram: Any) -> None:
    histogram.type = statistics_pb2.Histogram.STANDARD
    histogram.num_nan = numbers.nan
    if not numbers.count:
        return
    low, high = numbers.minimum, numbers.maximum
    if low == high:
        histogram.buckets.add(low_value=low, high_value=high, sample_count=numbers.count)
        return
    edges = [low + (high - low) * i / NUM_BUCKETS for i in range(NUM_BUCKETS + 1)]
    below = [0.0, *numbers.counts_below(edges[1:-1]), float(numbers.count)]
    for i in range(NUM_BUCKETS):
        histogram.buckets.add(low_value=edges[i], high_value=edges[i + 1], sample_count=below[i + 1] - below[i])


def _common(stats: FeatureStats, common: Any) -> None:
    counts = stats.num_values
    common.num_non_missing = stats.present
    common.num_missing = stats.missing
    if counts.count:
        common.min_num_values = int(counts.minimum)
        common.max_num_values = int(counts.maximum)
        common.avg_num_values = counts.mean
        common.tot_num_values = int(counts.total)
    _quantiles_histogram(counts, common.num_values_histogram)


def _numeric(stats: FeatureStats, out: Any) -> None:
    numbers = stats.values
    _common(stats, out.common_stats)
    if numbers.count:
        out.mean, out.std_dev, out.num_zeros = numbers.mean, numbers.std, numbers.zeros
        out.min, out.max, out.median = numbers.minimum, numbers.maximum, numbers.quantiles([0.5])[0]
    _standard_histogram(numbers, out.histograms.add())
    _quantiles_histogram(numbers, out.histograms.add())


def _frequencies(stats: FeatureStats, out: Any) -> None:
    values = stats.frequencies
    _common(stats, out.common_stats)
    out.unique = values.unique()
    out.avg_length = values.total_length / values.count if values.count else 0.0
    for value, count in values.top(NUM_TOP_VALUES):
        out.top_values.add(value=value, frequency=count)
    for rank, (value, count) in enumerate(values.top(NUM_RANK_BUCKETS)):
        out.rank_histogram.buckets.add(low_rank=rank, high_rank=rank, label=value, sample_count=count)


def _lengths(stats: FeatureStats, out: Any) -> None:
    lengths = stats.values
    _common(stats, out.common_stats)
    if lengths.count:
        out.avg_num_bytes, out.min_num_bytes, out.max_num_bytes = lengths.mean, lengths.minimum, lengths.maximum
        out.max_num_bytes_int = int(lengths.maximum)


def _custom_histogram(feature: Any, name: str, numbers: Numbers) -> None:
    _quantiles_histogram(numbers, feature.custom_stats.add(name=name).histogram)


def _image_custom_stats(stats: FeatureStats, feature: Any) -> None:
    feature.custom_stats.add(name="domain_info", str="image_domain {}")
    ranked = sorted(stats.formats.items(), key=lambda item: (-item[1], item[0]))
    formats = feature.custom_stats.add(name="image_format_histogram").rank_histogram
    for rank, (name, count) in enumerate(ranked):
        formats.buckets.add(low_rank=rank, high_rank=rank, label=name, sample_count=count)
    if stats.widths.count:
        feature.custom_stats.add(name="image_max_width", num=stats.widths.maximum)
        feature.custom_stats.add(name="image_max_height", num=stats.heights.maximum)
    _custom_histogram(feature, "image_width", stats.widths)
    _custom_histogram(feature, "image_height", stats.heights)
    _custom_histogram(feature, "num_bytes", stats.values)
    feature.custom_stats.add(name="image_undecodable", num=stats.undecodable)


def split_proto(split: SplitStatistics) -> Any:
    """One split's ``DatasetFeatureStatistics`` (named by the split), features in schema order."""
    dataset = statistics_pb2.DatasetFeatureStatistics(name=split.split, num_examples=split.num_examples)
    for name, stats in split.features.items():
        feature = dataset.features.add(type=_FEATURE.INT if stats.integer and stats.kind is Kind.NUMBER
                                       else _TYPE[stats.kind])
        feature.path.step.append(name)
        if stats.kind is Kind.NUMBER:
            _numeric(stats, feature.num_stats)
            if stats.stride > 1:
                feature.custom_stats.add(name="value_sample_stride", num=stats.stride)
        elif stats.kind in (Kind.STRING, Kind.LABEL):
            _frequencies(stats, feature.string_stats)
        else:
            _lengths(stats, feature.bytes_stats)
            if stats.kind is Kind.IMAGE:
                _image_custom_stats(stats, feature)
            else:
                _custom_histogram(feature, "num_bytes", stats.values)
    return dataset


def statistics_proto(splits: list[SplitStatistics]) -> Any:
    """A ``DatasetFeatureStatisticsList`` of ``splits``, in the order given."""
    return statistics_pb2.DatasetFeatureStatisticsList(datasets=[split_proto(split) for split in splits])

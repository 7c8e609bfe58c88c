"""What the report draws, read from the dataset's ``statistics.pb`` (written by the build): no pass over the
shards. Only the sample images are read: the first records of one split, at most ``SAMPLE_RECORDS``.

A dataset without the file (written before builds wrote it) is read once instead (``collect_from_records``).
"""

from __future__ import annotations

import collections
import itertools
from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.schema import ClassLabel, Image, VarList
from beam_tfrecord.dataset import LoadedDataset, open_dataset
from beam_tfrecord.report.stats import (
    FROM_RECORDS,
    FROM_STATISTICS,
    DatasetStats,
    Distribution,
    ImageSizes,
    SplitCollector,
    SplitStats,
    add_sample,
    dead_letter_reasons,
    first_samples,
    iter_split_examples,
    split_sizes,
)
from beam_tfrecord.report.tfdv import statistics_list
from beam_tfrecord.statistics import read_statistics
from beam_tfrecord.statistics.measures import Bucket

SAMPLE_RECORDS = 2000  # records read at most for the grids of sample images


def _histogram(histogram: Any) -> tuple[Bucket, ...]:
    return tuple(Bucket(b.low_value, b.high_value, b.sample_count) for b in histogram.buckets)


def _distribution(histogram: Any, count: int, minimum: float, mean: float, maximum: float) -> Distribution:
    """A TFMD histogram (standard or quantiles) of ``count`` values with their extremes and mean."""
    if not count:
        return Distribution(0, float("inf"), float("nan"), float("-inf"), int(histogram.num_nan), ())
    return Distribution(count, minimum, mean, maximum, int(histogram.num_nan), _histogram(histogram))


def _numbers(stats: Any) -> Distribution:
    """``num_stats``: its standard histogram (what was summarized: tensors' values are sampled by a stride)."""
    standard = next(h for h in stats.histograms if h.type == h.STANDARD)
    count = round(sum(b.sample_count for b in standard.buckets))
    return _distribution(standard, count, stats.min, stats.mean, stats.max)


def _lengths(common: Any) -> Distribution:
    """Values per record, from ``common_stats``'s quantiles histogram."""
    return _distribution(common.num_values_histogram, int(common.num_non_missing), common.min_num_values,
                         common.avg_num_values, common.max_num_values)


def _custom(feature: Any, name: str) -> Any:
    return next((c for c in feature.custom_stats if c.name == name), None)


def _quantiles(feature: Any, name: str) -> Distribution:
    """An image's custom quantiles histogram (``image_width``...): extremes from its buckets, mean from their
    midpoints (TFDV keeps no mean of them)."""
    histogram = _custom(feature, name).histogram
    buckets = _histogram(histogram)
    count = round(sum(b.count for b in buckets))
    if not count:
        return _distribution(histogram, 0, 0.0, 0.0, 0.0)
    mean = sum((b.low + b.high) / 2 * b.count for b in buckets) / sum(b.count for b in buckets)
    return _distribution(histogram, count, buckets[0].low, mean, buckets[-1].high)


def _split(dataset: LoadedDataset, proto: Any) -> SplitStats:
    out = split_sizes(dataset.manifest, proto.name)
    features = {"/".join(f.path.step): f for f in proto.features}
    for name, feature in dataset.manifest.schema.features.items():
        found = features.get(name)
        if found is None:
            continue
        if isinstance(feature, ClassLabel):
            out.classes[name] = collections.Counter(
                {b.label: int(b.sample_count) for b in found.string_stats.rank_histogram.buckets})
        elif isinstance(feature, Image):
            undecodable = _custom(found, "image_undecodable")
            out.images[name] = ImageSizes(_quantiles(found, "image_width"), _quantiles(found, "image_height"),
                                          _lengths_of_bytes(found), int(undecodable.num) if undecodable else 0)
        elif found.HasField("num_stats"):
            out.numeric[name] = _numbers(found.num_stats)
        if isinstance(feature, VarList):
            common = found.num_stats.common_stats if found.HasField("num_stats") else \
                found.string_stats.common_stats if found.HasField("string_stats") else found.bytes_stats.common_stats
            out.lengths[name] = _lengths(common)
    return out


def _lengths_of_bytes(feature: Any) -> Distribution:
    stats = feature.bytes_stats
    distribution = _quantiles(feature, "num_bytes")
    return Distribution(distribution.count, stats.min_num_bytes, stats.avg_num_bytes, stats.max_num_bytes,
                        distribution.non_finite, distribution.buckets)


def first_images(dataset: LoadedDataset) -> dict[str, tuple[str, dict[str, list[bytes]]]]:
    """Per image feature, the first images of each class of the first split with records (by its first
    class label), from at most its first ``SAMPLE_RECORDS`` records."""
    manifest = dataset.manifest
    images = [n for n, f in manifest.schema.features.items() if isinstance(f, Image)]
    split = next((s.name for s in manifest.splits if s.num_records), None)
    if not images or split is None:
        return {}
    label = next(((n, f) for n, f in manifest.schema.features.items() if isinstance(f, ClassLabel)), None)
    samples: dict[str, dict[str, list[bytes]]] = {name: {} for name in images}
    for example in itertools.islice(iter_split_examples(dataset.directory, manifest, split), SAMPLE_RECORDS):
        shown = label[1].names[int(example[label[0]])] if label else ""
        for name in images:
            add_sample(samples[name], shown, bytes(example[name]))
    return {name: (split, found) for name, found in samples.items() if found}


def collect_from_records(dataset: LoadedDataset) -> DatasetStats:
    """Reads every record of a dataset (one without ``statistics.pb``) once and summarizes it."""
    directory, manifest = dataset.directory, dataset.manifest
    collectors = []
    for split in manifest.splits:
        collector = SplitCollector(manifest, split.name)
        for example in iter_split_examples(directory, manifest, split.name):
            collector.add(example)
        collectors.append(collector)
    passes = [c.stats for c in collectors]
    return DatasetStats(directory, manifest, [c.summary(manifest) for c in collectors],
                        dead_letter_reasons(dataset), first_samples(passes),
                        statistics_list(passes).SerializeToString(deterministic=True), FROM_RECORDS)


def collect(path: str) -> DatasetStats:
    """What the report draws of a dataset (local or on a store; a refresh root means its latest version): from
    its ``statistics.pb``, else from one pass over its records (``DatasetStats.source`` says which)."""
    dataset = open_dataset(path)
    listed, beside = dataset.manifest.statistics, dataset.metadata_dir or dataset.directory  # beside the manifest
    statistics = read_statistics(beside) if listed else None
    if statistics is None or listed is None:
        return collect_from_records(dataset)
    data = storage.read_bytes(storage.join(beside, listed))
    return DatasetStats(dataset.directory, dataset.manifest, [_split(dataset, d) for d in statistics.datasets],
                        dead_letter_reasons(dataset), first_images(dataset), data, FROM_STATISTICS)

"""The report's pass over the records as TFDV's ``DatasetFeatureStatisticsList`` (one dataset per split).

Only for a dataset without ``statistics.pb`` (written before builds wrote it): the report copies that file
otherwise. Built with the light ``tensorflow-metadata`` package (protobuf only), read by TFDV, Facets and TFDS.
"""

from __future__ import annotations

import numpy as np

from beam_tfrecord.report.stats import NumericStats, RecordPass


def _num_stats(feature, numeric: NumericStats) -> None:
    stats = feature.num_stats
    stats.common_stats.num_non_missing = numeric.count
    stats.common_stats.num_missing = numeric.non_finite
    if not numeric.count:
        return
    stats.mean = numeric.mean
    stats.std_dev = numeric.std
    stats.min = numeric.minimum
    stats.max = numeric.maximum
    values = np.asarray(numeric.reservoir.values, dtype=np.float64)
    stats.num_zeros = int((values == 0).sum() * numeric.count / max(len(values), 1))
    counts, edges = np.histogram(values, bins=10)
    histogram = stats.histograms.add()
    scale = numeric.count / max(len(values), 1)  # the reservoir stands for every value
    for count, low, high in zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist()):
        bucket = histogram.buckets.add()
        bucket.low_value, bucket.high_value, bucket.sample_count = low, high, count * scale


def statistics_list(splits: list[RecordPass]):
    """A ``DatasetFeatureStatisticsList`` of the splits' summaries, in the order given."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    out = statistics_pb2.DatasetFeatureStatisticsList()
    for split in splits:
        dataset = out.datasets.add()
        dataset.name = split.name
        dataset.num_examples = split.num_records
        numeric = dict(split.numeric)
        numeric.update({f"{name}/length": s for name, s in split.lengths.items()})
        for name, image in split.images.items():
            numeric.update({f"{name}/width": image.widths, f"{name}/height": image.heights,
                            f"{name}/encoded_bytes": image.encoded_bytes})
        for name, values in sorted(numeric.items()):
            feature = dataset.features.add()
            feature.path.step.append(name)
            feature.type = statistics_pb2.FeatureNameStatistics.FLOAT
            _num_stats(feature, values)
        for name, counter in sorted(split.classes.items()):
            feature = dataset.features.add()
            feature.path.step.append(name)
            feature.type = statistics_pb2.FeatureNameStatistics.STRING
            strings = feature.string_stats
            strings.common_stats.num_non_missing = sum(counter.values())
            strings.unique = len(counter)
            for label, count in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])):
                top = strings.top_values.add()
                top.value, top.frequency = label, count
    return out

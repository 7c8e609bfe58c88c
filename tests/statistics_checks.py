"""What tests of ``statistics.pb`` share: a dataset's build statistics against those computed from its records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tensorflow_metadata.proto.v0 import statistics_pb2

from beam_tfrecord import load_manifest, storage
from beam_tfrecord.formats import shard_format
from beam_tfrecord.statistics import STATISTICS_FILE, check_statistics, read_statistics
from beam_tfrecord.statistics.records import statistics_of_records


def records_of(dataset: str) -> Iterator[tuple[str, bytes]]:
    """(split, record) of every record of a dataset, read back shard by shard."""
    manifest = load_manifest(dataset)
    for shard in manifest.shards:
        with shard_format(manifest.file_format).open_reader(storage.join(dataset, shard.filename), shard,
                                                            compression=manifest.compression) as reader:
            for record, _ in reader.iter_records(0, shard.num_records):
                yield shard.split, bytes(record)


def exact_part(statistics: Any) -> Any:
    """The statistics less what the sketches estimate (histograms, medians), means and deviations rounded."""
    out = statistics_pb2.DatasetFeatureStatisticsList()
    out.CopyFrom(statistics)
    for dataset in out.datasets:
        for feature in dataset.features:
            for stats in (feature.num_stats, feature.string_stats, feature.bytes_stats):
                stats.common_stats.ClearField("num_values_histogram")
            feature.num_stats.ClearField("histograms")
            feature.num_stats.ClearField("median")
            feature.num_stats.mean = round(feature.num_stats.mean, 9)
            feature.num_stats.std_dev = round(feature.num_stats.std_dev, 6)
            feature.bytes_stats.avg_num_bytes = round(feature.bytes_stats.avg_num_bytes, 9)
            custom = [c for c in feature.custom_stats if not c.HasField("histogram")]
            del feature.custom_stats[:]
            feature.custom_stats.extend(custom)
    return out


def assert_statistics_match_records(dataset: str) -> None:
    """The build's ``statistics.pb`` is listed, verifies, and says what the records read back say."""
    manifest = load_manifest(dataset)
    assert manifest.statistics == STATISTICS_FILE
    check_statistics(dataset, manifest)
    built = read_statistics(dataset)
    assert exact_part(built) == exact_part(statistics_of_records(manifest.schema, records_of(dataset)))

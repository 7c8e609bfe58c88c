"""A dataset's statistics for a drift check: its ``statistics.pb``, else computed from its records.

The second pass is for versions written before builds wrote ``statistics.pb`` (issue 50): the same
accumulators as the build's (``statistics.records``), so an old version and a new one are measured alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from beam_tfrecord.dataset import LoadedDataset, open_dataset
from beam_tfrecord.formats import shard_format
from beam_tfrecord.statistics import read_statistics
from beam_tfrecord.statistics.records import statistics_of_records


def _records(dataset: LoadedDataset) -> Iterator[tuple[str, bytes]]:
    """Every live ``(split, serialized record)`` of the dataset, shard after shard (wherever each is stored; the
    records a deletion vector names left out)."""
    manifest, file_format = dataset.manifest, shard_format(dataset.manifest.file_format)
    for shard in manifest.shards:
        with file_format.open_reader(dataset.shard_path(shard), shard, compression=manifest.compression) as reader:
            for start, length in shard.live_runs():
                for record, _ in reader.iter_records(start, start + length):
                    yield shard.split, bytes(record)


def statistics_of(dataset_dir: str) -> Any:
    """The ``DatasetFeatureStatisticsList`` of a dataset (a directory, or a versioned root: its LATEST).

    Raises:
        DatasetNotFoundError: no manifest there.
        StatisticsFileError: a ``statistics.pb`` that does not parse.
    """
    dataset = open_dataset(dataset_dir)
    found = read_statistics(dataset.metadata_dir or dataset.directory)  # beside the manifest
    return found if found is not None else statistics_of_records(dataset.manifest.schema, _records(dataset))

"""A dataset's statistics for a drift check: its ``statistics.pb``, else computed from its records.

The second pass is for versions written before builds wrote ``statistics.pb`` (issue 50), or whose file does not
measure every feature (features added later as column files, read joined): the same
accumulators as the build's (``statistics.records``), so an old version and a new one are measured alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import LoadedDataset, open_dataset
from beam_tfrecord.formats.joined import open_listed
from beam_tfrecord.statistics import read_statistics
from beam_tfrecord.statistics.records import statistics_of_records


def _records(dataset: LoadedDataset) -> Iterator[tuple[str, bytes]]:
    """Every live ``(split, serialized record)`` of the dataset, shard after shard (wherever each is stored; the
    records a deletion vector names left out)."""
    for shard in dataset.manifest.shards:
        with open_listed(dataset, shard) as reader:  # its column files joined, names as the schema's
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
    if found is not None and _covers(found, dataset.manifest):
        return found
    return statistics_of_records(dataset.manifest.schema, _records(dataset))


def _covers(statistics: Any, manifest: Manifest) -> bool:
    """Whether a statistics file measures every feature a version added as column files or renamed after the file
    was written (a file that leaves out a feature of the build's own is taken as it is)."""
    measured = {"/".join(feature.path.step) if feature.path.step else feature.name
                for dataset in statistics.datasets for feature in dataset.features}
    added = manifest.column_features()
    later = {name for name in manifest.schema.features if manifest.physical_name(name) in added}
    return (later | set(manifest.physical_names)) <= measured

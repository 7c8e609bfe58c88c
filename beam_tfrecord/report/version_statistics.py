"""A dataset's statistics for a drift check: its ``statistics.pb``, else computed from its records.

The second pass is for versions written before builds wrote ``statistics.pb`` (issue 50).
"""

from __future__ import annotations

from typing import Any

from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.report.stats import collect
from beam_tfrecord.report.tfdv import statistics_list
from beam_tfrecord.statistics.drift import read_statistics


def statistics_of(dataset_dir: str) -> Any:
    """The ``DatasetFeatureStatisticsList`` of a dataset (a directory, or a versioned root: its LATEST).

    Raises:
        DatasetNotFoundError: no manifest there.
        StatisticsFileError: a ``statistics.pb`` that does not parse.
    """
    directory = open_dataset(dataset_dir).directory
    found = read_statistics(directory)
    return found if found is not None else statistics_list(collect(directory))

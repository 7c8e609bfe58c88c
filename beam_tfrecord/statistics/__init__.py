"""What a dataset's records hold: ``statistics.pb`` (TFMD's ``DatasetFeatureStatisticsList``), written by
every build, and drift between two versions (``drift``, ``measures``, ``thresholds``).

Computed while the shards are written (``accumulator``, ``sketches``: bounded memory, merged per split), as TFDV
fills them (``tfmd``); ``records`` computes the same from records. See docs/manifest.md, "statistics.pb".
"""

from __future__ import annotations

from typing import Any

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.errors import StatisticsFileError

STATISTICS_FILE = "statistics.pb"
# A version that keeps shards of its base has no statistics.pb: the records it wrote have theirs in this file (what
# a refresh's drift check compares), and a reader computes the version's from its live records.
APPENDED_STATISTICS_FILE = "appended_statistics.pb"


def read_statistics(dataset_dir: str, filename: str = STATISTICS_FILE) -> Any:
    """The ``DatasetFeatureStatisticsList`` in ``dataset_dir``'s ``statistics.pb`` (or ``filename``), or None when
    it has none (a dataset written before builds wrote it, or with ``statistics=False``).

    Raises:
        StatisticsFileError: the file does not parse.
    """
    from google.protobuf.message import DecodeError
    from tensorflow_metadata.proto.v0 import statistics_pb2

    path = storage.join(dataset_dir, filename)
    data = storage.read_bytes_or_none(path)
    if data is None:
        return None
    try:
        return statistics_pb2.DatasetFeatureStatisticsList.FromString(data)
    except DecodeError as err:
        raise StatisticsFileError(path, f"not a serialized DatasetFeatureStatisticsList ({err})") from err


def check_statistics(dataset_dir: str, manifest: Manifest) -> None:
    """Checks the statistics file ``manifest`` lists (if any): on storage, a statistics list, one dataset per
    split with the manifest's record count.

    Raises:
        StatisticsFileError: naming the file and what is wrong with it.
    """
    from google.protobuf.message import DecodeError
    from tensorflow_metadata.proto.v0 import statistics_pb2

    if manifest.statistics is None:
        return
    path = storage.join(dataset_dir, manifest.statistics)
    data = storage.read_bytes_or_none(path)
    if data is None:
        raise StatisticsFileError(path, "listed in the manifest but missing from storage")
    try:
        statistics = statistics_pb2.DatasetFeatureStatisticsList.FromString(data)
    except DecodeError as err:
        raise StatisticsFileError(path, f"not a serialized DatasetFeatureStatisticsList ({err})") from err
    found = [(d.name, d.num_examples) for d in statistics.datasets]
    expected = [(s.name, s.num_records) for s in manifest.splits]
    if found != expected:
        raise StatisticsFileError(path, f"(split, records) {found}, the manifest says {expected}")

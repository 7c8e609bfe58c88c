"""Feature statistics of a dataset: ``statistics.pb`` (TFMD's ``DatasetFeatureStatisticsList``), written by every build.

Computed while the shards are written (``accumulator``, ``sketches``: bounded memory, merged per split), as TFDV
fills them (``tfmd``); ``records`` computes the same from records. See docs/manifest.md, "statistics.pb".
"""

from __future__ import annotations

from typing import Any

from beam_tfrecord import storage

STATISTICS_FILE = "statistics.pb"


def read_statistics(dataset_dir: str) -> Any:
    """The ``DatasetFeatureStatisticsList`` in ``dataset_dir``'s ``statistics.pb``, or None when it has none
    (a dataset written before builds wrote it, or with ``statistics=False``).

    Raises:
        google.protobuf.message.DecodeError: when the file is not a serialized statistics list.
    """
    from tensorflow_metadata.proto.v0 import statistics_pb2

    path = storage.join(dataset_dir, STATISTICS_FILE)
    if not storage.exists(path):
        return None
    return statistics_pb2.DatasetFeatureStatisticsList.FromString(storage.read_bytes(path))

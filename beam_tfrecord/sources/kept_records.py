"""The records an incremental refresh keeps from its base version, read back as a Beam source."""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam

from beam_tfrecord.versions.incremental import ShardReuse, read_kept_records


class ReadKeptRecords(beam.PTransform):
    """PBegin -> lists of ``PrebuiltRecord``: the kept records of the base shards, a shard per task."""

    def __init__(self, shards: Sequence[ShardReuse]) -> None:
        super().__init__()
        self._shards = tuple(shards)

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pipeline
            | "BaseShards" >> beam.Create(self._shards)  # ShardReuse: a base shard and the keys of its records
            | "Spread" >> beam.Reshuffle()
            | "ReadKept" >> beam.FlatMap(read_kept_records)  # [PrebuiltRecord, ...] per chunk
        )

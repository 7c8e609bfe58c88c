"""What an incremental refresh reads: the records it keeps from its base version, and the fresh inputs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

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


def _fresh_only(chunk: list[Any], keys: frozenset[str]) -> list[Any]:
    return [item for item in chunk if item.key in keys]


class ReadFreshInputs(beam.PTransform):
    """PBegin -> lists of samples (or dead letters): what an incremental refresh encodes again.

    Each of ``parts`` (a file, or a range of one) is read with ``read`` into chunks, as a full build
    reads it, and only the samples whose key is in ``keys`` are kept (a changed row of a manifest,
    every row of a new or changed file).
    """

    def __init__(self, parts: Sequence[Any], read: Callable[[Any], Iterable[list[Any]]],
                 keys: Iterable[str]) -> None:
        super().__init__()
        self._parts = tuple(parts)
        self._read = read
        self._keys = frozenset(keys)

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pipeline
            | "FreshParts" >> beam.Create(self._parts)  # a part of the inputs holding a fresh sample
            | "SpreadParts" >> beam.Reshuffle()
            | "ReadParts" >> beam.FlatMap(self._read)  # [Sample | DeadLetter] chunks, as a full build reads them
            | "FreshOnly" >> beam.Map(_fresh_only, self._keys)
            | "NotEmpty" >> beam.Filter(bool)
            | "SpreadFresh" >> beam.Reshuffle()
        )

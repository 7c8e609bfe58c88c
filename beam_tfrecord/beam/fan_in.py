"""How a shard's records come together (``FanIn``): the choice by runner, and the summary's line on it."""

from __future__ import annotations

import enum

import apache_beam as beam

from beam_tfrecord.beam.runners.table import traits_of
from beam_tfrecord.errors import WriterOptionError


class FanIn(enum.Enum):
    """How a shard's records come together.

    SPILL: workers spill hash-sorted runs to storage (the dataset's temp folder, which every
        worker reaches, as it must for the shards); each shard writer merges its slice of every
        run. No payload byte goes through the runner's shuffle, so memory stays bounded by the run
        size on any runner: for runners whose shuffle holds data in memory (the DirectRunner,
        Prism, the portable runner's embedded job service, Dask).
    SHUFFLE: records keyed by shard go through the runner's disk-backed shuffle (Dataflow Shuffle,
        Flink's and Spark's sort-based shuffles); a shard writer reads one group.
    AUTO: SPILL on runners whose shuffle is in memory (``RunnerTraits.in_memory_shuffle``),
        SHUFFLE on every other.
    """

    AUTO = "auto"
    SPILL = "spill"
    SHUFFLE = "shuffle"

    @classmethod
    def parse(cls, text: str) -> "FanIn":
        try:
            return cls(text.strip().lower())
        except ValueError as err:
            raise WriterOptionError(f"fan_in must be one of {[m.value for m in cls]}, got {text!r}") from err


def resolve_fan_in(fan_in: FanIn, pipeline: beam.Pipeline) -> FanIn:
    """The fan-in path for ``pipeline``'s runner (``fan_in`` unless it is AUTO)."""
    if fan_in is not FanIn.AUTO:
        return fan_in
    return FanIn.SPILL if traits_of(pipeline).in_memory_shuffle else FanIn.SHUFFLE


def describe_fan_in(fan_in: FanIn, pipeline: beam.Pipeline, temp_dir: str) -> str:
    """The job summary's line: the fan-in path ``pipeline`` takes, why, and where its files go."""
    chosen = resolve_fan_in(fan_in, pipeline)
    runner = type(pipeline.runner).__name__.replace("LocalBatchRunner", "DirectRunner")  # its batch engine
    why = (f"auto: the {runner}'s "
           + ("shuffle holds what it groups in memory" if chosen is FanIn.SPILL else "shuffle is disk-backed")
           if fan_in is FanIn.AUTO else "asked for")
    where = ("sorted runs spilled to the temp folder, merged by the shard writers" if chosen is FanIn.SPILL
             else "records keyed by shard through the runner's shuffle")
    return f"  fan-in: {chosen.value} ({why}); {where} (temp folder {temp_dir}, deleted once published)"

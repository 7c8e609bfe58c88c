"""How a shard's records come together: the ``FanIn`` (``beam.tuning``) chosen by runner, the summary's
line on it, and what both paths (``spill_path``, ``shuffle_path``) take and give."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam.tuning import FanIn, WriterTuning
from beam_tfrecord.beam.write_options import WriterChecks
from beam_tfrecord.core.description import DatasetDescription
from beam_tfrecord.core.side_files import SideFiles
from beam_tfrecord.encoding.records import FeatureTransform, RecordRebuilder
from beam_tfrecord.engine.table import runner_name, traits_of
from beam_tfrecord.quality.digest_files import DigestBuffer
from beam_tfrecord.quality.near_signatures import SignatureBuffer
from beam_tfrecord.quality.split_groups import GroupPlacement


def resolve_fan_in(fan_in: FanIn, pipeline: beam.Pipeline) -> FanIn:
    """The fan-in path for ``pipeline``'s runner (``fan_in`` unless it is AUTO)."""
    if fan_in is not FanIn.AUTO:
        return fan_in
    return FanIn.SPILL if traits_of(pipeline).in_memory_shuffle else FanIn.SHUFFLE


def describe_fan_in(fan_in: FanIn, pipeline: beam.Pipeline, temp_dir: str) -> str:
    """The job summary's line: the fan-in path ``pipeline`` takes, why, and where its files go."""
    chosen = resolve_fan_in(fan_in, pipeline)
    why = (f"auto: the {runner_name(pipeline)}'s "
           + ("shuffle holds what it groups in memory" if chosen is FanIn.SPILL else "shuffle is disk-backed")
           if fan_in is FanIn.AUTO else "asked for")
    where = ("sorted runs spilled to the temp folder, merged by the shard writers" if chosen is FanIn.SPILL
             else "records keyed by shard through the runner's shuffle")
    return f"  fan-in: {chosen.value} ({why}); {where} (temp folder {temp_dir}, deleted once published)"


class Encoding(Protocol):
    """The encode stage for inputs other than ``Sample``s (``WriteBalancedTFRecord``'s serialized records).

    Its DoFns emit what the sample encoders emit (spill path: ``SpilledRun`` and ``DeadLetter``;
    shuffle path: ``EncodedBatch``), and ``RecordsSummary`` values from which the plan step infers
    the published schema (the spill path's DoFn emits them among its runs; ``summarize_batches``
    merges the shuffle path's into one).
    """

    def to_runs_fn(self, *, runs_dir: str, run_bytes: int, direct_io: bool, salt: str,
                   max_record_bytes: int, side_files: tuple[SideFiles, ...] = ()) -> beam.DoFn: ...

    def to_batches_fn(self, *, salt: str, max_record_bytes: int, side_files: tuple[SideFiles, ...] = ()
                      ) -> beam.DoFn: ...

    def summarize_batches(self) -> beam.PTransform:
        """The shuffle path's batches -> their merged ``RecordsSummary`` (none for no record)."""


@dataclasses.dataclass(frozen=True)
class FanInSettings:
    """What either fan-in path is built from: the writer's checked options.

    Attributes:
        description: the dataset written (``DatasetDescription``).
        tuning: how the write runs (``WriterTuning``; its ``temp_dir`` is resolved in ``temp_dir``).
        temp_dir: the build's temp folder (runs in ``runs/``, unpublished shards in ``shards/``).
        feature_transforms: per-feature functions applied before validation.
        encoding: the encode stage for inputs other than ``Sample``s; None encodes samples with the schema.
        checks: what the encoders prepare side files for (exact and near duplicates) and how records are
            placed by group (``quality.split_groups``).
    """

    description: DatasetDescription
    tuning: WriterTuning
    temp_dir: str
    feature_transforms: Mapping[str, FeatureTransform] = dataclasses.field(default_factory=dict)
    encoding: Encoding | None = None
    checks: WriterChecks = dataclasses.field(default_factory=WriterChecks)

    def encode_options(self) -> dict[str, Any]:
        """Keyword arguments of both sample encoders (``encode_fn.EncodeSamplesFn``)."""
        description, near = self.description, self.checks.near_duplicates
        return dict(salt=description.salt, max_record_bytes=description.sharding.cap,
                    feature_transforms=self.feature_transforms, reread_min_bytes=self.tuning.reread_min_bytes,
                    progress_dir=self.tuning.progress_dir, side_files=self.side_files(),
                    placement=None if self.checks.split_key_fn is None else GroupPlacement(
                        self.checks.split_key_fn, salt=description.salt,
                        split_starts=[lo for _, lo, _ in description.splits.ratio_bounds()]),
                    sign=None if near is None else near.feature)

    def side_files(self) -> tuple[SideFiles, ...]:
        """What the encoders write beside the records, for the checks asked for (``core.side_files``): image
        signatures (near duplicates), content digests (exact duplicates)."""
        near, duplicates = self.checks.near_duplicates, self.checks.duplicates_check
        rebuild = None if self.encoding is not None else RecordRebuilder(self.description.schema,
                                                                         self.feature_transforms)
        return ((*(() if near is None else (SignatureBuffer(storage.join(self.temp_dir, "signatures")),)),
                *(() if duplicates is None else (DigestBuffer(duplicates, storage.join(self.temp_dir, "digests"),
                                                              rebuild=rebuild),))))

    def shard_options(self) -> dict[str, Any]:
        """Keyword arguments of both shard writers (``shards.WriteShardFn``), after schema, compression, transforms."""
        description = self.description
        return dict(dataset_name=description.name, shards_dir=storage.join(self.temp_dir, "shards"),
                    direct_io=self.tuning.direct_io, file_format=description.file_format,
                    progress_dir=self.tuning.progress_dir, dali_index=description.dali_index,
                    statistics=description.statistics,
                    inferred_statistics=description.statistics and self.encoding is not None)


class FanInOutputs(NamedTuple):
    """What a fan-in path gives publication: PCollections of the plan (at most one ``DatasetPlan``), the
    written shards' ``ShardInfo``s, the ``DeadLetter``s, and, when ``encoding`` infers the schema, its
    ``RecordsSummary`` (None otherwise)."""

    plan: beam.PCollection
    shard_infos: beam.PCollection
    dead_letters: beam.PCollection
    summary: beam.PCollection | None
    digest_files: beam.PCollection | None = None  # ``DigestFile``s, when duplicates are checked
    duplicate_groups: beam.PCollection | None = None  # ``DuplicateGroups``, found already (``duplicates=drop``)
    signature_files: beam.PCollection | None = None  # ``SignatureFile``s, when near duplicates are searched

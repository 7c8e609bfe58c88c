"""How a shard's records come together: the ``FanIn`` (``beam.tuning``) chosen by runner, the summary's
line on it, and what both paths (``spill_path``, ``shuffle_path``) take and give."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.beam.duplicates import DigestSettings
from beam_tfrecord.beam.near_duplicates import SignatureSettings
from beam_tfrecord.beam.tuning import FanIn
from beam_tfrecord.core.naming import Compression, FileFormat
from beam_tfrecord.core.pieces import ShardWriters
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import ShardingConfig, SplitConfig
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.engine.table import runner_name, traits_of
from beam_tfrecord.quality.content import DuplicatesCheck
from beam_tfrecord.quality.split_groups import GroupPlacement, SplitKeyFn


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
                   max_record_bytes: int, duplicates: DigestSettings | None = None) -> beam.DoFn: ...

    def to_batches_fn(self, *, salt: str, max_record_bytes: int, duplicates: DigestSettings | None = None
                      ) -> beam.DoFn: ...

    def summarize_batches(self) -> beam.PTransform:
        """The shuffle path's batches -> their merged ``RecordsSummary`` (none for no record)."""


@dataclasses.dataclass(frozen=True)
class FanInSettings:
    """What either fan-in path is built from: the writer's checked options.

    Attributes:
        encoding: the encode stage for inputs other than ``Sample``s; None encodes samples with ``schema``.
        temp_dir: the build's temp folder (runs in ``runs/``, unpublished shards in ``shards/``).
        The others: as ``WriteTFRecordDataset`` documents them.
    """

    schema: Schema
    splits: SplitConfig
    sharding: ShardingConfig
    dataset_name: str
    compression: Compression
    file_format: FileFormat
    salt: str
    feature_transforms: Mapping[str, FeatureTransform]
    reread_min_bytes: int
    direct_io: bool
    temp_dir: str
    progress_dir: str | None
    encoding: Encoding | None
    dali_index: bool = False
    # The spill fan-in cuts shards into pieces to keep this many writers busy (``beam.shard_pieces``).
    shard_writers: ShardWriters = dataclasses.field(default_factory=ShardWriters)
    duplicates: DuplicatesCheck | None = None  # exact duplicates: encoders write digests (``beam.duplicates``)
    split_key_fn: SplitKeyFn | None = None  # records placed by group (``quality.split_groups``)
    statistics: bool = False  # shard writers leave their records' statistics (``beam.shard_statistics``)
    near_feature: str | None = None  # near duplicates: encoders sign this feature's images (``beam.near_duplicates``)

    def encode_options(self) -> dict[str, Any]:
        """Keyword arguments of both sample encoders (``encode_fn.EncodeSamplesFn``)."""
        return dict(salt=self.salt, max_record_bytes=self.sharding.cap, feature_transforms=self.feature_transforms,
                    reread_min_bytes=self.reread_min_bytes, progress_dir=self.progress_dir,
                    duplicates=self.digest_settings(),
                    placement=None if self.split_key_fn is None else GroupPlacement(
                        self.split_key_fn, salt=self.salt,
                        split_starts=[lo for _, lo, _ in self.splits.ratio_bounds()]),
                    near=None if self.near_feature is None else SignatureSettings(
                        self.near_feature, storage.join(self.temp_dir, "signatures")))

    def digest_settings(self) -> DigestSettings | None:
        """Where and how encoders write digests (None: duplicates are not checked)."""
        return None if self.duplicates is None else DigestSettings(self.duplicates,
                                                                   storage.join(self.temp_dir, "digests"))

    def shard_options(self) -> dict[str, Any]:
        """Keyword arguments of both shard writers (``shards.WriteShardFn``), after schema, compression, transforms."""
        return dict(dataset_name=self.dataset_name, shards_dir=storage.join(self.temp_dir, "shards"),
                    direct_io=self.direct_io, file_format=self.file_format, progress_dir=self.progress_dir,
                    dali_index=self.dali_index, statistics=self.statistics,
                    inferred_statistics=self.statistics and self.encoding is not None)


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

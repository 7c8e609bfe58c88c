"""The shuffle fan-in (``FanIn.SHUFFLE``), whole: samples -> encoded batches -> a plan -> shards from the shuffle.

Its shards are byte-identical to the spill path's. See docs/performance.md, "How a dataset is written".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np

from beam_tfrecord.beam.dropped import batch_without, dropped_hashes
from beam_tfrecord.beam.duplicates import FindDuplicates
from beam_tfrecord.beam.encode_fn import EncodeSamplesFn
from beam_tfrecord.beam.fan_in import FanInOutputs, FanInSettings
from beam_tfrecord.beam.plan_dataset import PlanDataset
from beam_tfrecord.beam.shards import WriteShardFn
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.runs import HASH_BYTES
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.sharding import DatasetPlan, ShardSpec
from beam_tfrecord.core.summary import BucketGrid
from beam_tfrecord.encoding.entries import EncodedBatch
from beam_tfrecord.engine import traits_of
from beam_tfrecord.errors import PipelineInvariantError
from beam_tfrecord.quality.digest_files import DigestFile
from beam_tfrecord.quality.near_signatures import SignatureFile


class EncodeToBatchesFn(EncodeSamplesFn):
    """Shuffle path: one ``EncodedBatch`` (entries and dead letters) per input element.

    Stateless between elements and without side effects, so a runner may run it again (a retried
    bundle, a lost worker, a recomputed side input) and get the same batch.
    """

    def process(self, element: Sample | DeadLetter | list[Sample | DeadLetter]) -> Iterator[EncodedBatch]:
        entries, dead = self._encode_element(element)
        yield EncodedBatch(tuple(entries), tuple(dead), tuple(self._announced()))

    def finish_bundle(self) -> None:
        self._finish_side_files()
        self._flush_progress()


def batch_index(batch: EncodedBatch) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 hashes, int64 framed sizes) of a batch's entries: what ``PlanDataset`` plans from."""
    return batch.index()


def _dead_letters_of(batch: EncodedBatch) -> tuple[DeadLetter, ...]:
    return batch.dead_letters


def _digest_files_of(batch: EncodedBatch) -> list[DigestFile]:
    return [file for file in batch.digest_files if type(file) is DigestFile]


def _signature_files_of(batch: EncodedBatch) -> list[SignatureFile]:
    return [file for file in batch.digest_files if type(file) is SignatureFile]


def _entry_hashes(entries: Sequence[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(e[:HASH_BYTES] for e in entries), dtype=">u8").astype(np.uint64)


def key_by_shard(batch: EncodedBatch, plan: DatasetPlan | None) -> Iterator[tuple[int, bytes]]:
    """(shard number in ``plan.shards``, entry) for each entry of a batch (the plan as a side input)."""
    if not batch.entries:
        return
    if plan is None:
        raise PipelineInvariantError("plan", "records were encoded but no plan was made")
    yield from zip(plan.shard_numbers(_entry_hashes(batch.entries)).tolist(), batch.entries)


def entries_by_bucket(batch: EncodedBatch, grid: BucketGrid) -> Iterator[tuple[int, bytes]]:
    """(bucket, entry) for each entry of a batch: the payload's side of the join with the plan."""
    if batch.entries:
        yield from zip(grid.bucket_of(_entry_hashes(batch.entries)).tolist(), batch.entries)


def shards_by_bucket(plan: DatasetPlan, grid: BucketGrid) -> Iterator[tuple[int, BucketShards]]:
    """(bucket, the shards that start in or cover it) for every bucket: the plan's side of the join."""
    starts = plan.shard_starts
    if not len(starts):
        return
    firsts = np.maximum(np.searchsorted(starts, grid.starts, side="right") - 1, 0)
    lasts = np.append(np.searchsorted(starts, grid.starts[1:], side="left"), len(starts))
    for bucket, (first, last) in enumerate(zip(firsts.tolist(), np.maximum(lasts, firsts + 1).tolist())):
        yield bucket, BucketShards(starts[first:last], first)


@dataclasses.dataclass(frozen=True)
class BucketShards:
    """The shards a bucket's records can belong to: their hash starts, from shard number ``first``."""

    starts: np.ndarray
    first: int


def key_joined_by_shard(group: tuple[int, Iterable[bytes | BucketShards]]) -> Iterator[tuple[int, bytes]]:
    """(shard number, entry) for each entry of a bucket's joined group."""
    bucket, values = group
    shards, entries = None, []
    for value in values:
        if isinstance(value, BucketShards):
            shards = value
        else:
            entries.append(value)
    if not entries:
        return
    if shards is None:
        raise PipelineInvariantError("plan", f"records in hash bucket {bucket} but no planned shard covers it")
    numbers = shards.first + np.searchsorted(shards.starts, _entry_hashes(entries), side="right") - 1
    yield from zip(numbers.tolist(), entries)


def specs_by_number(plan: DatasetPlan) -> Iterator[tuple[int, ShardSpec]]:
    """(shard number, spec): joined with the shard's entries, so its writer needs no side input."""
    return enumerate(plan.shards)


class WriteShardFromGroupFn(WriteShardFn):
    """Shuffle path: ``(shard number, [ShardSpec, entry...])`` from the runner's GroupByKey in, its
    ``ShardInfo`` out.

    The entries are sorted here (bytes order is (hash, content) order, as the spill path's merge
    gives), so a worker holds one shard's entries at a time: at most ``max_shard_bytes`` of them.
    """

    def process(self, group: tuple[int, Iterable[bytes | ShardSpec]]) -> Iterator[ShardInfo]:
        number, values = group
        specs: list[ShardSpec] = []
        entries: list[bytes] = []
        for value in values:
            if isinstance(value, ShardSpec):
                specs.append(value)
            else:
                entries.append(value)
        if len(specs) != 1:
            raise PipelineInvariantError(f"shard {number}", f"expected its one planned spec, got {len(specs)}")
        entries.sort()
        yield self._write(specs[0], entries)


class ShufflePath(beam.PTransform):
    """Samples (or an ``Encoding``'s inputs) -> ``FanInOutputs``, through the runner's shuffle.

    Args:
        settings: the writer's options.
    """

    def __init__(self, settings: FanInSettings) -> None:
        super().__init__()
        self._settings = settings

    def _encode_to_batches_fn(self) -> beam.DoFn:
        settings = self._settings
        if settings.encoding is not None:
            return settings.encoding.to_batches_fn(salt=settings.description.salt,
                                                   max_record_bytes=settings.description.sharding.cap,
                                                   side_files=settings.side_files())
        return EncodeToBatchesFn(settings.description.schema, **settings.encode_options())

    def expand(self, samples: beam.PCollection) -> FanInOutputs:
        settings = self._settings
        batches = samples | "Encode" >> beam.ParDo(self._encode_to_batches_fn())
        # EncodedBatch: the entries and dead letters of one input element.
        dead_letters = batches | "DeadLetters" >> beam.FlatMap(_dead_letters_of)
        digest_files = groups = None
        if settings.checks.duplicates_check is not None:
            digest_files = batches | "DigestFiles" >> beam.FlatMap(_digest_files_of)
        if settings.checks.drops_duplicates:
            groups = digest_files | "FindDuplicates" >> FindDuplicates()
            dropped = groups | "AllGroups" >> beam.combiners.ToList() | "Dropped" >> beam.Map(dropped_hashes)
            batches = batches | "DropDuplicates" >> beam.Map(batch_without, beam.pvalue.AsSingleton(dropped))
            digest_files = None
        # where side inputs are recomputed per task, the plan meets the entries in a GroupByKey by hash bucket
        side_inputs = not traits_of(samples.pipeline).recomputes_side_inputs
        plan = batches | "Plan" >> PlanDataset(settings.description.splits, settings.description.sharding,
                                               index_of=batch_index, side_inputs=side_inputs)
        if side_inputs:
            keyed = batches | "KeyByShard" >> beam.FlatMap(key_by_shard,
                                                           beam.pvalue.AsSingleton(plan, default_value=None))
        else:  # the plan meets the entries in a GroupByKey by hash bucket (a second shuffle of the payload)
            grid = settings.description.splits.bucket_grid()
            keyed = (
                (batches | "EntriesByBucket" >> beam.FlatMap(entries_by_bucket, grid),
                 plan | "ShardsByBucket" >> beam.FlatMap(shards_by_bucket, grid))
                | "GatherBuckets" >> beam.Flatten()
                | "ByBucket" >> beam.GroupByKey()  # (bucket, [BucketShards, entry...])
                | "KeyByShard" >> beam.FlatMap(key_joined_by_shard)
            )
        shard_infos = (
            (keyed, plan | "SpecsByNumber" >> beam.FlatMap(specs_by_number))
            | "GatherShards" >> beam.Flatten()
            | "ByShard" >> beam.GroupByKey()  # (shard number, [ShardSpec, entry...]): the runner moves the payload
            | "WriteShards" >> beam.ParDo(WriteShardFromGroupFn(settings.description.schema,
                                                                  settings.description.compression,
                                                                  settings.feature_transforms,
                                                                  **settings.shard_options()))
        )
        summary = (batches | "SummarizeRecords" >> settings.encoding.summarize_batches()  # one RecordsSummary
                   if settings.encoding is not None else None)
        signature_files = (batches | "SignatureFiles" >> beam.FlatMap(_signature_files_of)
                           if settings.checks.near_duplicates is not None else None)
        return FanInOutputs(plan, shard_infos, dead_letters, summary, digest_files, groups, signature_files)

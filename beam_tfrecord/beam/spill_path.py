"""The spill fan-in (``FanIn.SPILL``), whole: samples -> spilled runs -> one plan -> shards merged from the runs.

No payload byte goes through the runner's shuffle. See docs/performance.md, "How a dataset is written".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from beam_tfrecord import storage
from beam_tfrecord.beam import METRICS_NAMESPACE
from beam_tfrecord.beam.dropped import check_removed, dropped_hashes, entries_without, index_without, write_dropped
from beam_tfrecord.beam.duplicates import FindDuplicatesAmong
from beam_tfrecord.beam.encode_fn import EncodeSamplesFn
from beam_tfrecord.beam.encode_pool import EncodeInPoolFn
from beam_tfrecord.beam.fan_in import FanInOutputs, FanInSettings
from beam_tfrecord.beam.one_group import (
    DEAD,
    DIGESTS,
    DUPLICATES,
    RUN,
    SIGNATURES,
    START,
    SUMMARY,
    TaggedStart,
    by_kind,
    tag,
)
from beam_tfrecord.beam.plan_dataset import plan_in_one_step
from beam_tfrecord.beam.shard_pieces import JoinPiecesFn, WrittenPiece, plan_pieces
from beam_tfrecord.beam.shards import WriteShardFn
from beam_tfrecord.core.hashing import key_digests
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.pieces import PieceSpec
from beam_tfrecord.core.record_schema import RecordsSummary, merge_summaries
from beam_tfrecord.core.runs import SpilledRun
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.core.sharding import DatasetPlan, ShardSpec
from beam_tfrecord.core.side_files import SideFiles
from beam_tfrecord.encoding.records import FeatureTransform
from beam_tfrecord.engine import traits_of
from beam_tfrecord.errors import PipelineInvariantError, WriterOptionError
from beam_tfrecord.quality.digest_files import DigestFile
from beam_tfrecord.quality.near_signatures import SignatureFile
from beam_tfrecord.quality.split_groups import GroupPlacement
from beam_tfrecord.spill.resume import finished_shard, read_reused_hashes, skipped, write_resume_file
from beam_tfrecord.spill.run_files import RunWriting, read_catalog, read_run_index, shard_entries, write_catalog

_KIND_OF_ENCODED = {SpilledRun: RUN, DeadLetter: DEAD, RecordsSummary: SUMMARY, DigestFile: DIGESTS,
                    SignatureFile: SIGNATURES}


@dataclasses.dataclass(frozen=True)
class RunsResume:
    """What makes a spill build resumable, and what it resumes (``beam_tfrecord.spill.resume``).

    Attributes:
        temp_dir: the build's temp folder, where ``resume.json`` goes before any run.
        fingerprint: that file's text.
        reused_hashes_path: the key hashes of the samples a killed build's runs hold (skipped), if resuming.
    """

    temp_dir: str
    fingerprint: str
    reused_hashes_path: str | None = None


class EncodeToRunsFn(EncodeSamplesFn):
    """Spill path: spills entries into hash-sorted runs of bounded size (``beam_tfrecord.spill.run_files``).

    Input: a ``Sample`` or a list of them (chunks keep per-element overhead low for small rows).
    Output: one ``SpilledRun`` per run, emitted when the run starts (its files are on storage once
    the bundle has finished: nothing is emitted from ``finish_bundle``, which the Dask runner
    drops), and a ``DeadLetter`` per rejected sample. Memory: up to two runs per worker.
    Given ``resume``, it writes the build's ``resume.json`` in ``setup`` (before any run) and skips
    the samples a resumed build's runs already hold.
    """

    def __init__(self, schema: Schema, *, runs_dir: str, salt: str, max_record_bytes: int,
                 run_bytes: int, feature_transforms: Mapping[str, FeatureTransform], reread_min_bytes: int,
                 direct_io: bool, progress_dir: str | None = None, resume: RunsResume | None = None,
                 side_files: tuple[SideFiles, ...] = (), placement: GroupPlacement | None = None,
                 sign: str | None = None) -> None:
        self._run_writing = RunWriting(runs_dir, run_bytes=run_bytes, direct=direct_io)  # the last side file
        super().__init__(schema, salt=salt, max_record_bytes=max_record_bytes, feature_transforms=feature_transforms,
                         reread_min_bytes=reread_min_bytes, progress_dir=progress_dir,
                         side_files=(*side_files, self._run_writing), placement=placement, sign=sign)
        self._runs = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "spill_runs")
        self._resume = resume
        self._reused_counter = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "samples_reused")

    def setup(self) -> None:
        super().setup()
        self._reused = np.zeros(0, np.uint64)
        if self._resume is not None:
            write_resume_file(self._resume.temp_dir, self._resume.fingerprint)  # once per build: the first worker
            if self._resume.reused_hashes_path:
                self._reused = read_reused_hashes(self._resume.reused_hashes_path)

    def _encode_element(self, element: Sample | DeadLetter | list[Sample | DeadLetter]
                        ) -> tuple[list[bytes], list[DeadLetter]]:
        if len(self._reused):
            element = self._not_reused(element)
        return super()._encode_element(element)

    def _not_reused(self, element: Sample | DeadLetter | list[Sample | DeadLetter]
                    ) -> Sample | DeadLetter | list[Sample | DeadLetter]:
        """The element, less the samples whose records a reused run holds (dead letters kept: no run holds them)."""
        items = element if isinstance(element, list) else [element]
        samples = [i for i, item in enumerate(items) if type(item) is not DeadLetter]
        digests = key_digests([items[i].key for i in samples], self._salt)
        held = skipped(np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64), self._reused)
        self._reused_counter.inc(int(held.sum()))
        if self._progress is not None:  # the progress line counts samples done: a reused one is
            self._progress.add(encoded=int(held.sum()), rejected=0)
        if not held.any():
            return element
        drop = {samples[i] for i in np.flatnonzero(held).tolist()}
        return [item for i, item in enumerate(items) if i not in drop]

    def teardown(self) -> None:
        self._run_writing.stop()

    def process(self, element: Sample | DeadLetter | list[Sample | DeadLetter]
                ) -> Iterator[SpilledRun | DeadLetter | DigestFile | SignatureFile]:
        _, dead = self._encode_element(element)
        yield from dead
        announced = self._announced()
        runs = sum(type(started) is SpilledRun for started in announced)
        if runs:
            self._runs.inc(runs)  # metrics are per thread: counted here, not in the writing thread
        yield from announced

    def finish_bundle(self) -> None:
        self._finish_side_files()  # the bundle (and every run it announced) counts only once its files are on storage
        self._flush_progress()


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """One shard (or one piece of a shard: ``beam.shard_pieces``) to write on the spill path: its planned
    spec, the catalog listing every run, and the piece (None: the shard whole)."""

    spec: ShardSpec
    catalog: str
    piece: PieceSpec | None = None
    dropped: str | None = None  # the key hashes ``duplicates=drop`` leaves out (``beam.dropped``)


class WriteShardFromRunsFn(WriteShardFn):
    """Spill path: ``((shard number, piece number), [ShardTask])`` in, ``(shard number, ShardInfo)`` out, or
    ``(shard number, WrittenPiece)`` for a piece of a shard (joined by ``shard_pieces.JoinPiecesFn``);
    merges the shard's (or piece's) slice of every run (``beam_tfrecord.spill.run_files.shard_entries``).

    The runs come from the task's catalog file (O(runs) per shard, read from storage), so no
    runner has to hand every worker a side input.
    """

    def process(self, group: tuple[tuple[int, int], Iterable[ShardTask]]
                ) -> Iterator[tuple[int, ShardInfo | WrittenPiece]]:
        (number, piece_number), tasks = group
        found = list(tasks)
        if len(found) != 1:
            raise PipelineInvariantError(f"shard {number} piece {piece_number}",
                                         f"expected its one planned task, got {len(found)}")
        task = found[0]
        if task.piece is None:
            yield number, self.write_from_runs(task.spec, read_catalog(task.catalog), task.dropped)
            return
        # A shard a killed build finished (and joined) is reused: counted once, by its first piece's task.
        reused = (self._finished(task.spec) if task.piece.index == 0
                  else finished_shard(self._target(task.spec).temp_path, task.spec))
        if reused is not None:
            yield number, reused
            return
        with shard_entries(read_catalog(task.catalog), task.piece.hash_lo, task.piece.hash_hi,
                           direct=self._direct_io) as entries:
            yield number, WrittenPiece(task.piece, self._write_piece(task.piece, entries))

    def write_from_runs(self, spec: ShardSpec, runs: Sequence[SpilledRun], dropped: str | None = None) -> ShardInfo:
        """Writes one shard from its slice of every run (any order of ``runs``: the same file), unless an
        earlier attempt of this build (a killed one, resumed) finished it."""
        reused = self._finished(spec)
        if reused is not None:
            return reused
        with shard_entries(runs, spec.hash_lo, spec.hash_hi, direct=self._direct_io) as entries:
            return self._write(spec, entries_without(entries, spec, dropped))


def run_index(run: SpilledRun) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 hashes, int64 framed sizes) of a run's records, from its index file."""
    index = read_run_index(run)
    return index.hashes, index.framed_sizes


def _tag_encoded(element: SpilledRun | DeadLetter | RecordsSummary) -> tuple[None, tuple[str, Any]]:
    """Tags what the spill encoder emits by its type (one output: see ``encode_fn``)."""
    return None, (_KIND_OF_ENCODED[element.__class__], element)


@dataclasses.dataclass(frozen=True)
class PlannedRuns:
    """The spill path's plan (None when nothing was encoded), the catalog of the runs it was made
    from, and the dead letters (and merged records summary, when inferring) gathered with them."""

    plan: DatasetPlan | None
    catalog: str | None
    dead_letters: tuple[DeadLetter, ...]
    summary: RecordsSummary | None = None
    pieces: Mapping[int, tuple[PieceSpec, ...]] = dataclasses.field(default_factory=dict)  # by shard number
    digest_files: tuple[DigestFile, ...] = ()  # when duplicates are checked (``beam.duplicates``)
    dropped: str | None = None  # the key hashes ``duplicates=drop`` leaves out, sorted (``beam.dropped``)
    signature_files: tuple[SignatureFile, ...] = ()  # when near duplicates are searched (``beam.near_duplicates``)


def _plan_gathered(group: tuple[None, Iterable[tuple[str, Any]]], settings: FanInSettings, runs_dir: str,
                   reused: Sequence[SpilledRun] = ()) -> PlannedRuns:
    """Plans from every run's index file (read in turn, never all held), those of a killed build it
    resumes (``reused``) included, cuts shards into pieces when the shards are fewer than the writers
    (``shard_pieces.plan_pieces``), and writes the runs' catalog.

    One step: on the runners the spill path serves, a pipeline stage per planning round costs more
    than reading the small index files.
    """
    found = by_kind(group, (START, RUN, DEAD, SUMMARY, DIGESTS, DUPLICATES, SIGNATURES))
    signature_files = tuple(found[SIGNATURES])
    runs: list[SpilledRun] = [*found[RUN], *reused]
    dead: list[DeadLetter] = found[DEAD]
    summary = merge_summaries(found[SUMMARY])
    digest_files = tuple(found[DIGESTS])
    if not runs:
        return PlannedRuns(None, None, tuple(dead), summary, digest_files=digest_files,
                           signature_files=signature_files)
    runs.sort(key=lambda run: run.path)
    index_of: Callable[[SpilledRun], tuple[np.ndarray, np.ndarray]] = run_index
    dropped, removed = None, dict[int, int]()
    if settings.checks.drops_duplicates:
        hashes = dropped_hashes(found[DUPLICATES])
        index_of, dropped = index_without(run_index, hashes, removed), write_dropped(settings.temp_dir, hashes)
    plan = plan_in_one_step(runs, settings.description.splits, settings.description.sharding, index_of=index_of)
    if dropped is not None:
        check_removed(sum(removed.values()), found[DUPLICATES])
    pieces = plan_pieces(plan, runs, settings.tuning.shard_phase, compression=settings.description.compression,
                         file_format=settings.description.file_format)
    return PlannedRuns(plan, write_catalog(runs_dir, runs), tuple(dead), summary, pieces, digest_files, dropped,
                       signature_files)


def _shard_tasks(planned: PlannedRuns) -> Iterator[tuple[tuple[int, int], ShardTask]]:
    if planned.plan is None or planned.catalog is None:
        return
    for number, spec in enumerate(planned.plan.shards):
        if number not in planned.pieces:
            yield (number, 0), ShardTask(spec, planned.catalog, dropped=planned.dropped)
        for piece in planned.pieces.get(number, ()):
            yield (number, piece.index), ShardTask(spec, planned.catalog, piece)


def _plan_of(planned: PlannedRuns) -> DatasetPlan | None:
    return planned.plan


def _dead_letters_planned(planned: PlannedRuns) -> tuple[DeadLetter, ...]:
    return planned.dead_letters


def _digest_files_in(group: tuple[None, Iterable[tuple[str, Any]]]) -> list[DigestFile]:
    return [value for kind, value in group[1] if kind == DIGESTS]


def _ungrouped(group: tuple[None, Iterable[tuple[str, Any]]]) -> Iterator[tuple[None, tuple[str, Any]]]:
    for value in group[1]:
        yield None, value


def _digest_files_planned(planned: PlannedRuns) -> tuple[DigestFile, ...]:
    return planned.digest_files


def _signature_files_planned(planned: PlannedRuns) -> tuple[SignatureFile, ...]:
    return planned.signature_files


def _summary_planned(planned: PlannedRuns) -> Iterator[RecordsSummary]:
    if planned.summary is not None:
        yield planned.summary


class SpillPath(beam.PTransform):
    """Samples (or an ``Encoding``'s inputs) -> ``FanInOutputs``, through spilled runs.

    Args:
        settings: the writer's options.
        resume: what makes the build resumable (and what it resumes); None: not resumable.
        reused_runs: the runs of a killed build that this one resumes (planned with the new ones).
    """

    def __init__(self, settings: FanInSettings, *, resume: RunsResume | None = None,
                 reused_runs: Sequence[SpilledRun] = ()) -> None:
        super().__init__()
        self._settings = settings
        self._resume = resume
        self._reused_runs = tuple(reused_runs)

    def _encode_to_runs_fn(self, pipeline: beam.Pipeline, runs_dir: str) -> beam.DoFn:
        settings = self._settings
        if settings.encoding is not None:  # records are already encoded: no pool (see ``encode_processes``)
            return settings.encoding.to_runs_fn(runs_dir=runs_dir, run_bytes=settings.tuning.spill_run_bytes,
                                                direct_io=settings.tuning.direct_io, salt=settings.description.salt,
                                                max_record_bytes=settings.description.sharding.cap,
                                                side_files=settings.side_files())
        return self._in_pool_if_asked(pipeline, EncodeToRunsFn(
            settings.description.schema, runs_dir=runs_dir, run_bytes=settings.tuning.spill_run_bytes,
            direct_io=settings.tuning.direct_io, resume=self._resume, **settings.encode_options()))

    def _in_pool_if_asked(self, pipeline: beam.Pipeline, encode: EncodeToRunsFn) -> beam.DoFn:
        """``encode``, or a pool running it in several processes (see ``encode_processes``)."""
        processes = self._settings.tuning.encode_processes
        if processes == 1:
            return encode
        if not traits_of(pipeline).workers_on_this_machine:
            raise WriterOptionError(f"encode_processes={processes} needs a runner whose workers run on this "
                                    "machine (the DirectRunner); on others leave it unset")
        return EncodeInPoolFn(encode, processes=processes)

    def expand(self, samples: beam.PCollection) -> FanInOutputs:
        settings = self._settings
        runs_dir = storage.join(settings.temp_dir, "runs")
        encoded = samples | "EncodeToRuns" >> beam.ParDo(self._encode_to_runs_fn(samples.pipeline, runs_dir))
        # SpilledRun | DeadLetter (| RecordsSummary), all gathered in one group. One consumer of what
        # the encoder emits: the Dask runner keeps a finished task's inputs (the samples) referenced
        # until every consumer of its output has run, so a second branch would hold them all.
        gathered = (
            (samples.pipeline | "StartPlan" >> TaggedStart(), encoded | "TagEncoded" >> beam.Map(_tag_encoded))
            | "GatherRuns" >> beam.Flatten()
            | "AllRuns" >> beam.GroupByKey()  # (None, [(kind, SpilledRun | DeadLetter)...]): one group, always
        )
        groups = None
        if settings.checks.drops_duplicates:
            # the plan waits for the duplicate groups: it plans the kept records only
            groups = gathered | "FindDuplicates" >> FindDuplicatesAmong(_digest_files_in)
            gathered = ((gathered | "Ungroup" >> beam.FlatMap(_ungrouped), groups | "TagGroups" >> tag(DUPLICATES))
                        | "GatherGroups" >> beam.Flatten()
                        | "WithGroups" >> beam.GroupByKey())
        planned = gathered | "Plan" >> beam.Map(_plan_gathered, settings, runs_dir, self._reused_runs)  # PlannedRuns
        written = (
            planned
            # ((shard number, piece number), ShardTask): a spec (and piece) and the run catalog
            | "ShardTasks" >> beam.FlatMap(_shard_tasks)
            | "ByShard" >> beam.GroupByKey()  # spreads the shards and pieces over workers (one small task each)
            | "WriteShards" >> beam.ParDo(WriteShardFromRunsFn(settings.description.schema,
                                                                 settings.description.compression,
                                                                 settings.feature_transforms,
                                                                 **settings.shard_options()))
        )  # (shard number, ShardInfo | WrittenPiece)
        if settings.tuning.shard_phase.writers > 1:
            shard_infos = (written
                           | "ByShardToJoin" >> beam.GroupByKey()
                           | "JoinPieces" >> beam.ParDo(JoinPiecesFn(settings.description.schema,
                                                                     settings.description.compression,
                                                                     settings.feature_transforms,
                                                                     **settings.shard_options())))
        else:  # one writer per shard: no pieces to join, no stage for them
            shard_infos = written | "ShardInfos" >> beam.Values()
        plan = planned | "PlanOf" >> beam.Map(_plan_of)
        dead_letters = planned | "DeadLetters" >> beam.FlatMap(_dead_letters_planned)
        summary = planned | "SummaryOf" >> beam.FlatMap(_summary_planned) if settings.encoding is not None else None
        if settings.checks.duplicates_check is not None and groups is None:  # the plan lists every digest file
            groups = planned | "FindDuplicates" >> FindDuplicatesAmong(_digest_files_planned)
        signature_files = (planned | "SignatureFiles" >> beam.FlatMap(_signature_files_planned)
                           if settings.checks.near_duplicates is not None else None)
        return FanInOutputs(plan, shard_infos, dead_letters, summary, None, groups, signature_files)

"""``AddFeatures``: ``(key, {feature: value})`` elements joined by key with a version's records, one column file per
base shard, and the new version committed last (LATEST moves only then).

The join is distributed: the dataset's side is read per shard (``versions.add_features.shard_keys``), both sides meet
in a ``CoGroupByKey``, and each shard's rows in one ``GroupByKey`` (memory: one shard's rows). Bad input travels to the
commit as tagged elements, not tagged outputs, and every branch feeds it (the DaskRunner's defects: docs/DESIGN.md).
See docs/columns.md.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import heapq
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord._version import __version__
from beam_tfrecord.core.batch_encoder import BatchEncoder
from beam_tfrecord.core.columns import COLUMNS_DIRNAME, ColumnFile
from beam_tfrecord.core.manifest import DEAD_LETTER_FILENAME, MANIFEST_FILENAME, Manifest
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import DeadLetter, Stage
from beam_tfrecord.errors import DuplicateFeatureKeyError, MissingFeatureValuesError, SampleError, UnknownKeyError
from beam_tfrecord.errors.columns import MAX_NAMED_KEYS
from beam_tfrecord.formats import shard_format
from beam_tfrecord.versions.add_features import AddPlan, BaseShard, OnMissing, shard_keys
from beam_tfrecord.versions.refresh import publish_version

ENCODE_BATCH = 512  # rows encoded at once (the build's chunk size is of this order)
# What the join and the writers send to the commit, as (tag, payload) elements.
_ROW, _DEAD, _TWICE, _AMBIGUOUS, _MISSING, _WRITTEN = "row", "dead", "twice", "ambiguous", "missing", "written"


@dataclasses.dataclass(frozen=True)
class PublishOptions:
    """How the add's version is published: the command line it records, and retention after LATEST moves.

    Attributes:
        command: the command line (or options) recorded in the manifest.
        keep_versions: versions retention keeps.
        min_version_age: how long a version is kept after it stops being LATEST.
    """

    command: tuple[str, ...]
    keep_versions: int
    min_version_age: datetime.timedelta


class _EncodeFn(beam.DoFn):
    """A batch of (key, {feature: value}) -> (key, its row: the values encoded as any build checks them), or (key,
    DeadLetter) when the schema refuses a value. A batch at a time (the build's column encoder, ~10x faster on
    numeric lists), and before the join, so the shuffle carries the encoded row (~2x smaller than the values)."""

    def __init__(self, plan: AddPlan) -> None:
        self._plan = plan
        self._encoders: tuple[BatchEncoder, SampleEncoder] | None = None

    def setup(self) -> None:
        self._encoders = BatchEncoder(self._plan.column_schema), SampleEncoder(self._plan.column_schema)

    def process(self, batch: list[tuple[str, Any]]) -> Iterator[tuple[str, bytes | DeadLetter]]:
        self._encoders = self._encoders or (BatchEncoder(self._plan.column_schema),
                                            SampleEncoder(self._plan.column_schema))
        fast, reference = self._encoders
        given = [(key, values) for key, values in batch if not isinstance(values, DeadLetter)]
        yield from ((key, values) for key, values in batch if isinstance(values, DeadLetter))
        rows = fast.encode([self._plan.stored(values) for _, values in given])
        if rows is not None:  # byte-identical to the reference's; None: a value it does not cover, or a bad one
            yield from ((key, row) for (key, _), row in zip(given, rows))
            return
        for key, values in given:
            try:
                yield key, self._plan.encode(key, values, reference)
            except SampleError as err:  # the record then has no value
                yield key, DeadLetter.from_error(key, Stage.VALIDATE, err)


class _MatchFn(beam.DoFn):
    """(key, {"rows": [...], "where": [...]}) -> tagged elements: the record's row, or what is wrong."""

    def __init__(self, plan: AddPlan) -> None:
        self._plan = plan

    def process(self, element: tuple[str, dict[str, Iterable[Any]]]) -> Iterator[tuple[str, Any]]:
        key, grouped = element
        values, where = list(grouped["rows"]), list(grouped["where"])
        given = [v for v in values if not isinstance(v, DeadLetter)]
        yield from ((_DEAD, letter) for letter in values if isinstance(letter, DeadLetter))
        if not where:
            if given:
                yield _DEAD, DeadLetter.from_error(key, Stage.VALIDATE, UnknownKeyError(key, self._plan.base_version))
            return
        if len(where) > 1:
            yield _AMBIGUOUS, key
            return
        if len(given) > 1:
            yield _TWICE, key
            return
        number, position = where[0]
        if given:
            yield _ROW, (number, (position, given[0]))
        elif self._plan.on_missing is OnMissing.FAIL:
            yield _MISSING, key


class _WriteColumnFn(beam.DoFn):
    """(shard number, [(position, row), ...]) -> ("written", (number, ColumnFile | None, records without a row)).

    A record given no row gets the schema's defaults (``OnMissing.MISSING``), or the file is not written (``FAIL``:
    the commit refuses the add). A deleted record's row is empty. Written to a temporary name, then renamed."""

    def __init__(self, plan: AddPlan) -> None:
        self._plan = plan

    def process(self, element: tuple[int, Iterable[Any]]) -> Iterator[tuple[str, Any]]:
        number, rows = element
        plan = self._plan
        base = plan.shards[number]
        by_position = dict(row for row in rows if row is not None)
        shard = base.shard
        deleted = shard.deletions.positions if shard.deletions is not None else ()
        without = shard.num_live - len(by_position)
        if without and plan.on_missing is OnMissing.FAIL:
            yield _WRITTEN, (number, None, without)
            return
        default = plan.encode("", None, SampleEncoder(plan.column_schema)) if without else b""
        path = storage.join(plan.directory, plan.column_name(base))
        temp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        storage.make_dirs(storage.join(plan.directory, COLUMNS_DIRNAME))
        writer = shard_format(plan.base.file_format).open_writer(temp, compression=plan.base.compression,
                                                                  direct_io=False)
        for position in range(shard.num_records):
            writer.append(b"" if position in deleted else by_position.get(position, default))
        crc32c, num_bytes = writer.close()
        storage.rename([temp], [path])
        column = ColumnFile(plan.column_name(base), tuple(plan.column_schema.features), shard.num_records, num_bytes,
                            crc32c)
        yield _WRITTEN, (number, column, without)


def _with_marker(number: int) -> tuple[int, None]:
    return number, None  # every shard gets a group, rows or not


class AddFeatures(beam.PTransform):
    """``(key, {feature: value})`` (or ``(key, DeadLetter)`` for an input that could not be read) -> the id of the
    version published, with a column file per base shard of ``plan``.

    Args:
        plan: the add (``versions.add_features``): base version, added features, where keys come from.
        key_sources: the base shards with their key sources (``base_shards``), one task each.
        publish: the command recorded and retention.
    """

    def __init__(self, plan: AddPlan, key_sources: Sequence[BaseShard], *, publish: PublishOptions) -> None:
        super().__init__()
        self._plan = plan
        self._sources = tuple(key_sources)
        self._publish = publish

    def expand(self, features: beam.PCollection) -> beam.PCollection:
        pipeline = features.pipeline
        where = (pipeline
                 | "BaseShards" >> beam.Create(self._sources)
                 | "SpreadShards" >> beam.Reshuffle()
                 | "ShardKeys" >> beam.FlatMap(shard_keys, self._plan))  # (key, (shard number, position))
        rows = (features
                | "Batch" >> beam.BatchElements(min_batch_size=ENCODE_BATCH, max_batch_size=ENCODE_BATCH)
                | "Encode" >> beam.ParDo(_EncodeFn(self._plan)))  # (key, row bytes | DeadLetter)
        matched = ({"rows": rows, "where": where}
                   | "JoinByKey" >> beam.CoGroupByKey()
                   | "Match" >> beam.ParDo(_MatchFn(self._plan)))  # (tag, payload)
        markers = (pipeline
                   | "EveryShard" >> beam.Create([base.number for base in self._plan.shards])
                   | "Marker" >> beam.Map(_with_marker))
        placed = matched | "RowsOnly" >> beam.Filter(lambda tagged: tagged[0] == _ROW) | beam.Map(lambda t: t[1])
        written = ((placed, markers)
                   | "RowsAndMarkers" >> beam.Flatten()
                   | "ByShard" >> beam.GroupByKey()  # (shard number, [(position, row), ..., None])
                   | "WriteColumnFiles" >> beam.ParDo(_WriteColumnFn(self._plan)))
        problems = matched | "ProblemsOnly" >> beam.Filter(lambda tagged: tagged[0] != _ROW)
        return ((written, problems)
                | "Outcomes" >> beam.Flatten()
                | "SumOutcomes" >> beam.CombineGlobally(_SumOutcomesFn())
                | "CommitVersion" >> beam.Map(commit_add, self._plan, self._publish))


@dataclasses.dataclass
class AddOutcomes:
    """What the commit needs of an add's outcomes: every column file and dead letter, and of each kind of key
    problem (a key given twice, naming two records, a record given no value) its count and first keys by name.

    A sum, not the list of every outcome: with ``--on_missing fail`` every record given no value is one, so a list
    in the commit's one worker would grow with the dataset (1e9 records of a feature given to few)."""

    written: list[tuple[int, ColumnFile | None, int]] = dataclasses.field(default_factory=list)
    dead: list[DeadLetter] = dataclasses.field(default_factory=list)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    first_keys: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # sorted, MAX_NAMED_KEYS at most

    def add_key(self, tag: str, key: str) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        first = self.first_keys.setdefault(tag, [])
        if len(first) < MAX_NAMED_KEYS or key < first[-1]:
            bisect.insort(first, key)
            del first[MAX_NAMED_KEYS:]

    def merge(self, other: AddOutcomes) -> None:
        self.written += other.written
        self.dead += other.dead
        for tag, count in other.counts.items():
            self.counts[tag] = self.counts.get(tag, 0) + count
            self.first_keys[tag] = heapq.nsmallest(MAX_NAMED_KEYS, [*self.first_keys.get(tag, []),
                                                                     *other.first_keys[tag]])


class _SumOutcomesFn(beam.CombineFn):
    """Tagged outcomes -> one ``AddOutcomes`` (memory bounded by the column files and the dead letters)."""

    def create_accumulator(self) -> AddOutcomes:
        return AddOutcomes()

    def add_input(self, outcomes: AddOutcomes, tagged: tuple[str, Any]) -> AddOutcomes:
        tag, payload = tagged
        if tag == _WRITTEN:
            outcomes.written.append(payload)
        elif tag == _DEAD:
            outcomes.dead.append(payload)
        else:
            outcomes.add_key(tag, payload)
        return outcomes

    def merge_accumulators(self, accumulators: Iterable[AddOutcomes]) -> AddOutcomes:
        merged = AddOutcomes()
        for outcomes in accumulators:
            merged.merge(outcomes)
        return merged

    def extract_output(self, outcomes: AddOutcomes) -> AddOutcomes:
        return outcomes


def commit_add(outcomes: AddOutcomes, plan: AddPlan, publish: PublishOptions) -> str:
    """The add's last step (one worker): refuse bad input, else write the dead letters and the manifest, then move
    LATEST and apply retention. Returns the version id.

    Raises:
        DuplicateFeatureKeyError: a key given twice, or naming two records.
        MissingFeatureValuesError: records given no value, with ``OnMissing.FAIL``.
    """
    if outcomes.counts.get(_TWICE):
        raise DuplicateFeatureKeyError(outcomes.first_keys[_TWICE], outcomes.counts[_TWICE],
                                       where="were given values twice")
    if outcomes.counts.get(_AMBIGUOUS):
        raise DuplicateFeatureKeyError(outcomes.first_keys[_AMBIGUOUS], outcomes.counts[_AMBIGUOUS],
                                       where=f"name more than one record of the dataset (the key feature "
                                             f"{plan.key_feature!r} is not unique)")
    dead = sorted(outcomes.dead, key=lambda d: (d.key, d.message))
    without = sum(count for _, _, count in outcomes.written)
    if without and plan.on_missing is OnMissing.FAIL:
        rejected = [d.message for d in dead if d.error_type != UnknownKeyError.__name__]
        raise MissingFeatureValuesError(outcomes.first_keys.get(_MISSING, []), without, rejected=rejected[:1])
    columns = {number: column for number, column, _ in outcomes.written if column is not None}  # None: refused above
    if dead:
        storage.write_bytes_atomic(storage.join(plan.directory, DEAD_LETTER_FILENAME), "".join(
            json.dumps(d.to_json(), sort_keys=True) + "\n" for d in dead).encode("utf-8"))
    summary = {"action": "add", "base_version": plan.base_version, "indexes_version": plan.indexes_version,
               "features": sorted(plan.added.features),
               "physical_names": dict(plan.physical), "replaced": list(plan.replaced), "dead_letters": len(dead),
               "records_without_value": without, "column_bytes": sum(c.num_bytes for c in columns.values())}
    manifest = plan.manifest(columns, command=publish.command, tool_version=__version__, summary=summary,
                             created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    if dead:
        manifest = Manifest.loads(dataclasses.replace(
            manifest, dead_letters=DEAD_LETTER_FILENAME, num_rejected=len(dead),
            num_inputs=manifest.num_inputs + len(dead)).dumps())
    storage.write_bytes_atomic(storage.join(plan.directory, MANIFEST_FILENAME), manifest.dumps().encode("utf-8"))
    return publish_version(manifest, root=plan.root, version_id=plan.version_id, keep_versions=publish.keep_versions,
                           min_version_age=publish.min_version_age)

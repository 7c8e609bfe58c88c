"""Weighted mixing of datasets, and the global order of an epoch (one dataset is a mixture of one).

The order is a pure function of datasets, weights, split, seed, epoch and shuffle options, never of the
ranks or workers reading it. Rules and limits: docs/reading.md, "Mixing datasets, and resuming an epoch exactly".
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Generator, Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from beam_tfrecord.core.blocks import RecordBlock
from beam_tfrecord.core.record_schema import holds_verbatim_payloads
from beam_tfrecord.core.schema import Schema, feature_to_json
from beam_tfrecord.errors import IncompatibleSchemasError, ReaderError
from beam_tfrecord.reader.decode.batch_rows import cut_blocks
from beam_tfrecord.reader.decode.block_decode import BlockDecoder, Columns, concat, num_rows, rows
from beam_tfrecord.reader.decode.block_decode import take as take_rows
from beam_tfrecord.reader.decode.numpy_decode import Example
from beam_tfrecord.reader.decode.ragged import Allocate, allocate
from beam_tfrecord.reader.options import ImageDecoding
from beam_tfrecord.reader.order.orders import GATHERED_RECORDS, Record, RecordOrder, StoredOrder, generator, make_order
from beam_tfrecord.reader.order.read_plan import ReadPlan, plan_read
from beam_tfrecord.reader.order.resume import Ranges, rank_share
from beam_tfrecord.reader.order.slicing import sub_range
from beam_tfrecord.remote_reads.options import RemoteReads

MAX_DATASETS = 255  # one byte per choice
_CHOICES = -1  # the seed part that makes the interleaving's generator differ from the datasets' ones

DatasetPaths = str | Mapping[str, float]


@dataclasses.dataclass(frozen=True)
class Source:
    """One dataset of a mixture.

    Attributes:
        path: the dataset's path, as the user gave it.
        weight: its normalized weight (the weights of a mixture sum to 1).
        plan: every record of the split expression (one reader, no share taken yet).
    """

    path: str
    weight: Fraction
    plan: ReadPlan


def _weights(datasets: DatasetPaths) -> dict[str, Fraction]:
    if isinstance(datasets, str):
        return {datasets: Fraction(1)}
    if not isinstance(datasets, Mapping) or not datasets:
        raise ReaderError(f"expected a dataset path or a non-empty mapping {{path: weight}}, got {datasets!r}")
    if len(datasets) > MAX_DATASETS:
        raise ReaderError(f"at most {MAX_DATASETS} datasets can be mixed, got {len(datasets)}")
    weights = {}
    for path, weight in datasets.items():
        if not isinstance(path, str) or isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not math.isfinite(weight) or weight <= 0:
            raise ReaderError(f"dataset {path!r}: the weight must be a positive number, got {weight!r}")
        weights[path] = Fraction(weight)
    total = sum(weights.values())
    return {path: weight / total for path, weight in weights.items()}


def check_compatible(first: str, first_schema: Schema, second: str, second_schema: Schema) -> None:
    """Checks that two datasets' examples have the same features, of the same types.

    Raises:
        IncompatibleSchemasError: naming both datasets and the first feature that differs.
    """
    for group in ("features", "sequence_features"):
        mine, theirs = getattr(first_schema, group), getattr(second_schema, group)
        for name in sorted({*mine, *theirs}):
            kind = "a sequence feature" if group == "sequence_features" else "a feature"
            if name not in theirs:
                raise IncompatibleSchemasError(first, second, name, f"is {kind} of the first only")
            if name not in mine:
                raise IncompatibleSchemasError(first, second, name, f"is {kind} of the second only")
            if mine[name] != theirs[name]:
                a, b = feature_to_json(mine[name]), feature_to_json(theirs[name])
                differences = "; ".join(f"{key} {a.get(key)!r} in the first, {b.get(key)!r} in the second"
                                        for key in sorted({*a, *b}) if a.get(key) != b.get(key))
                raise IncompatibleSchemasError(first, second, name, f"differs: {differences}")


def open_sources(datasets: DatasetPaths, *, split: str) -> tuple[Source, ...]:
    """The datasets of a read, with their plans, checked compatible.

    Raises:
        ReaderError: on a bad mapping or weight.
        IncompatibleSchemasError: when two datasets' schemas differ.
        DatasetNotFoundError, UnknownSplitError: a dataset or a split is missing.
    """
    sources = tuple(Source(path, weight, plan_read(path, split=split)) for path, weight in _weights(datasets).items())
    first = sources[0]
    for other in sources[1:]:
        check_compatible(first.path, first.plan.manifest.schema, other.path, other.plan.manifest.schema)
    return sources


def epoch_takes(sources: tuple[Source, ...]) -> list[int]:
    """Examples each dataset gives per epoch: ``floor(w_d * min(N_e / w_e))`` (the first to run out ends it)."""
    length = min(Fraction(s.plan.num_records) / s.weight for s in sources)
    return [math.floor(s.weight * length) for s in sources]


def num_examples(path: str | Mapping[str, float], *, split: str = "train", num_workers: int = 1) -> int:
    """Examples each of ``num_workers`` workers reads per epoch (for ``steps_per_epoch``), without TensorFlow.

    ``path`` may be a mapping ``{path: weight}``: a mixture's epoch (docs/reading.md, "Mixing datasets").
    """
    if isinstance(path, str):
        return plan_read(path, split=split, num_workers=num_workers).num_records
    if num_workers < 1:
        raise ReaderError(f"num_workers must be >= 1, got {num_workers}")
    return sum(epoch_takes(open_sources(path, split=split))) // num_workers


def describe_read(sources: tuple[Source, ...], *, split: str, seed: int, shuffle: bool,
                  shuffle_buffer: int) -> dict[str, Any]:
    """What decides an epoch's order, as plain values (a saved read state names it)."""
    return {"datasets": {s.path: str(s.weight) for s in sources}, "split": split, "seed": seed,
            "shuffle": shuffle, "shuffle_buffer": shuffle_buffer}


def interleave(takes: list[int], *, seed: int, epoch: int) -> np.ndarray:
    """The dataset of each position of an epoch: a seeded permutation of ``takes[d]`` times ``d`` (uint8)."""
    choices = np.repeat(np.arange(len(takes), dtype=np.uint8), takes)
    return generator(seed, epoch, _CHOICES).permutation(choices)


class EpochOrder:
    """One epoch's global order of examples over every dataset of a mixture.

    Args:
        sources: the datasets (``open_sources``).
        seed, epoch: decide the interleaving and, with ``shuffle``, each dataset's order (the first
            dataset's from ``(seed, epoch)`` alone; the others' from ``(seed, epoch, number)``).
        shuffle: shuffle each dataset (``orders.make_order``).
        shuffle_buffer: the window of a TFRecord dataset's shuffle.
        verify: check every record's CRCs.
        reads: how ``gs://`` shards are fetched (``shard_fetch``); default ``RemoteReads()``.
    """

    def __init__(self, sources: tuple[Source, ...], *, seed: int, epoch: int, shuffle: bool, shuffle_buffer: int,
                 verify: bool, reads: RemoteReads | None = None) -> None:
        self.sources = sources
        self.takes = epoch_takes(sources)
        self.total = sum(self.takes)
        self._orders: list[RecordOrder] = [
            make_order(s.plan, shuffle=shuffle, seed_parts=(seed, epoch, number) if number else (seed, epoch),
                       shuffle_buffer=shuffle_buffer, verify=verify, reads=reads) for number, s in enumerate(sources)]
        self._offsets = [epoch * take % s.plan.num_records if s.plan.num_records else 0
                         for take, s in zip(self.takes, sources)]
        self._choices = interleave(self.takes, seed=seed, epoch=epoch) if len(sources) > 1 else None

    def choices(self, lo: int, hi: int) -> np.ndarray:
        """The dataset of each position in ``[lo, hi)``."""
        if self._choices is None:
            return np.zeros(hi - lo, dtype=np.uint8)
        return self._choices[lo:hi]

    def dataset_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """For each dataset, the run ``[first, stop)`` of its epoch's examples that positions ``[lo, hi)`` hold."""
        if self._choices is None:
            return [(lo, hi)]
        before = np.bincount(self._choices[:lo], minlength=len(self.sources))
        inside = np.bincount(self._choices[lo:hi], minlength=len(self.sources))
        return [(int(b), int(b + n)) for b, n in zip(before, inside)]

    def _runs(self, number: int, first: int, stop: int) -> list[tuple[int, int]]:
        """Where dataset ``number``'s examples ``[first, stop)`` of this epoch are in its order (wrapping around)."""
        size = self.sources[number].plan.num_records
        begin = self._offsets[number] + first
        end = begin + stop - first
        return [(lo, hi) for lo, hi in ((begin, min(end, size)), (max(begin, size) - size, end - size)) if lo < hi]

    def iter_dataset(self, number: int, first: int, stop: int) -> Generator[Record, None, None]:
        """Dataset ``number``'s examples ``[first, stop)`` of this epoch (its order, from the epoch's offset)."""
        for lo, hi in self._runs(number, first, stop):
            yield from self._orders[number].iter_range(lo, hi)

    def iter_dataset_blocks(self, number: int, first: int, stop: int) -> Generator[RecordBlock, None, None]:
        """``iter_dataset``'s records in blocks (``orders``)."""
        for lo, hi in self._runs(number, first, stop):
            yield from self._orders[number].iter_blocks(lo, hi)

    def iter_range(self, lo: int, hi: int) -> Iterator[tuple[int, Record]]:
        """(dataset number, record) at each position of ``[lo, hi)``."""
        streams = [self.iter_dataset(number, first, stop)
                   for number, (first, stop) in enumerate(self.dataset_ranges(lo, hi))]
        try:
            for number in self.choices(lo, hi).tolist():
                yield number, next(streams[number])
            for stream in streams:  # run each to its end: a shard reader checks its count there
                collections.deque(stream, maxlen=0)
        finally:
            for stream in streams:
                stream.close()


class _Rows:
    """A stream of decoded blocks, taken from a given number of rows at a time."""

    def __init__(self, blocks: Generator[Columns, None, None]) -> None:
        self._blocks = blocks
        self._held: Columns = {}
        self._at = 0

    def take(self, count: int) -> Columns:
        parts: list[Columns] = []
        while count:
            if self._at == num_rows(self._held):
                self._held, self._at = next(self._blocks), 0
            got = min(count, num_rows(self._held) - self._at)
            parts.append(take_rows(self._held, self._at, self._at + got))
            self._at += got
            count -= got
        return concat(parts) if parts else {}

    def finish(self) -> None:
        """Runs the stream to its end: a shard reader checks its count there."""
        collections.deque(self._blocks, maxlen=0)

    def close(self) -> None:
        self._blocks.close()


def _laid_out(choices: np.ndarray, parts: list[Columns]) -> Columns:
    """One stretch's columns: row ``i`` is the next row of ``parts[choices[i]]``."""
    present = [number for number, part in enumerate(parts) if num_rows(part)]
    if len(present) == 1:
        return parts[present[0]]
    where = {number: np.flatnonzero(choices == number) for number in present}
    out: Columns = {}
    for name in parts[present[0]]:
        values = [parts[number][name] for number in present]
        if all(isinstance(v, np.ndarray) and v.dtype != object and v.shape[1:] == values[0].shape[1:]
               for v in values):
            column = np.empty((len(choices), *values[0].shape[1:]), dtype=np.result_type(*values))
            for number, value in zip(present, values):
                column[where[number]] = value
            out[name] = column
        else:
            items: list[Any] = [None] * len(choices)
            for number, value in zip(present, values):
                for index, item in zip(where[number].tolist(), value):
                    items[index] = item
            out[name] = items
    return out


def iter_columns(order: EpochOrder, positions: Ranges, *, image_decoding: ImageDecoding | None,
                 allocate_values: Allocate = allocate, batch_rows: int | None = None) -> Iterator[Columns]:
    """Decodes the examples at ``positions`` of an epoch's order, in that order, a block at a time, as columns.

    One dataset: its decoded blocks (with ``batch_rows``, cut at batch boundaries, images decoded into one buffer
    per batch: ``BatchRows``). A mixture: each dataset's run decoded in blocks, and the rows
    of each stretch of ``GATHERED_RECORDS`` positions laid out in the interleaving's order.

    Raises:
        MissingShardError, CorruptShardError: on missing or damaged shards, or records that do not match the schema.
    """
    single = len(order.sources) == 1
    decoders = [BlockDecoder(s.plan.manifest.schema, image_decoding=image_decoding,
                             verbatim=holds_verbatim_payloads(s.plan.manifest.metadata),
                             allocate_values=allocate_values, batch_rows=batch_rows if single else None)
                for s in order.sources]
    if single:
        blocks: Iterable[RecordBlock] = (block for lo, hi in positions
                                         for block in order.iter_dataset_blocks(0, lo, hi))
        if batch_rows is not None and image_decoding is not None:
            blocks = cut_blocks(blocks, batch_rows)
        yield from map(decoders[0].decode, blocks)
        return
    for lo, hi in positions:
        streams = [_Rows(decoders[number].decode(block) for block in order.iter_dataset_blocks(number, first, stop))
                   for number, (first, stop) in enumerate(order.dataset_ranges(lo, hi))]
        try:
            for begin in range(lo, hi, GATHERED_RECORDS):
                choices = order.choices(begin, min(begin + GATHERED_RECORDS, hi))
                counts = np.bincount(choices, minlength=len(streams)).tolist()
                yield _laid_out(choices, [stream.take(count) for stream, count in zip(streams, counts)])
            for stream in streams:
                stream.finish()
        finally:
            for stream in streams:
                stream.close()


def iter_examples(order: EpochOrder, positions: Ranges, *, image_decoding: ImageDecoding | None) -> Iterator[Example]:
    """Decodes the examples at ``positions`` of an epoch's order, in that order (``iter_columns``, row by row)."""
    for columns in iter_columns(order, positions, image_decoding=image_decoding):
        yield from rows(columns)


def worker_plans(datasets: Mapping[str, float], *, split: str, num_workers: int, worker_index: int,
                 seed: int) -> tuple[list[ReadPlan], np.ndarray]:
    """One worker's share of a mixture's epoch-0 order (unshuffled), as one plan per dataset plus the interleaving.

    For readers that read each dataset as a stream and interleave them (tf.data's
    ``choose_from_datasets``): worker ``worker_index`` reads ``plans[d]`` for dataset ``d`` and takes
    its next example from dataset ``choices[i]`` at step ``i``.

    Raises:
        ReaderError, IncompatibleSchemasError: as ``open_sources``, or on bad worker arguments.
    """
    sources = open_sources(datasets, split=split)
    order = EpochOrder(sources, seed=seed, epoch=0, shuffle=False, shuffle_buffer=1, verify=True)
    share = rank_share(((0, order.total),), num_workers, worker_index)
    lo, hi = share[0] if share else (0, 0)
    plans = [dataclasses.replace(s.plan, segments=sub_range(s.plan.segments, first, stop), num_workers=num_workers,
                                 worker_index=worker_index)
             for s, (first, stop) in zip(sources, order.dataset_ranges(lo, hi))]
    return plans, order.choices(lo, hi)


_WINDOW = 10_000  # the shuffle window of a sequential format's order (``read_numpy``'s default)


def iter_record_blocks(plan: ReadPlan, *, shuffle: bool, seed: int, epoch: int, verify: bool = True,
                       reads: RemoteReads | None = None) -> Iterator[RecordBlock]:
    """A worker's serialized records, a block at a time (what tf.data is fed for formats it cannot read).

    Without ``shuffle``, the plan's records in stored order. With it, the worker's share of epoch
    ``epoch``'s order of every record of the split expression: what ``read_numpy(shuffle=True)``
    reads with the same seed, epoch and workers (a true global shuffle on a random-access format).
    """
    if not shuffle:
        yield from StoredOrder(plan, verify=verify, reads=reads).iter_blocks(0, plan.num_records)
        return
    whole = plan_read(plan.dataset_dir, split=plan.split, manifest=plan.manifest)
    order = EpochOrder((Source(plan.dataset_dir, Fraction(1), whole),), seed=seed, epoch=epoch,
                       shuffle=True, shuffle_buffer=_WINDOW, verify=verify, reads=reads)
    for lo, hi in rank_share(((0, order.total),), plan.num_workers, plan.worker_index):
        yield from order.iter_dataset_blocks(0, lo, hi)

"""Split slicing and work partitioning: which records of which shards a reader reads.

Pure arithmetic on the manifest's record counts, shared by every reader, so that all read the same records.
See docs/reading.md, "Read it back".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from beam_tfrecord.core.manifest import Manifest, ShardInfo
from beam_tfrecord.errors import ReaderError

_SLICE = re.compile(r"^(?P<split>[A-Za-z0-9_]+)(?:\[(?P<start>[^:\]]*):(?P<stop>[^:\]]*)\])?$")
_BOUND = re.compile(r"^(?P<value>-?\d+)(?P<percent>%?)$")


@dataclasses.dataclass(frozen=True)
class ReadSegment:
    """A run of consecutive records inside one shard.

    Attributes:
        shard: the shard as the manifest lists it.
        skip: records to skip from the start of the shard.
        take: records to read after those.
    """

    shard: ShardInfo
    skip: int
    take: int

    def __post_init__(self) -> None:
        if self.skip < 0 or self.take < 0 or self.skip + self.take > self.shard.num_records:
            raise ReaderError(f"segment of shard {self.shard.filename!r}: skip {self.skip} + take {self.take} "
                              f"does not fit its {self.shard.num_records} records")

    @property
    def reaches_end(self) -> bool:
        """Whether this segment ends at the shard's last record (so its count can be checked)."""
        return self.skip + self.take == self.shard.num_records


@dataclasses.dataclass(frozen=True)
class SplitSlice:
    """One term of a split expression: a split and a [start, stop) record range of it.

    Attributes:
        split: split name.
        start: first record (None: from the start); negative counts from the end.
        stop: end record, exclusive (None: to the end); negative counts from the end.
        percent: ``start`` and ``stop`` are percentages of the split, not record counts.
    """

    split: str
    start: int | None = None
    stop: int | None = None
    percent: bool = False

    def bounds(self, num_records: int) -> tuple[int, int]:
        """The absolute [start, stop) record range for a split of ``num_records``, clipped like Python slices."""

        def absolute(value: int | None, default: int) -> int:
            if value is None:
                return default
            if self.percent:
                if not -100 <= value <= 100:
                    raise ReaderError(f"split {self.split!r}: percent boundary {value}% is outside [-100, 100]")
                value = round(value * num_records / 100)  # closest record, as TFDS rounds
            if value < 0:
                value += num_records
            return min(max(value, 0), num_records)

        start, stop = absolute(self.start, 0), absolute(self.stop, num_records)
        return start, max(start, stop)


def parse_split(expression: str) -> tuple[SplitSlice, ...]:
    """Parses ``"train[:10%]+validation"`` into its slices.

    Raises:
        ReaderError: on a malformed term or mixed units (``train[10%:2000]``).
    """
    terms = [term.strip() for term in expression.split("+")]
    if not expression.strip() or not all(terms):
        raise ReaderError(f"split {expression!r}: expected NAME, NAME[START:STOP] or terms joined by '+'")
    slices = []
    for term in terms:
        match = _SLICE.match(term)
        if match is None:
            raise ReaderError(f"split {expression!r}: term {term!r} is not NAME or NAME[START:STOP] "
                              "(e.g. train[:10%], train[1000:2000])")
        bounds: list[int | None] = []
        units = set()
        for text in (match["start"], match["stop"]):
            text = (text or "").strip()
            if not text:
                bounds.append(None)
                continue
            bound = _BOUND.match(text)
            if bound is None:
                raise ReaderError(f"split {expression!r}: boundary {text!r} in {term!r} is not an integer "
                                  "or a percentage")
            bounds.append(int(bound["value"]))
            units.add(bool(bound["percent"]))
        if len(units) > 1:
            raise ReaderError(f"split {expression!r}: term {term!r} mixes a percentage and a record count")
        slices.append(SplitSlice(match["split"], bounds[0], bounds[1], percent=units == {True}))
    return tuple(slices)


def resolve_split(manifest: Manifest, expression: str) -> tuple[ReadSegment, ...]:
    """The ordered segments a split expression selects.

    Raises:
        ReaderError: on a malformed expression.
        UnknownSplitError: when a term names a split the dataset does not have.
    """
    segments: list[ReadSegment] = []
    for part in parse_split(expression):
        split = manifest.split(part.split)
        start, stop = part.bounds(split.num_records)
        # A shard with deleted records is its live runs: every reader skips the deleted ones, counts stay exact.
        whole = [ReadSegment(shard, run_start, run_length) for shard in split.shards
                 for run_start, run_length in shard.live_runs()]
        segments.extend(sub_range(whole, start, stop))
    return tuple(_merge(segments))


def _merge(segments: Sequence[ReadSegment]) -> list[ReadSegment]:
    """Joins consecutive segments of the same shard (e.g. "train[:10]+train[10:20]")."""
    out: list[ReadSegment] = []
    for segment in segments:
        if out and out[-1].shard == segment.shard and out[-1].skip + out[-1].take == segment.skip:
            out[-1] = ReadSegment(segment.shard, out[-1].skip, out[-1].take + segment.take)
        elif segment.take:
            out.append(segment)
    return out


def records_per_worker(segments: Sequence[ReadSegment], num_workers: int) -> int:
    """How many records each of ``num_workers`` gets: the same for all (the remainder is left out)."""
    if num_workers < 1:
        raise ReaderError(f"num_workers must be >= 1, got {num_workers}")
    return sum(s.take for s in segments) // num_workers


def partition(segments: Sequence[ReadSegment], *, num_workers: int, worker_index: int) -> tuple[ReadSegment, ...]:
    """The segments of one worker: a contiguous, equal-size range of the selected records.

    Args:
        segments: the selected records, in order (from ``resolve_split``).
        num_workers: how many workers read the split.
        worker_index: this worker, in ``[0, num_workers)``.

    Raises:
        ReaderError: on a bad worker count or index, or when there are fewer records than workers.
    """
    per_worker = records_per_worker(segments, num_workers)
    if not 0 <= worker_index < num_workers:
        raise ReaderError(f"worker_index must be in [0, {num_workers}), got {worker_index}")
    total = sum(s.take for s in segments)
    if total and per_worker == 0:
        raise ReaderError(f"{total} records cannot give each of {num_workers} workers at least one")
    return sub_range(segments, worker_index * per_worker, (worker_index + 1) * per_worker)


def split_evenly(count: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of part ``index`` when ``count`` items are cut into ``parts`` near-equal runs."""
    base, extra = divmod(count, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def sub_range(segments: Sequence[ReadSegment], start: int, stop: int) -> tuple[ReadSegment, ...]:
    """Records [start, stop) of the sequence the segments form (e.g. one DataLoader worker's part)."""
    out = []
    first = 0
    for segment in segments:
        lo, hi = max(start, first), min(stop, first + segment.take)
        if lo < hi:
            out.append(ReadSegment(segment.shard, segment.skip + lo - first, hi - lo))
        first += segment.take
    return tuple(_merge(out))

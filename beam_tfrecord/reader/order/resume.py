"""Who reads which positions of an epoch's order, and where a stopped epoch resumes (pure arithmetic).

No position is read twice or skipped with any change of ranks or workers, except the last
``remaining % world_size``. Guarantees: docs/reading.md, "Mixing datasets, and resuming an epoch exactly".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.order.slicing import split_evenly

Ranges = tuple[tuple[int, int], ...]
STATE_VERSION = 1
_STATE_KEY = "beam_tfrecord_read_state"


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, merged, non-empty ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted((int(lo), int(hi)) for lo, hi in ranges if hi > lo):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def length(ranges: Ranges) -> int:
    """Positions the ranges hold."""
    return sum(hi - lo for lo, hi in ranges)


def complement(total: int, consumed: Ranges) -> Ranges:
    """The positions of ``[0, total)`` not in ``consumed``, in order."""
    out, previous = [], 0
    for lo, hi in normalize(consumed):
        out.append((previous, min(lo, total)))
        previous = max(previous, hi)
    out.append((previous, total))
    return normalize(out)


def take(ranges: Ranges, start: int, stop: int) -> Ranges:
    """Items ``[start, stop)`` of the sequence the ranges form (not normalized: order is kept)."""
    out, first = [], 0
    for lo, hi in ranges:
        a, b = max(start, first), min(stop, first + hi - lo)
        if a < b:
            out.append((lo + a - first, lo + b - first))
        first += hi - lo
    return tuple(out)


def rank_share(remaining: Ranges, world_size: int, rank: int) -> Ranges:
    """Rank ``rank``'s equal, contiguous run of the remaining positions.

    Raises:
        ReaderError: on a bad rank or world size.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1 \
            or not 0 <= rank < world_size:
        raise ReaderError(f"need 0 <= rank < world_size, got rank={rank!r}, world_size={world_size!r}")
    per_rank = length(remaining) // world_size
    return take(remaining, rank * per_rank, (rank + 1) * per_rank)


def worker_share(share: Ranges, num_workers: int, worker: int, *, unit: int = 1) -> Ranges:
    """DataLoader worker ``worker``'s near-equal, contiguous run of a rank's share, in whole ``unit``s
    (ready batches: only the last worker's run can end with a partial one)."""
    count = length(share)
    lo, hi = split_evenly(-(-count // unit), num_workers, worker)
    return take(share, min(lo * unit, count), min(hi * unit, count))


@dataclasses.dataclass(frozen=True)
class ReadState:
    """What one reader (a rank's DataLoader worker, or a whole rank) had read of an epoch.

    This is what ``TFRecordIterableDataset.state_dict()`` returns, as a dict of plain values.

    Attributes:
        read: what was read (datasets and weights, split, seed, shuffle): a state only resumes
            the same read.
        epoch: the epoch.
        consumed: positions of the epoch's order consumed before this reader started.
        world_size, rank: the ranks sharing what remained.
        num_workers, worker: the rank's DataLoader workers, and this one.
        yielded: examples this reader handed out since it started (examples, also when it hands out
            ready batches).
        unit: the workers split the rank's share in whole runs of this many (the ready batch size, or 1).
    """

    read: Mapping[str, Any]
    epoch: int
    consumed: Ranges
    world_size: int
    rank: int
    num_workers: int
    worker: int
    yielded: int
    unit: int = 1

    def stream(self, total: int) -> Ranges:
        """The positions this reader reads, in order."""
        share = rank_share(complement(total, self.consumed), self.world_size, self.rank)
        return worker_share(share, self.num_workers, self.worker, unit=self.unit)

    def to_dict(self) -> dict[str, Any]:
        return {_STATE_KEY: STATE_VERSION, "read": dict(self.read), "epoch": self.epoch,
                "consumed": [list(r) for r in self.consumed], "world_size": self.world_size, "rank": self.rank,
                "num_workers": self.num_workers, "worker": self.worker, "yielded": self.yielded, "unit": self.unit}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> "ReadState":
        """Parses a saved state (untrusted: a checkpoint file).

        Raises:
            ReaderError: when it is not a state of this reader, or of another version.
        """
        if not isinstance(state, Mapping) or state.get(_STATE_KEY) != STATE_VERSION:
            found = state.get(_STATE_KEY) if isinstance(state, Mapping) else type(state).__name__
            raise ReaderError(f"not a read state of version {STATE_VERSION} (found {found!r}): pass what "
                              "state_dict() returned, or a StatefulDataLoader's state_dict()")
        try:
            parsed = cls(dict(state["read"]), int(state["epoch"]), normalize(tuple(r) for r in state["consumed"]),
                         int(state["world_size"]), int(state["rank"]), int(state["num_workers"]),
                         int(state["worker"]), int(state["yielded"]), int(state.get("unit", 1)))
        except (KeyError, TypeError, ValueError) as err:
            raise ReaderError(f"malformed read state: {type(err).__name__}: {err}") from err
        if parsed.unit < 1:
            raise ReaderError(f"malformed read state: unit must be a positive int, got {parsed.unit}")
        return parsed


def loader_dataset_states(state: Mapping[str, Any]) -> list[Any]:
    """The dataset's state in each worker of a torchdata ``StatefulDataLoader``'s ``state_dict()`` (None where
    missing)."""
    if "_snapshot" in state:  # StatefulDataLoader with workers: each worker's dataset state
        snapshots = state["_snapshot"].get("_worker_snapshots", {})
        return [snapshot.get("dataset_state") for _, snapshot in sorted(snapshots.items())]
    return [state.get("dataset_state")]  # StatefulDataLoader without workers: the dataset's state itself


def worker_states(state: Mapping[str, Any]) -> list[ReadState]:
    """The reader states in ``state``: one of ours, or every worker's of a torchdata ``StatefulDataLoader``.

    Raises:
        ReaderError: when the state holds none, or a malformed one.
    """
    if _STATE_KEY in state:
        return [ReadState.from_dict(state)]
    found = loader_dataset_states(state)
    if not found or any(item is None for item in found):
        raise ReaderError("the DataLoader state holds no read state of this dataset (was it saved from a "
                          "StatefulDataLoader over a TFRecordIterableDataset, after its first batch?)")
    return [ReadState.from_dict(item) for item in found]


def check_same_read(saved: Mapping[str, Any], now: Mapping[str, Any]) -> None:
    """Checks that a saved state is of this read (datasets, weights, split, seed, shuffle).

    Raises:
        ReaderError: naming what differs.
    """
    differing = sorted(k for k in {*saved, *now} if saved.get(k) != now.get(k))
    if differing:
        raise ReaderError(f"the state was saved for another read: {', '.join(differing)} differ (saved "
                          f"{[saved.get(k) for k in differing]}, now {[now.get(k) for k in differing]})")


def consumed_after(states: Sequence[ReadState], total: int, *, read: Mapping[str, Any], epoch: int) -> Ranges:
    """Every position consumed once the readers of ``states`` stopped, on all ranks.

    ``states`` are all the DataLoader workers of one rank (or the one state of a rank read without
    workers). Other ranks are taken to have consumed as much (ranks advance together, as DDP steps them).

    Raises:
        ReaderError: when the states are of another read or epoch, or do not make up one rank.
    """
    first = states[0]
    check_same_read(first.read, read)
    workers = sorted(s.worker for s in states)
    if workers != list(range(first.num_workers)) or any(
            (s.read, s.epoch, s.consumed, s.world_size, s.num_workers, s.unit) !=
            (first.read, first.epoch, first.consumed, first.world_size, first.num_workers, first.unit)
            for s in states):
        raise ReaderError(f"need the states of all {first.num_workers} DataLoader workers of one rank, of one "
                          f"epoch; got workers {workers}: pass the whole loader state_dict()")
    if first.epoch != epoch:
        raise ReaderError(f"the state is of epoch {first.epoch}, the reader is at epoch {epoch}")
    consumed = list(first.consumed)
    for rank in range(first.world_size):
        for state in states:
            mine = dataclasses.replace(state, rank=rank).stream(total)
            if state.yielded > length(mine):
                raise ReaderError(f"worker {state.worker} yielded {state.yielded} examples of its {length(mine)}")
            consumed.extend(take(mine, 0, state.yielded))
    return normalize(consumed)


def consumed_by_start(total: int, *, world_size: int, start: int) -> Ranges:
    """Positions consumed when every rank has read the first ``start`` examples of its share.

    Raises:
        ReaderError: when ``start`` exceeds a rank's share.
    """
    everything = ((0, total),)
    per_rank = length(rank_share(everything, world_size, 0))
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= per_rank:
        raise ReaderError(f"start must be in [0, {per_rank}] (examples of each rank's epoch), got {start!r}")
    return normalize(r for rank in range(world_size) for r in take(rank_share(everything, world_size, rank), 0, start))

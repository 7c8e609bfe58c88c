"""``TFRecordIterableDataset(follow=True)``'s reading: each DataLoader worker of each rank follows its part.

Reader ``rank * num_workers + worker`` of ``world_size * num_workers`` takes every that-many-th new shard of each
commit (``reader.follow``), so the ranks and workers together read every new record exactly once. A worker's
``state_dict()`` is its ``FollowState``; a ``StatefulDataLoader`` saves and restores them with the same numbers of
workers and ranks (another number is refused: the parts would differ). docs/reading.md, "Following a dataset as it
grows".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch.utils.data

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.follow import FollowState
from beam_tfrecord.reader.follow_reader import Decoding, FollowReader, follow_reader
from beam_tfrecord.reader.order.resume import loader_dataset_states

_FOLLOW_KEY = "follow"


@dataclasses.dataclass(frozen=True)
class TorchFollow:
    """What a following dataset reads: the dataset, its split, the rank, and how to wait and decode.

    Attributes:
        path: the dataset (a root, a directory or a Beam prefix).
        split: the split name.
        rank, world_size: this rank and the number of ranks.
        poll_seconds, timeout_seconds: as ``read_numpy``'s ``follow_poll_seconds`` and ``follow_timeout_seconds``.
        decoding: how records are decoded.
    """

    path: str
    split: str
    rank: int
    world_size: int
    poll_seconds: float
    timeout_seconds: float | None
    decoding: Decoding
    states: dict[int, FollowState] = dataclasses.field(default_factory=dict)  # by part: where each resumes
    readers: list[FollowReader] = dataclasses.field(default_factory=list)  # this process's reader, once iterating

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for DataLoader workers without this process's reader (a generator pickles not)."""
        return {**self.__dict__, "readers": []}

    def iterate(self) -> Iterator[Any]:
        """This worker's part, resumed from its loaded state if any."""
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        part, parts = self.rank * num_workers + worker, self.world_size * num_workers
        loaded = self.states.get(part)
        if loaded is not None and loaded.parts != parts:
            raise ReaderError(f"the follow state is of {loaded.parts} readers (ranks x DataLoader workers), now "
                              f"{parts}: resume with as many")
        reader = follow_reader(self.path, split=self.split, num_workers=parts, worker_index=part, shuffle=False,
                               poll_seconds=self.poll_seconds, timeout_seconds=self.timeout_seconds, state=loaded,
                               decoding=self.decoding)
        self.readers[:] = [reader]
        return reader

    def state_dict(self) -> dict[str, Any]:
        """This worker's state: where its reader stands (or the loaded one, before it iterates)."""
        if self.readers:
            return {_FOLLOW_KEY: self.readers[0].state().to_dict()}
        return {_FOLLOW_KEY: [state.to_dict() for _, state in sorted(self.states.items())]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resumes from a worker's ``state_dict()``, or from a ``StatefulDataLoader``'s whole state (every worker's).

        Raises:
            ReaderError: the state holds no follow state.
        """
        found = _follow_states(state_dict)
        self.states.clear()
        self.states.update({state.part: state for state in found})


def _follow_states(state: Mapping[str, Any]) -> list[FollowState]:
    if _FOLLOW_KEY in state:
        saved = state[_FOLLOW_KEY]
        return [FollowState.from_dict(item) for item in (saved if isinstance(saved, list) else [saved])]
    found = loader_dataset_states(state)
    if not found or any(not isinstance(item, Mapping) or _FOLLOW_KEY not in item for item in found):
        raise ReaderError("the state holds no follow state (was it saved from a StatefulDataLoader over a "
                          "TFRecordIterableDataset(follow=True), after its first batch?)")
    return [state for item in found for state in _follow_states(item)]

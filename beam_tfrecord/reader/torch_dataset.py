"""A ``torch.utils.data.IterableDataset`` over a published dataset or a mixture (PyTorch is an optional extra).

A read resumes exactly with other numbers of workers or ranks. See docs/reading.md, "Mixing datasets, and
resuming an epoch exactly".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed
import torch.utils.data

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.decode.block_decode import Columns, num_rows, rebatch
from beam_tfrecord.reader.decode.numpy_decode import Example
from beam_tfrecord.reader.decode.ragged import Allocate
from beam_tfrecord.reader.follow import DEFAULT_FOLLOW_POLL_SECONDS
from beam_tfrecord.reader.follow_reader import Decoding, check_followable
from beam_tfrecord.reader.options import ImageDecoding, check_positive
from beam_tfrecord.reader.order.mixing import (
    DatasetPaths,
    EpochOrder,
    describe_read,
    epoch_takes,
    iter_columns,
    iter_examples,
    open_sources,
)
from beam_tfrecord.reader.order.resume import (
    ReadState,
    check_same_read,
    complement,
    consumed_after,
    consumed_by_start,
    length,
    rank_share,
    take,
    worker_states,
)
from beam_tfrecord.reader.torch_batches import WorkerBatch, shard_reference, tensors, worker_allocate
from beam_tfrecord.reader.torch_follow import TorchFollow
from beam_tfrecord.remote_reads.options import RemoteReads, reads_with_cache
from beam_tfrecord.storage.deadlines import deadlines_in_force


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if (rank is None) != (world_size is None):
        raise ReaderError(f"pass rank and world_size together, got rank={rank!r}, world_size={world_size!r}")
    if rank is not None and world_size is not None:
        return rank, world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class TFRecordIterableDataset(torch.utils.data.IterableDataset):
    """Examples of one dataset, or a weighted mixture, for one DDP rank, split between its DataLoader workers.

    ``len(dataset)`` is the rank's number of examples left in the epoch, the same on every rank.
    Call ``set_epoch(epoch)`` before each epoch (as with ``DistributedSampler``) to reshuffle.

    **Resume.** The epoch's order is fixed by the datasets, the split, ``seed``, the epoch and the
    shuffle options, whatever the number of ranks and workers (docs/reading.md, "Mixing datasets").
    ``state_dict()`` / ``load_state_dict()`` follow torchdata's ``Stateful`` protocol, so a
    ``StatefulDataLoader`` saves and restores the read with the loader (same worker count: each
    worker continues its own part). To resume with another number of DataLoader workers or of
    ranks, give the saved loader state to the *dataset* instead, before building the new loader::

        dataset.load_state_dict(old_loader_state)      # any rank's; any worker count before and after
        loader = StatefulDataLoader(dataset, batch_size=64, num_workers=3, collate_fn=collate)

    Exact: no example of the epoch is repeated or skipped, except that the last
    ``remaining % world_size`` of the epoch's order are left out so that ranks keep equal counts.
    Ranks are taken to have advanced together (DDP's lockstep), so one rank's state stands for all.

    Args:
        path: dataset directory (the one holding manifest.json), local or ``gs://``; or a mapping
            ``{path: weight}`` to mix datasets in proportion to their weights (the epoch ends when
            the first dataset is exhausted at its weight).
        split: split expression: ``"train"``, ``"train[:10%]"``, ``"train+validation"`` (a split name with
            ``follow``).
        rank: this process's rank; default from ``torch.distributed`` if initialized, else 0.
        world_size: number of ranks; default from ``torch.distributed`` if initialized, else 1.
        shuffle: shuffle each dataset, reproducibly from ``seed`` and the epoch (a seeded permutation
            of an ArrayRecord dataset; shuffled shards and windows of a TFRecord one).
        seed: seed of the shuffle and of the mixture's interleaving, the same on every rank.
        shuffle_buffer: records in a TFRecord shuffle window.
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        verify: check every record's CRCs.
        start: examples each rank already consumed in the first epoch read (the simple resume: exact
            when they were read in the rank's order, i.e. with at most one DataLoader worker;
            ``load_state_dict`` is exact with any).
        batch_size: yield ready batches of this many examples (the last of each epoch's read may be
            smaller) instead of single examples: use ``DataLoader(dataset, batch_size=None)``.
            Batches are then cut from whole decoded blocks inside the DataLoader workers, in shared memory,
            faster than collating examples (docs/performance.md, "Reading"). The workers split the rank's
            share in whole batches; a state still counts examples.
        ragged: with ``batch_size``, bytes, strings, encoded images and variable-length lists come as a
            ``RaggedBatch`` (one flat tensor and offsets, sent from workers without pickling); False: lists.
        cache_dir: a local directory to keep ``gs://`` shards in once read, so a later epoch reads
            them locally; shared safely by the DataLoader workers and the ranks of one machine.
        cache_limit: the most bytes ``cache_dir`` keeps (least recently used shards are removed).
        remote_reads: how each DataLoader worker fetches ``gs://`` shards (``RemoteReads``: connections, range
            size, bytes in flight); ``cache_dir`` and ``cache_limit`` given here take precedence over its own.
        follow: after what is published, wait for each next commit and yield its new records (``read_numpy``'s
            ``follow``): each of the ``world_size x num_workers`` readers takes every that-many-th new shard of
            each commit; no ``len()``, epochs or shuffle; ``state_dict()`` is each worker's ``FollowState``
            (resume with the same numbers of workers and ranks).
        follow_poll_seconds: with ``follow``, seconds between two looks for a new commit.
        follow_timeout_seconds: with ``follow``, the iteration ends after this long without a new commit.
    """

    def __init__(self, path: DatasetPaths, *, split: str = "train", rank: int | None = None,
                 world_size: int | None = None, shuffle: bool = False, seed: int = 0, shuffle_buffer: int = 10_000,
                 image_decoding: ImageDecoding | None = None, verify: bool = True, start: int = 0,
                 batch_size: int | None = None, ragged: bool = True, cache_dir: str | None = None,
                 cache_limit: int | None = None, remote_reads: RemoteReads | None = None, follow: bool = False,
                 follow_poll_seconds: float = DEFAULT_FOLLOW_POLL_SECONDS,
                 follow_timeout_seconds: float | None = None) -> None:
        super().__init__()
        check_positive("shuffle_buffer", shuffle_buffer)
        self.reads = reads_with_cache(remote_reads, cache_dir=cache_dir, cache_limit=cache_limit)
        if batch_size is not None:
            check_positive("batch_size", batch_size)
        self.batch_size = batch_size
        self.ragged = ragged
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        self._follow: TorchFollow | None = None
        if follow:  # the reading is ``torch_follow``'s: no epoch, no length, a state per worker
            check_followable(path, split, shuffle=shuffle)
            if start or batch_size is not None:
                raise ReaderError("follow=True yields examples from each commit's start: leave start and batch_size "
                                  "out (resume with load_state_dict; batch with the DataLoader)")
            self._follow = TorchFollow(str(path), split, self.rank, self.world_size, follow_poll_seconds,
                                       follow_timeout_seconds, Decoding(image_decoding, verify, self.reads))
            return
        with deadlines_in_force(self.reads.deadlines):
            self.sources = open_sources(path, split=split)
        self.total = sum(epoch_takes(self.sources))
        self.read = describe_read(self.sources, split=split, seed=seed, shuffle=shuffle, shuffle_buffer=shuffle_buffer)
        self.split = split
        self.shuffle = shuffle
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.image_decoding = image_decoding
        self.verify = verify
        self.epoch = 0
        self._consumed = consumed_by_start(self.total, world_size=self.world_size, start=start)
        self._own: ReadState | None = None  # a worker's own saved state (StatefulDataLoader, same workers)
        self._state: ReadState | None = None  # this process's reader, once iterating (``yielded`` kept apart)
        self._yielded = 0  # examples it handed out: a plain int, counted per example at no cost

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch, which (with the seed) decides the order; a new epoch starts from its beginning."""
        if epoch != self.epoch:
            self._consumed, self._own = (), None
        self.epoch = epoch

    def __len__(self) -> int:
        """The rank's examples left in the epoch; with ``batch_size``, its batches (whatever the number of workers)."""
        if self._follow is not None:
            raise TypeError("a following dataset has no length: it grows as commits are published")
        examples = length(rank_share(complement(self.total, self._consumed), self.world_size, self.rank))
        return examples if self.batch_size is None else -(-examples // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """Where this reader stands (torchdata's ``Stateful``): in a DataLoader worker, that worker's part."""
        if self._follow is not None:
            return self._follow.state_dict()
        if self._state is None:
            return self._reader_state(*_worker()).to_dict()
        return dataclasses.replace(self._state, yielded=self._yielded).to_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resumes from ``state_dict()``, or from a torchdata ``StatefulDataLoader``'s whole ``state_dict()``.

        Raises:
            ReaderError: when the state is of another read (datasets, weights, split, seed, shuffle),
                or holds only some of a rank's DataLoader workers.
        """
        if self._follow is not None:
            self._follow.load_state_dict(state_dict)
            return
        states = worker_states(state_dict)
        first = states[0]
        if len(states) == 1 and first.num_workers > 1:  # one worker's part, loaded in that worker
            check_same_read(first.read, self.read)
            self.epoch, self._consumed, self._own = first.epoch, first.consumed, first
            return
        self.epoch = first.epoch
        self._consumed = consumed_after(states, self.total, read=self.read, epoch=first.epoch)
        self._own = None

    def _reader_state(self, worker: int, num_workers: int) -> ReadState:
        return ReadState(self.read, self.epoch, self._consumed, self.world_size, self.rank, num_workers, worker, 0,
                         unit=self.batch_size or 1)

    def __iter__(self) -> Iterator[Example] | Iterator[dict[str, Any]]:
        if self._follow is not None:
            return self._follow.iterate()
        worker, num_workers = _worker()
        state = self._reader_state(worker, num_workers)
        skip = 0
        if self._own is not None:
            own = self._own
            if (own.world_size, own.rank, own.num_workers, own.worker, own.unit) != (
                    self.world_size, self.rank, num_workers, worker, state.unit):
                raise ReaderError(f"a state of DataLoader worker {own.worker} of {own.num_workers} (rank {own.rank} "
                                  f"of {own.world_size}, batches of {own.unit}) cannot resume worker {worker} of "
                                  f"{num_workers} (rank {self.rank} of {self.world_size}, batches of {state.unit}): "
                                  "give the whole loader state_dict() to dataset.load_state_dict() before building "
                                  "the new DataLoader")
            skip = own.yielded
        order = EpochOrder(self.sources, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle,
                           shuffle_buffer=self.shuffle_buffer, verify=self.verify, reads=self.reads)
        stream = state.stream(order.total)
        self._state, self._yielded = state, skip
        positions = take(stream, skip, length(stream))
        if self.batch_size is None:
            return self._count(iter_examples(order, positions, image_decoding=self.image_decoding))
        allocate_values = worker_allocate()
        blocks = iter_columns(order, positions, image_decoding=self.image_decoding, allocate_values=allocate_values,
                              batch_rows=self.batch_size)
        return self._count_batches(rebatch(blocks, self.batch_size, allocate_values), allocate_values)

    def _count(self, examples: Iterator[Example]) -> Iterator[Example]:
        """Yields the examples, keeping ``state_dict()`` at the count handed out (what a loader snapshots)."""
        for example in examples:
            self._yielded += 1
            yield example

    def _count_batches(self, batches: Iterator[Columns], allocate_values: Allocate) -> Iterator[dict[str, Any]]:
        """Yields ready batches as tensors (in a DataLoader worker, ``WorkerBatch``es: shards' bytes as references,
        other columns in reused shared memory); ``state_dict()`` still counts the examples handed out."""
        in_worker = torch.utils.data.get_worker_info() is not None
        refer = shard_reference(self.reads.cache_dir if self.reads.cache_limit is not None else None) \
            if in_worker else None
        for batch in batches:
            self._yielded += num_rows(batch)
            out = tensors(batch, ragged=self.ragged, allocate_values=allocate_values, refer=refer)
            yield WorkerBatch(out) if in_worker else out


def _worker() -> tuple[int, int]:
    """(this DataLoader worker, the number of workers): (0, 1) outside a worker process."""
    info = torch.utils.data.get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


def collate(examples: Sequence[Example]) -> dict[str, Any]:
    """Batches examples: equal-shape numeric arrays are stacked into tensors, anything else becomes a list.

    Variable-length features (and bytes) stay lists of per-example values; pad them as the model needs.
    """
    if not examples:
        return {}
    out: dict[str, Any] = {}
    for name in examples[0]:
        values = [example[name] for example in examples]
        first = values[0]
        if (isinstance(first, np.ndarray) and first.dtype != object
                and all(isinstance(v, np.ndarray) and v.shape == first.shape for v in values)):
            out[name] = torch.from_numpy(np.stack(values))
        else:
            out[name] = values
    return out

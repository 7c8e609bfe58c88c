"""A ``torch.utils.data.IterableDataset`` over a published dataset (PyTorch is an optional extra).

Work is split twice, both times by the manifest's per-shard record counts: first between DDP
ranks (every rank gets exactly the same number of examples, so no rank waits for another at the
end of an epoch), then between the DataLoader workers of a rank (near-equal runs, which together
are exactly that rank's examples). Examples are dicts of NumPy values (see ``numpy_decode``);
``collate`` turns a list of them into a batch of tensors.

On an ArrayRecord dataset, ``shuffle`` is a true global shuffle (``random_access``): each epoch
every rank takes its equal share of one seeded permutation of all the records, and the
DataLoader workers of a rank split that share into near-equal runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed
import torch.utils.data

from beam_tfrecord.dataset import open_dataset
from beam_tfrecord.errors import ReaderError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.reader.block_decode import BlockDecoder, Columns, rebatch
from beam_tfrecord.reader.numpy_decode import Example
from beam_tfrecord.reader.numpy_reader import (
    iter_columns,
    iter_examples,
    iter_global_columns,
    iter_global_shuffle,
    mix_seed,
    worker_share,
)
from beam_tfrecord.reader.options import ImageDecoding, check_positive
from beam_tfrecord.reader.read_plan import plan_read
from beam_tfrecord.reader.slicing import sub_range


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if (rank is None) != (world_size is None):
        raise ReaderError(f"pass rank and world_size together, got rank={rank!r}, world_size={world_size!r}")
    if rank is not None and world_size is not None:
        return rank, world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class TFRecordIterableDataset(torch.utils.data.IterableDataset):
    """Examples of a split expression for one DDP rank, split between its DataLoader workers.

    ``len(dataset)`` is the rank's number of examples per epoch, the same on every rank. Call
    ``set_epoch(epoch)`` before each epoch (as with ``DistributedSampler``) to reshuffle.

    Args:
        path: dataset directory (the one holding manifest.json), local or ``gs://``.
        split: split expression: ``"train"``, ``"train[:10%]"``, ``"train+validation"``.
        rank: this process's rank; default from ``torch.distributed`` if initialized, else 0.
        world_size: number of ranks; default from ``torch.distributed`` if initialized, else 1.
        shuffle: shuffle shard order and records, reproducibly from ``seed`` and the epoch (a true
            global shuffle on an ArrayRecord dataset).
        seed: shuffle seed, the same on every rank.
        shuffle_buffer: records held in each worker's shuffle buffer.
        image_decoding: decode ``Image`` features with Pillow; None keeps the encoded bytes.
        verify: check every record's CRCs.
        start: with a global shuffle, examples of this rank's epoch already consumed (to resume
            after them; exact when the DataLoader has at most one worker, whose order is the
            rank's order).
        batch_size: yield ready batches of this many examples (the last of each worker may be
            smaller) instead of single examples: use ``DataLoader(dataset, batch_size=None)``.
            Batches are then cut from whole decoded blocks inside the DataLoader workers, several
            times faster than collating examples; variable-length and bytes features are lists.
    """

    def __init__(self, path: str, *, split: str = "train", rank: int | None = None, world_size: int | None = None,
                 shuffle: bool = False, seed: int = 0, shuffle_buffer: int = 10_000,
                 image_decoding: ImageDecoding | None = None, verify: bool = True, start: int = 0,
                 batch_size: int | None = None) -> None:
        super().__init__()
        check_positive("shuffle_buffer", shuffle_buffer)
        if batch_size is not None:
            check_positive("batch_size", batch_size)
        self.batch_size = batch_size
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        dataset = open_dataset(path)
        self.global_shuffle = shuffle and shard_format(dataset.manifest.file_format).random_access
        if start and not self.global_shuffle:
            raise ReaderError("start (resume) is for the global shuffle of an array_record dataset")
        self.start = start
        # The global shuffle deals out every rank's records itself; otherwise each rank plans its own.
        self.all_ranks_plan = plan_read(path, split=split, dataset=dataset) if self.global_shuffle else None
        self.plan = plan_read(path, split=split, num_workers=self.world_size, worker_index=self.rank,
                              dataset=dataset)
        self.shuffle = shuffle
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.image_decoding = image_decoding
        self.verify = verify
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch, which (with the seed) decides the shuffle order."""
        self.epoch = epoch

    def __len__(self) -> int:
        """The rank's examples per epoch; with ``batch_size``, its batches (whatever the number of workers)."""
        examples = self.plan.num_records - self.start
        return examples if self.batch_size is None else -(-examples // self.batch_size)

    def __iter__(self) -> Iterator[Example] | Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if self.batch_size is not None:
            return (tensors(batch) for batch in self._column_batches(self.batch_size, worker, num_workers))
        return self._examples(worker, num_workers)

    def _column_batches(self, batch_size: int, worker: int, num_workers: int) -> Iterator[Columns]:
        """This worker's batches, as columns: cut from decoded blocks (shuffled examples are stacked)."""
        if self.all_ranks_plan is not None:
            return rebatch(iter_global_columns(self.all_ranks_plan, seed=self.seed, epoch=self.epoch, rank=self.rank,
                                               world_size=self.world_size, start=self.start,
                                               image_decoding=self.image_decoding, worker=worker,
                                               num_workers=num_workers, unit=batch_size), batch_size)
        if not self.shuffle:
            start, stop = worker_share(self.plan.num_records, num_workers, worker, unit=batch_size)
            return rebatch(iter_columns(self.plan, sub_range(self.plan.segments, start, stop),
                                        image_decoding=self.image_decoding, verify=self.verify), batch_size)
        decoder = BlockDecoder(self.plan.manifest.schema, image_decoding=self.image_decoding)
        examples = self._examples(worker, num_workers, unit=batch_size)
        return (decoder.columns(chunk) for chunk in iter(lambda: list(itertools.islice(examples, batch_size)), []))

    def _examples(self, worker: int, num_workers: int, unit: int = 1) -> Iterator[Example]:
        if self.all_ranks_plan is not None:
            return iter_global_shuffle(self.all_ranks_plan, seed=self.seed, epoch=self.epoch, rank=self.rank,
                                       world_size=self.world_size, start=self.start,
                                       image_decoding=self.image_decoding, worker=worker, num_workers=num_workers)
        start, stop = worker_share(self.plan.num_records, num_workers, worker, unit=unit)
        return iter_examples(self.plan, segments=sub_range(self.plan.segments, start, stop), shuffle=self.shuffle,
                             seed=mix_seed(self.seed, self.epoch, self.rank, worker),
                             shuffle_buffer=self.shuffle_buffer, image_decoding=self.image_decoding,
                             verify=self.verify)


def tensors(columns: Columns) -> dict[str, Any]:
    """A batch's columns as ``collate`` gives them: numeric arrays as tensors, anything else as lists."""
    return {name: torch.from_numpy(column) if isinstance(column, np.ndarray) and column.dtype != object
            else list(column) for name, column in columns.items()}


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

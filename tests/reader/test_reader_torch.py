"""TFRecordIterableDataset: split by DDP rank and DataLoader worker, equal counts, seeded shuffle, collate."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.order.mixing import num_examples
from beam_tfrecord.reader.torch_batches import RaggedBatch
from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset, collate


def _keys(loader) -> list[bytes]:
    return [key for batch in loader for key in batch["key"]]


def test_all_types_round_trip(all_types, expected_all_types, assert_example):
    dataset = TFRecordIterableDataset(all_types.path, split="train+test")
    examples = list(dataset)
    assert len(examples) == len(all_types.samples) == len(dataset)
    for example in examples:
        assert_example(example, expected_all_types(all_types.samples[example["key"].decode()]))


def test_sequences_round_trip(sequences, expected_sequence, assert_example):
    for example in TFRecordIterableDataset(sequences.path):
        assert_example(example, expected_sequence(sequences.samples[example["key"].decode()]))


def test_collate_stacks_fixed_shapes_and_lists_the_rest(all_types):
    loader = DataLoader(TFRecordIterableDataset(all_types.path), batch_size=8, collate_fn=collate)
    batch = next(iter(loader))
    assert batch["t_f64"].dtype == torch.float64 and tuple(batch["t_f64"].shape) == (8, 2, 2)
    assert batch["t_bool"].dtype == torch.bool and batch["label"].dtype == torch.int64
    assert batch["fixed"].shape == (8, 3) and batch["i"].shape == (8,)
    assert isinstance(batch["var"], list) and isinstance(batch["key"], list) and len(batch["img"]) == 8


@pytest.mark.parametrize("world_size, num_workers", [(1, 0), (1, 2), (2, 2), (3, 1), (4, 2)])
def test_ranks_get_equal_counts_across_dataloader_workers(counted, world_size, num_workers):
    per_rank = []
    for rank in range(world_size):
        dataset = TFRecordIterableDataset(counted.path, split="validation", rank=rank, world_size=world_size)
        loader = DataLoader(dataset, batch_size=16, num_workers=num_workers, collate_fn=collate)
        keys = _keys(loader)
        assert len(keys) == len(dataset) == len(set(keys))
        per_rank.append(keys)
    assert {len(k) for k in per_rank} == {num_examples(counted.path, split="validation") // world_size}
    flat = [k for keys in per_rank for k in keys]
    assert len(flat) == len(set(flat))


def test_shuffle_follows_seed_and_epoch(counted):
    dataset = TFRecordIterableDataset(counted.path, split="test", shuffle=True, seed=5, shuffle_buffer=32)

    def keys(epoch):
        dataset.set_epoch(epoch)
        return _keys(DataLoader(dataset, batch_size=10, num_workers=2, collate_fn=collate))

    first = keys(0)
    assert first == keys(0) and first != keys(1)
    assert sorted(first) == sorted(e["key"] for e in TFRecordIterableDataset(counted.path, split="test"))


def test_rank_without_world_size_is_rejected(counted):
    with pytest.raises(ReaderError, match="pass rank and world_size together, got rank=1, world_size=None"):
        TFRecordIterableDataset(counted.path, rank=1)


def test_tensor_values_are_writable_numpy(all_types):
    example = next(iter(TFRecordIterableDataset(all_types.path)))
    assert example["t_u8"].flags.writeable and isinstance(example["t_u8"], np.ndarray)


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_ready_batches_are_whole_batches_of_the_same_examples(counted, num_workers, shuffle):
    dataset = TFRecordIterableDataset(counted.path, split="train", batch_size=64, shuffle=shuffle, seed=2,
                                      shuffle_buffer=50)
    batches = list(DataLoader(dataset, batch_size=None, num_workers=num_workers))
    assert len(batches) == len(dataset) == -(-num_examples(counted.path) // 64)
    assert [len(b["i"]) for b in batches[:-1]] == [64] * (len(batches) - 1)  # only the epoch's last is short
    assert batches[0]["i"].dtype == torch.int64 and isinstance(batches[0]["key"], RaggedBatch)
    keys = [k for b in batches for k in b["key"]]
    assert sorted(keys) == sorted(e["key"] for e in TFRecordIterableDataset(counted.path, split="train"))
    assert [int(i) for b in batches for i in b["i"]] == [int(k.decode()[1:]) for k in keys]  # rows stay together


def test_ready_batch_size_must_be_positive(counted):
    with pytest.raises(ReaderError, match="batch_size must be a positive int, got 0"):
        TFRecordIterableDataset(counted.path, batch_size=0)

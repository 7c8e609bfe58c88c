"""Ragged batches: bytes and variable-length lists as flat values plus offsets, the same items as per example."""

import numpy as np
import pytest

from beam_tfrecord.reader.decode.ragged import RaggedArray
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.options import ImageDecoding

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader

from beam_tfrecord.reader.torch_batches import RaggedBatch
from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset


def test_ragged_array_takes_and_joins_views():
    items = [b"ab", b"", b"cde", b"f"]
    whole = RaggedArray.of(items)
    assert whole.offsets.tolist() == [0, 2, 2, 5, 6] and whole.values.tobytes() == b"abcdef"
    part = whole[1:3]
    assert part.offsets.tolist() == [0, 0, 3] and np.shares_memory(part.values, whole.values)
    assert list(part) == [b"", b"cde"] and bytes(part.view(1)) == b"cde" and part[-1] == b"cde"
    with pytest.raises(IndexError, match="item 2 of a ragged batch of 2"):
        part.view(2)
    joined = RaggedArray.concat([whole[:2], whole[2:]])
    assert list(joined) == items and joined.offsets.tolist() == whole.offsets.tolist()
    numbers = RaggedArray.of([np.array([1, 2], np.int64), np.array([], np.int64)], dtype=np.int64, is_bytes=False)
    assert [n.tolist() for n in numbers] == [[1, 2], []] and numbers.lengths().tolist() == [2, 0]


def test_ready_batches_hold_the_same_items_as_examples(all_types):
    examples = list(TFRecordIterableDataset(all_types.path, split="train+test"))
    batches = list(TFRecordIterableDataset(all_types.path, split="train+test", batch_size=8))
    keys, var = batches[0]["key"], batches[0]["var"]
    assert isinstance(keys, RaggedBatch) and isinstance(var, RaggedBatch) and isinstance(batches[0]["img"], RaggedBatch)
    assert keys.values.dtype == torch.uint8 and var.values.dtype == torch.int64 and len(keys) == 8
    assert keys[-1] == keys[7] == bytes(keys.view(-1))
    assert isinstance(batches[0]["var_s"], list)  # lists of bytes per example stay lists
    assert [k for b in batches for k in b["key"]] == [e["key"] for e in examples]
    assert [bytes(b["b"].view(i)) for b in batches for i in range(len(b["b"]))] == [e["b"] for e in examples]
    assert [v.tolist() for b in batches for v in b["var"]] == [e["var"].tolist() for e in examples]
    decoded = list(TFRecordIterableDataset(all_types.path, split="train+test", image_decoding=ImageDecoding()))
    assert all(torch.equal(b["img"].image(i), torch.from_numpy(e["img"]))
               for b, start in zip(batches, range(0, len(decoded), 8)) for i, e in enumerate(decoded[start:start + 8]))
    listed = next(iter(TFRecordIterableDataset(all_types.path, split="train+test", batch_size=8, ragged=False)))
    assert listed["key"] == keys.tolist() and [v.tolist() for v in listed["var"]] == [v.tolist() for v in var]


def test_ragged_batches_come_from_workers_in_shared_memory(counted):
    dataset = TFRecordIterableDataset(counted.path, split="train", batch_size=64)
    batches = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert all(b["key"].values.is_shared() and b["key"].offsets.is_shared() and b["i"].is_shared() for b in batches)
    keys = [k for b in batches for k in b["key"]]
    assert sorted(keys) == sorted(e["key"] for e in read_numpy(counted.path, split="train"))
    assert [int(i) for b in batches for i in b["i"]] == [int(k.decode()[1:]) for k in keys]


def test_numpy_batches_are_ragged_arrays(all_types):
    examples = list(read_numpy(all_types.path, split="train+test"))
    batches = list(read_numpy(all_types.path, split="train+test", batch_size=5))
    assert [len(b["key"]) for b in batches] == [5] * (len(examples) // 5) + ([len(examples) % 5] if len(examples) % 5
                                                                              else [])
    assert isinstance(batches[0]["key"], RaggedArray) and batches[0]["i"].shape == (5,)
    assert [k for b in batches for k in b["key"]] == [e["key"] for e in examples]
    assert [v.tolist() for b in batches for v in b["var"]] == [e["var"].tolist() for e in examples]

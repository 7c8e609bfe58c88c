"""Ragged batches: bytes and variable-length lists as flat values plus offsets, the same items as per example."""

import os

import numpy as np
import pytest

from beam_tfrecord.dataset import load_manifest, shard_paths
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


def test_ragged_batches_come_from_workers_as_references_to_their_shard(counted):
    dataset = TFRecordIterableDataset(counted.path, split="train", batch_size=64)
    batches = list(DataLoader(dataset, batch_size=None, num_workers=2))
    # Bytes of one shard: the shard mapped by the main process; of two: packed (small: pickled with the batch).
    assert all(b["key"].file is not None and len(b["key"].values) == os.path.getsize(b["key"].file.path)
               if b["key"].starts is not None else not b["key"].values.is_shared() for b in batches)
    assert any(b["key"].file is not None for b in batches) and not any(b["i"].is_shared() for b in batches)
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


def test_mapped_items_are_views_of_the_whole_buffer_joined_without_a_copy():
    root = np.frombuffer(b"..ab.cde..fg", dtype=np.uint8)
    first = RaggedArray.mapped(root[2:8], np.array([0, 3]), np.array([2, 3]))  # a window, as a block's
    second = RaggedArray.mapped(root[8:], np.array([2]), np.array([2]))
    assert first.values is root and first.starts.tolist() == [2, 5] and list(first) == [b"ab", b"cde"]
    joined = RaggedArray.concat([first[1:], second])
    assert joined.values is root and list(joined) == [b"cde", b"fg"] and joined.offsets.tolist() == [0, 3, 5]
    assert bytes(joined.view(-1)) == b"fg" and np.shares_memory(np.asarray(joined.view(0)), root)
    packed = joined.packed()
    assert packed.starts is None and packed.values.tobytes() == b"cdefg" and list(packed) == list(joined)
    other = RaggedArray.mapped(np.frombuffer(b"xyz", dtype=np.uint8), np.array([1]), np.array([2]))
    mixed = RaggedArray.concat([first, other])  # two buffers: packed into one
    assert mixed.starts is None and mixed.values.tobytes() == b"abcdeyz" and list(mixed) == [b"ab", b"cde", b"yz"]


def test_batches_at_0_workers_are_views_of_the_mapped_shard(counted):
    batches = list(TFRecordIterableDataset(counted.path, split="train", batch_size=64))
    keys = batches[0]["key"]
    assert keys.starts is not None and len(keys.values) > keys.lengths().sum()  # the shard, not a copy
    shards = {os.path.getsize(f) for f in shard_paths(counted.path, load_manifest(counted.path), "train")}
    mapped = [b["key"] for b in batches if b["key"].starts is not None]  # those spanning two shards are packed
    assert len(keys.values) in shards and all(len(k.values) in shards for k in mapped) and len(mapped) >= 4
    assert [k for b in batches for k in b["key"]] == [e["key"] for e in read_numpy(counted.path, split="train")]
    pinned = keys.to("cpu")
    assert pinned.starts is None and pinned.values.numpy().tobytes() == b"".join(keys) and list(pinned) == list(keys)
    assert [bytes(keys.view(i)) for i in range(len(keys))] == keys.tolist()


def test_length_crcs_of_distinct_lengths_are_checked_each():
    from beam_tfrecord.core.blocks import split_frames
    from beam_tfrecord.core.framing import frame
    from beam_tfrecord.errors import CorruptShardError

    # Every length distinct, one past the table of known lengths' CRCs (1 << 16): each stored length is checked.
    records = [b"x" * n for n in range(1, 9)] + [b"y" * 70_000, b"z"]
    stream = bytes(b"".join(frame(r) for r in records))
    starts = np.cumsum([0] + [len(frame(r)) for r in records])
    for _ in range(2):  # the second time with the lengths' CRCs known
        block, used = split_frames(np.frombuffer(stream, dtype=np.uint8), name="s")
        assert [block.record(i) for i in range(len(block))] == records and used == len(stream)
    for record, at, reason in [(2, 8, "length CRC mismatch"), (8, 8, "length CRC mismatch"),
                               (8, 12 + 69_999, "data CRC mismatch"), (3, 12, "data CRC mismatch")]:
        damaged = bytearray(stream)
        damaged[starts[record] + at] ^= 1
        with pytest.raises(CorruptShardError) as info:
            split_frames(np.frombuffer(bytes(damaged), dtype=np.uint8), name="s")
        assert (info.value.offset, info.value.reason) == (starts[record], reason)


def test_decoded_image_batches_fill_one_buffer_each_and_cross_from_workers_in_shared_memory(jpegs):
    decoding = ImageDecoding(fast_jpeg=False)
    examples = list(TFRecordIterableDataset(jpegs, image_decoding=decoding))
    assert len(shard_paths(jpegs, load_manifest(jpegs), "train")) >= 3
    for workers in (0, 2):
        batches = list(DataLoader(TFRecordIterableDataset(jpegs, batch_size=16, image_decoding=decoding),
                                  batch_size=None, num_workers=workers))
        if workers:  # worker 0 reads the first two batches, worker 1 the last; the loader takes them in turn
            assert [len(b["image"]) for b in batches] == [16, 8, 16]
            batches = [batches[0], batches[2], batches[1]]
        assert all(torch.equal(image, torch.from_numpy(e["image"])) and int(label) == e["label"]
                   for image, label, e in zip(torch.cat([b["image"] for b in batches]),
                                              torch.cat([b["label"] for b in batches]), examples, strict=True))
        # Pieces of several shards in one batch are rows of the batch's own buffer, not views of a block's, and
        # not copies; from a worker, a batch this small (12 KB) is pickled with it (larger ones: slots).
        assert all(b["image"].untyped_storage().nbytes() == len(b["image"]) * 16 * 16 * 3 for b in batches)
        assert not any(b["image"].is_shared() for b in batches)
    numpy_batches = list(read_numpy(jpegs, batch_size=16, image_decoding=decoding))
    assert np.array_equal(np.concatenate([b["image"] for b in numpy_batches]), np.stack([e["image"] for e in examples]))

"""Batches from DataLoader workers: a shard's bytes as a reference the main process maps, other columns in reused
shared-memory slots; the same bytes as at 0 workers, a held batch never overwritten, a changed shard named."""

import os
import re
import shutil

import pytest

from beam_tfrecord.dataset import load_manifest, shard_paths
from beam_tfrecord.errors import ShardChangedError
from beam_tfrecord.reader.options import ImageDecoding

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader

from beam_tfrecord.reader import torch_slots
from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset


def _contents(batch: dict) -> dict:
    """A batch's columns as bytes and lists, for exact comparison."""
    return {name: (bytes(b"".join(value)), value.lengths().tolist()) if hasattr(value, "lengths")
            else (value.numpy().tobytes(), tuple(value.shape), str(value.dtype)) for name, value in batch.items()}


@pytest.mark.parametrize("slots_only", [False, True])
def test_batches_from_two_workers_are_those_of_0_workers_byte_for_byte(counted, monkeypatch, slots_only):
    if slots_only:  # every column, however small, goes through the slots (else small ones are pickled)
        monkeypatch.setattr(torch_slots, "SMALL_BYTES", 0)
    dataset = TFRecordIterableDataset(counted.path, split="train", batch_size=48)
    alone = list(DataLoader(dataset, batch_size=None, num_workers=0))
    pools = set(torch_slots._received)
    shared = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert len(set(torch_slots._received) - pools) == (2 if slots_only else 0)  # each worker's slots, mapped here
    records = sorted((k, int(i)) for b in shared for k, i in zip(b["key"], b["i"], strict=True))
    assert records == sorted((k, int(i)) for b in alone for k, i in zip(b["key"], b["i"], strict=True))
    assert len(records) == 727 and len([b for b in shared if len(b["key"]) != 48]) <= 2  # the workers' last
    shards = {os.path.realpath(p): os.path.getsize(p)
              for p in shard_paths(counted.path, load_manifest(counted.path), "train")}
    referred = [b["key"] for b in shared if b["key"].file is not None]  # the rest span two shards: packed
    assert len(referred) >= 8 and all(shards[k.file.path] == k.file.size == len(k.values) for k in referred)
    assert all(b["key"].starts is None for b in shared if b["key"].file is None)
    assert not any(b["i"].is_shared() for b in shared)  # pickled with the batch, or a slot: no fresh segments


def test_decoded_batches_from_two_workers_in_slots_are_those_of_0_workers(jpegs, monkeypatch):
    monkeypatch.setattr(torch_slots, "SMALL_BYTES", 4096)  # a batch of 8 images of 16x16 is 6 KB: in a slot
    decoding = ImageDecoding(fast_jpeg=False)
    dataset = TFRecordIterableDataset(jpegs, batch_size=8, image_decoding=decoding)
    alone = list(DataLoader(dataset, batch_size=None, num_workers=0))
    shared = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert [b["image"].is_shared() for b in shared] == [False] * 5  # slots are mapped once, not fresh tensors
    order = sorted(range(5), key=lambda i: shared[i]["image"].numpy().tobytes())
    expected = sorted(range(5), key=lambda i: alone[i]["image"].numpy().tobytes())
    assert [_contents(shared[i]) for i in order] == [_contents(alone[i]) for i in expected]


def test_a_held_batch_stays_intact_while_its_worker_reuses_slots(jpegs, monkeypatch):
    monkeypatch.setattr(torch_slots, "SMALL_BYTES", 1024)  # each batch's 2 decoded images (1.5 KB): a slot
    dataset = TFRecordIterableDataset(jpegs, batch_size=2, image_decoding=ImageDecoding(fast_jpeg=False))
    expected = [_contents(b) for b in DataLoader(dataset, batch_size=None, num_workers=0)]
    loader = iter(DataLoader(dataset, batch_size=None, num_workers=1))
    held = next(loader)
    held_at = held["image"].data_ptr()
    starts, count = set(), 1
    for batch in loader:  # each dropped at once: its slot goes back to the worker
        image = batch["image"]
        assert not image.is_shared() and (image.data_ptr() + image.nbytes <= held_at or image.data_ptr() >= held_at
                                          + held["image"].nbytes)  # from a slot, never over the held batch
        assert _contents(batch) == expected[count]
        starts.add(image.data_ptr())
        count += 1
    assert count == len(expected) == 20 and len(starts) <= 7  # 19 batches in at most 7 other slots...
    assert _contents(held) == expected[0]  # ...and the held batch is as it came


@pytest.mark.parametrize("change", ["touched", "replaced"])
def test_a_shard_changed_after_a_worker_read_it_is_named(damaged_copy, change):
    root, path, _ = damaged_copy
    loader = iter(DataLoader(TFRecordIterableDataset(root, split="test", batch_size=16), batch_size=None,
                             num_workers=1))
    first = next(loader)
    assert first["key"].file is not None and first["key"].file.path == os.path.realpath(path)
    read = os.stat(path)
    if change == "touched":  # same bytes, same file, another mtime
        os.utime(path, ns=(read.st_atime_ns, read.st_mtime_ns + 1_000_000_000))
    else:  # same bytes and mtime, another file renamed over it (as writers publish)
        shutil.copy2(path, path + ".new")
        os.replace(path + ".new", path)
    now = os.stat(path)
    assert (now.st_mtime_ns, now.st_ino) != (read.st_mtime_ns, read.st_ino)
    message = (f"shard '{os.path.realpath(path)}' changed after a DataLoader worker read it, before the main process "
               f"took its batch: read as {read.st_size} bytes, mtime_ns {read.st_mtime_ns}, inode {read.st_ino}, "
               f"now {now.st_size} bytes, mtime_ns {now.st_mtime_ns}, inode {now.st_ino}")
    with pytest.raises(ShardChangedError, match=re.escape(message)):
        next(loader)

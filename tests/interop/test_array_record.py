"""--file_format array_record: the same shards as TFRecord, random access, and a true global shuffle."""

from __future__ import annotations

import os

import grain
import pytest
import torch.utils.data
from array_record.python.array_record_module import ArrayRecordReader
from fork_server import FORK_SERVER  # this process used ArrayRecord: no forked workers

from beam_tfrecord import load_manifest, read_numpy, verify_dataset
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.core.proto import Example
from beam_tfrecord.errors import CorruptShardError, ReaderError
from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset


def _tfrecord_payloads(directory: str, filename: str) -> list[bytes]:
    with open(os.path.join(directory, filename), "rb") as handle:
        return list(iter_records(handle, name=filename))


def test_same_records_in_the_same_shards_as_tfrecord(tfrecord_dataset, array_record_dataset):
    tf_manifest, ar_manifest = load_manifest(tfrecord_dataset), load_manifest(array_record_dataset)
    assert ar_manifest.file_format.value == "array_record" and len(ar_manifest.shards) >= 4
    for tf_shard, ar_shard in zip(tf_manifest.shards, ar_manifest.shards, strict=True):
        assert ar_shard.filename == tf_shard.filename.replace(".tfrecord-", ".array_record-")
        assert (ar_shard.num_records, ar_shard.num_record_bytes) == (tf_shard.num_records, tf_shard.num_record_bytes)
        reader = ArrayRecordReader(os.path.join(array_record_dataset, ar_shard.filename))  # the package itself
        assert reader.read_all() == _tfrecord_payloads(tfrecord_dataset, tf_shard.filename)
        last = ar_shard.num_records - 1
        assert reader.read([last, 0]) == [reader.read_all()[last], reader.read_all()[0]]  # random access
    assert verify_dataset(array_record_dataset).num_records == tf_manifest.num_written


def test_grain_reads_the_shards_with_a_global_shuffle(tfrecord_dataset, array_record_dataset):
    manifest = load_manifest(array_record_dataset)
    paths = [os.path.join(array_record_dataset, s.filename) for s in manifest.split("train").shards]
    source = grain.sources.ArrayRecordDataSource(paths)
    expected = [r for s in load_manifest(tfrecord_dataset).split("train").shards
                for r in _tfrecord_payloads(tfrecord_dataset, s.filename)]
    assert len(source) == len(expected) and [source[i] for i in range(len(source))] == expected
    shuffled = list(grain.MapDataset.source(source).shuffle(seed=3).map(
        lambda r: Example.FromString(r).features.feature["count"].int64_list.value[0]))
    counts = [Example.FromString(r).features.feature["count"].int64_list.value[0] for r in expected]
    assert sorted(shuffled) == sorted(counts) and shuffled != counts


def _keys(examples) -> list[tuple[int, str]]:
    return [(int(e["count"]), e["caption"].decode()) for e in examples]


def test_numpy_global_shuffle_is_seeded_equal_per_rank_and_resumable(array_record_dataset):
    everything = sorted(_keys(read_numpy(array_record_dataset, split="train")))
    ranks = [_keys(read_numpy(array_record_dataset, split="train", shuffle=True, seed=5, num_workers=3,
                              worker_index=r)) for r in range(3)]
    per_rank = len(everything) // 3
    assert [len(r) for r in ranks] == [per_rank] * 3
    assert len(set().union(*map(set, ranks))) == 3 * per_rank and set().union(*map(set, ranks)) <= set(everything)
    again = _keys(read_numpy(array_record_dataset, split="train", shuffle=True, seed=5, num_workers=3, worker_index=1))
    assert again == ranks[1]
    next_epoch = _keys(read_numpy(array_record_dataset, split="train", shuffle=True, seed=5, epoch=1, num_workers=3,
                                  worker_index=1))
    assert next_epoch != ranks[1]
    # Not a shard-order shuffle: the first ten examples come from more than one shard.
    whole = _keys(read_numpy(array_record_dataset, split="train", shuffle=True, seed=5))
    ordered = _keys(read_numpy(array_record_dataset, split="train"))
    per_shard = load_manifest(array_record_dataset).split("train").shards[0].num_records
    shard_of = {key: i // per_shard for i, key in enumerate(ordered)}
    assert len({shard_of[k] for k in whole[:10]}) > 1
    resumed = _keys(read_numpy(array_record_dataset, split="train", shuffle=True, seed=5, num_workers=3,
                               worker_index=1, start=7))
    assert resumed == ranks[1][7:]


def test_torch_dataloader_workers_split_the_rank_share(array_record_dataset):
    ranks = []
    for rank in range(2):
        dataset = TFRecordIterableDataset(array_record_dataset, split="train[:80%]", shuffle=True, seed=9,
                                          rank=rank, world_size=2)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                             multiprocessing_context=FORK_SERVER)
        got = _keys(loader)
        assert len(got) == len(dataset)
        expected = _keys(read_numpy(array_record_dataset, split="train[:80%]", shuffle=True, seed=9,
                                    num_workers=2, worker_index=rank))
        assert sorted(got) == sorted(expected)
        ranks.append(set(got))
    assert not ranks[0] & ranks[1]


def test_a_worker_forked_after_this_process_read_array_record_is_refused_with_the_remedy(array_record_dataset):
    # riegeli's cleaner thread does not survive a fork: a typed error names the way out, not a crash now and then.
    assert read_numpy(array_record_dataset, split="train").__next__()  # riegeli runs in this process now
    loader = torch.utils.data.DataLoader(TFRecordIterableDataset(array_record_dataset, split="train"), batch_size=None,
                                         num_workers=1, multiprocessing_context="fork")
    with pytest.raises(ReaderError, match=rf"this process was forked from process {os.getpid()} after that one had "
                                          r"read or written ArrayRecord.*multiprocessing_context='forkserver'"):
        next(iter(loader))


def test_random_access_refuses_tfrecord_shards(tfrecord_dataset):
    from beam_tfrecord.reader.order.random_access import RandomAccessRecords
    from beam_tfrecord.reader.order.read_plan import plan_read

    with pytest.raises(ReaderError, match="random access needs array_record shards"):
        RandomAccessRecords(plan_read(tfrecord_dataset))


def test_a_damaged_array_record_shard_is_a_corrupt_shard_error(tmp_path, array_record_dataset):
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(array_record_dataset, copy)
    shard = load_manifest(copy).shards[1]
    path = os.path.join(copy, shard.filename)
    with open(path, "r+b") as handle:
        handle.seek(200)
        byte = handle.read(1)[0]
        handle.seek(200)
        handle.write(bytes([byte ^ 0xFF]))
    with pytest.raises(CorruptShardError, match=shard.filename):
        verify_dataset(copy)


@pytest.mark.parametrize("dataset", ["tfrecord_dataset", "array_record_dataset"])
def test_verify_names_a_missing_shard_as_missing(tmp_path, request, dataset):
    import shutil

    from beam_tfrecord.errors import MissingShardError

    copy = str(tmp_path / "copy")
    shutil.copytree(request.getfixturevalue(dataset), copy)
    shard = load_manifest(copy).shards[2]
    os.remove(os.path.join(copy, shard.filename))
    with pytest.raises(MissingShardError, match=f"{shard.filename}'?: listed in the manifest but missing"):
        verify_dataset(copy)

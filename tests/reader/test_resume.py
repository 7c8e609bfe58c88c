"""Exact, elastic resume: restarted with other DataLoader worker counts or world sizes, an epoch reads every
example once (real DataLoader worker processes, torchdata's StatefulDataLoader)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from fork_server import FORK_SERVER as WORKERS  # this process used ArrayRecord: no forked workers
from torch.utils.data import DataLoader

from beam_tfrecord.errors import ReaderError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.reader.order.resume import rank_share
from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset, collate

BATCH = 8


def _loader(dataset, num_workers: int):
    return stateful.StatefulDataLoader(dataset, batch_size=BATCH, num_workers=num_workers, collate_fn=collate,
                                      multiprocessing_context=WORKERS if num_workers else None)


def _consume(dataset, num_workers: int, batches: int) -> tuple[list[bytes], dict]:
    """Keys of the first ``batches`` batches, and the loader's state after them."""
    loader = _loader(dataset, num_workers)
    keys: list[bytes] = []
    for batch in loader:
        keys.extend(batch["key"])
        if len(keys) == batches * BATCH:
            break
    return keys, loader.state_dict()


def _all(dataset, num_workers: int) -> list[bytes]:
    return [key for batch in _loader(dataset, num_workers) for key in batch["key"]]


@pytest.fixture
def reads(counted, keyed_a, keyed_r):
    return {"tfrecord": (counted.path, {"split": "train"}),
            "mixture": ({keyed_a.path: 0.5, keyed_r.path: 0.5}, {}),
            "array_record": (keyed_r.path, {})}


@pytest.mark.parametrize("read, before, after, batches", [
    pytest.param("tfrecord", 1, 3, 7, id="tfrecord-1-to-3-workers"),
    pytest.param("mixture", 2, 1, 5, id="mixture-2-to-1-workers"),
    pytest.param("array_record", 0, 2, 3, id="array_record-0-to-2-workers"),
])
def test_resume_with_another_worker_count_reads_the_rest_of_the_epoch(reads, read, before, after, batches):
    path, options = reads[read]

    def dataset():
        data = TFRecordIterableDataset(path, shuffle=True, seed=4, shuffle_buffer=64, **options)
        data.set_epoch(2)
        return data

    uninterrupted = _all(dataset(), before)
    consumed, state = _consume(dataset(), before, batches)
    resumed = dataset()
    resumed.load_state_dict(state)
    assert len(resumed) == len(uninterrupted) - len(consumed)
    rest = _all(resumed, after)
    assert len(consumed + rest) == len(set(consumed + rest)) and sorted(consumed + rest) == sorted(uninterrupted)


def test_world_size_2_to_3_reads_the_rest_of_the_epoch(keyed_a, keyed_r):
    mixture = {keyed_a.path: 0.5, keyed_r.path: 0.5}  # 300 examples an epoch

    def rank(r: int, world_size: int) -> TFRecordIterableDataset:
        return TFRecordIterableDataset(mixture, shuffle=True, seed=8, rank=r, world_size=world_size)

    uninterrupted = [key for r in range(2) for key in _all(rank(r, 2), 2)]
    assert len(uninterrupted) == 300
    # Both ranks step together (DDP): 6 batches of 8 each, so 300 - 96 = 204 remain for 3 ranks (no remainder).
    saved = [_consume(rank(r, 2), 2, 6) for r in range(2)]
    consumed = [key for keys, _ in saved for key in keys]
    rest = []
    for r in range(3):
        resumed = rank(r, 3)
        resumed.load_state_dict(saved[r % 2][1])  # any rank's state stands for all
        assert len(resumed) == 68
        rest.extend(_all(resumed, 1 + r % 2))
    assert len(consumed + rest) == len(set(consumed + rest)) and sorted(consumed + rest) == sorted(uninterrupted)


def test_stateful_dataloader_resumes_its_own_workers_in_the_same_order(keyed_a, keyed_r):
    def dataset():
        return TFRecordIterableDataset({keyed_a.path: 0.5, keyed_r.path: 0.5}, shuffle=True, seed=1)

    uninterrupted = _all(dataset(), 2)
    consumed, state = _consume(dataset(), 2, 5)
    loader = _loader(dataset(), 2)
    loader.load_state_dict(state)
    assert consumed + [key for batch in loader for key in batch["key"]] == uninterrupted


@pytest.mark.parametrize("world_size", [1, 3])
def test_start_skips_what_each_rank_consumed(counted, world_size):
    for r in range(world_size):
        def dataset(start: int, rank: int = r) -> TFRecordIterableDataset:
            return TFRecordIterableDataset(counted.path, split="validation", shuffle=True, rank=rank,
                                           world_size=world_size, start=start)

        everything = [key for batch in DataLoader(dataset(0), batch_size=BATCH, collate_fn=collate)
                      for key in batch["key"]]
        rest = [key for batch in DataLoader(dataset(21), batch_size=BATCH, collate_fn=collate) for key in batch["key"]]
        assert rest == everything[21:] == [e["key"] for e in read_numpy(
            counted.path, split="validation", shuffle=True, num_workers=world_size, worker_index=r, start=21)]


def test_a_state_of_another_read_is_rejected(counted):
    _, state = _consume(TFRecordIterableDataset(counted.path, shuffle=True, seed=1), 0, 2)
    with pytest.raises(ReaderError, match=r"the state was saved for another read: seed differ "
                                          r"\(saved \[1\], now \[2\]\)"):
        TFRecordIterableDataset(counted.path, shuffle=True, seed=2).load_state_dict(state)


def test_one_workers_state_cannot_resume_another_worker_count(counted):
    _, state = _consume(TFRecordIterableDataset(counted.path), 2, 3)
    worker_state = state["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    dataset = TFRecordIterableDataset(counted.path)
    dataset.load_state_dict(worker_state)
    with pytest.raises(ReaderError, match="a state of DataLoader worker 0 of 2 .* cannot resume worker 0 of 1 .* give "
                                          "the whole loader state_dict"):
        next(iter(dataset))


@pytest.mark.parametrize("state, message", [
    pytest.param({"beam_tfrecord_read_state": 99}, r"not a read state of version 1 \(found 99\)", id="version"),
    pytest.param({"beam_tfrecord_read_state": 1, "epoch": 0}, "malformed read state: KeyError: 'read'",
                 id="missing-key"),
    pytest.param({"_snapshot": {"_worker_snapshots": {"worker_0": {"dataset_state": None}}}},
                 "the DataLoader state holds no read state of this dataset", id="loader-without-dataset-state"),
    pytest.param({"dataset_state": {"other": 1}}, r"not a read state of version 1 \(found None\)", id="foreign"),
])
def test_malformed_states_are_typed_errors(counted, state, message):
    with pytest.raises(ReaderError, match=message):
        TFRecordIterableDataset(counted.path).load_state_dict(state)


@pytest.mark.parametrize("shuffle", [False, True], ids=["stored", "shuffled"])
@pytest.mark.parametrize("dataset", ["keyed_a", "keyed_r"])
def test_an_order_read_in_pieces_is_the_order_read_whole(request, dataset, shuffle):
    from beam_tfrecord.reader.order.orders import make_order
    from beam_tfrecord.reader.order.read_plan import plan_read

    plan = plan_read(request.getfixturevalue(dataset).path)
    order = make_order(plan, shuffle=shuffle, seed_parts=(3, 1), shuffle_buffer=50, verify=True)
    whole = [record for record, _, _ in order.iter_range(0, plan.num_records)]
    cuts = [0, 1, 37, 38, 120, plan.num_records - 2, plan.num_records]
    pieces = [record for lo, hi in itertools.pairwise(cuts) for record, _, _ in order.iter_range(lo, hi)]
    assert pieces == whole and len(set(whole)) == plan.num_records


def test_ready_batches_resume_with_another_worker_count_and_batch_size(keyed_a, keyed_r):
    """A state counts the examples handed out in ready batches; the resumed read may batch differently."""
    mixture = {keyed_a.path: 0.5, keyed_r.path: 0.5}  # 300 examples an epoch

    def dataset(batch_size: int) -> TFRecordIterableDataset:
        return TFRecordIterableDataset(mixture, shuffle=True, seed=6, batch_size=batch_size)

    def keys(loader) -> list[bytes]:
        return [key for batch in loader for key in batch["key"]]

    uninterrupted = keys(DataLoader(dataset(8), batch_size=None, num_workers=2, multiprocessing_context=WORKERS))
    assert sorted(uninterrupted) == sorted(e["key"] for e in read_numpy(mixture, shuffle=True, seed=6))
    loader = stateful.StatefulDataLoader(dataset(8), batch_size=None, num_workers=2, multiprocessing_context=WORKERS)
    consumed: list[bytes] = []
    for batch in itertools.islice(loader, 5):
        assert len(batch["key"]) == 8 and batch["i"].shape == (8,)
        consumed.extend(batch["key"])
    resumed = dataset(16)
    resumed.load_state_dict(loader.state_dict())
    assert len(resumed) == -(-(300 - 40) // 16)
    batches = list(DataLoader(resumed, batch_size=None, num_workers=1, multiprocessing_context=WORKERS))
    assert len(batches) == len(resumed) and [len(b["key"]) for b in batches[:-1]] == [16] * (len(batches) - 1)
    rest = [key for batch in batches for key in batch["key"]]
    assert len(consumed + rest) == len(set(consumed + rest)) and sorted(consumed + rest) == sorted(uninterrupted)


@pytest.mark.parametrize("rank, world_size", [(2, 2), (-1, 2), (0, 0), (0, True)],
                         ids=["rank-past-world", "negative-rank", "no-ranks", "bool-world"])
def test_a_bad_rank_or_world_size_is_a_reader_error(rank, world_size):
    with pytest.raises(ReaderError, match="need 0 <= rank < world_size, got rank="):
        rank_share(((0, 10),), world_size, rank)

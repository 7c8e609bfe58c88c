"""Split expressions and equal-count partitioning: pure arithmetic on a manifest's shard counts."""

import pytest

from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.errors import ReaderError, UnknownSplitError
from beam_tfrecord.reader.order.slicing import (
    ReadSegment,
    SplitSlice,
    parse_split,
    partition,
    resolve_split,
    split_evenly,
    sub_range,
)


def _shards(*counts: int) -> list[ReadSegment]:
    shards = [ShardInfo(f"s{i}", "train", i, n, n * 10, n * 10, "0") for i, n in enumerate(counts)]
    return [ReadSegment(shard, 0, shard.num_records) for shard in shards]


def _records(segments) -> list[tuple[str, int]]:
    return [(s.shard.filename, s.skip + k) for s in segments for k in range(s.take)]


@pytest.mark.parametrize("text, expected", [
    pytest.param("train", (SplitSlice("train"),), id="whole"),
    pytest.param("train[:10%]", (SplitSlice("train", None, 10, True),), id="percent-head"),
    pytest.param("train[1000:2000]", (SplitSlice("train", 1000, 2000),), id="records"),
    pytest.param("train[-500:]", (SplitSlice("train", -500, None),), id="negative"),
    pytest.param("train + validation[50%:]", (SplitSlice("train"), SplitSlice("validation", 50, None, True)),
                 id="sum"),
])
def test_parse_split(text, expected):
    assert parse_split(text) == expected


@pytest.mark.parametrize("text, message", [
    pytest.param("", "expected NAME, NAME[START:STOP]", id="empty"),
    pytest.param("train+", "expected NAME, NAME[START:STOP]", id="dangling-plus"),
    pytest.param("train[1:2:3]", "is not NAME or NAME[START:STOP]", id="step"),
    pytest.param("train[a:]", "boundary 'a' in 'train[a:]' is not an integer", id="not-a-number"),
    pytest.param("train[10%:2000]", "mixes a percentage and a record count", id="mixed-units"),
])
def test_parse_split_rejects_bad_expressions(text, message):
    with pytest.raises(ReaderError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_split(text)


@pytest.mark.parametrize("piece, expected", [
    pytest.param(SplitSlice("t", None, 10, True), (0, 10), id="10pct"),
    pytest.param(SplitSlice("t", 33, 67, True), (33, 67), id="middle-pct"),
    pytest.param(SplitSlice("t", -20, None), (80, 100), id="last-20"),
    pytest.param(SplitSlice("t", 90, 500), (90, 100), id="clipped"),
    pytest.param(SplitSlice("t", 50, 10), (50, 50), id="empty"),
])
def test_slice_bounds(piece, expected):
    assert piece.bounds(100) == expected


def test_percent_bounds_round_to_closest_record():
    assert SplitSlice("t", None, 10, True).bounds(15) == (0, 2)  # 1.5 records: half to even
    assert SplitSlice("t", None, 33, True).bounds(10) == (0, 3)


def test_resolve_split_slices_across_shards(counted_manifest):
    train = counted_manifest.split("train")
    segments = resolve_split(counted_manifest, "train[10:40]+test[-5:]")
    assert sum(s.take for s in segments) == 35
    assert segments[0].shard == train.shards[0] and segments[0].skip == 10
    last = counted_manifest.split("test").shards[-1]
    assert segments[-1].shard == last and segments[-1].skip + segments[-1].take == last.num_records


def test_resolve_split_names_unknown_split(counted_manifest):
    with pytest.raises(UnknownSplitError, match="split 'dev' is not in this dataset; it has"):
        resolve_split(counted_manifest, "train+dev")


@pytest.mark.parametrize("counts", [(7,), (10, 3, 9), (1, 1, 1, 50), (4, 4, 4, 4, 4)], ids=str)
@pytest.mark.parametrize("num_workers", [1, 2, 3, 5, 7])
def test_partition_gives_equal_disjoint_contiguous_ranges(counts, num_workers):
    segments = _shards(*counts)
    total = sum(counts)
    parts = [partition(segments, num_workers=num_workers, worker_index=i) for i in range(num_workers)]
    sizes = {sum(s.take for s in part) for part in parts}
    assert sizes == {total // num_workers}
    everything = _records(segments)
    assert [r for part in parts for r in _records(part)] == everything[:total // num_workers * num_workers]


def test_partition_with_fewer_shards_than_workers_splits_inside_shards():
    parts = [partition(_shards(9), num_workers=4, worker_index=i) for i in range(4)]
    assert [(p[0].skip, p[0].take) for p in parts] == [(0, 2), (2, 2), (4, 2), (6, 2)]


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"num_workers": 0, "worker_index": 0}, "num_workers must be >= 1, got 0", id="no-workers"),
    pytest.param({"num_workers": 2, "worker_index": 2}, r"worker_index must be in \[0, 2\), got 2", id="index"),
    pytest.param({"num_workers": 8, "worker_index": 0}, "7 records cannot give each of 8 workers at least one",
                 id="too-few-records"),
])
def test_partition_rejects_bad_workers(kwargs, message):
    with pytest.raises(ReaderError, match=message):
        partition(_shards(7), **kwargs)


def test_split_evenly_and_sub_range_cover_a_range_once():
    segments = _shards(5, 2, 6)
    pieces = [sub_range(segments, *split_evenly(13, 4, i)) for i in range(4)]
    assert [sum(s.take for s in p) for p in pieces] == [4, 3, 3, 3]
    assert [r for p in pieces for r in _records(p)] == _records(segments)


def test_segment_must_fit_its_shard():
    shard = _shards(5)[0].shard
    with pytest.raises(ReaderError, match="skip 3 \\+ take 3 does not fit its 5 records"):
        ReadSegment(shard, 3, 3)

"""Spill runs: slicing by hash range and merging in an order that does not depend on the runs."""

import io
import itertools

import pytest

from beam_tfrecord.core.framing import frame
from beam_tfrecord.core.runs import (
    REFERENCE,
    RunIndex,
    entry_kind,
    entry_record,
    entry_reference,
    make_record_entry,
    make_reference_entry,
    merge_slices,
    write_run,
)
from beam_tfrecord.errors import CorruptShardError


def _run(path: str, items: list[tuple[int, bytes]]) -> tuple[RunIndex, bytes]:
    entries = sorted(make_record_entry(h, record) for h, record in items)
    run = io.BytesIO()
    write_run(run, entries)
    return RunIndex.of_entries(path, entries), run.getvalue()


def _merge(runs: list[tuple[RunIndex, bytes]], lo: int = 0, hi: int = 2**64, **options) -> list[bytes]:
    slices = [index.slice(lo, hi) for index, _ in runs]
    files = {index.path: data for index, data in runs}

    def read_range(path: str, offset: int, length: int) -> bytes:
        return files[path][offset:offset + length]

    return [bytes(entry_record(entry)) for entry in merge_slices(slices, read_range, **options)]


def test_index_and_slice_byte_ranges():
    index, data = _run("r", [(30, b"c"), (10, b"a"), (20, b"bb")])
    assert index.hashes.tolist() == [10, 20, 30]
    assert index.framed_sizes.tolist() == [17, 18, 17]
    assert index.entry_sizes.tolist() == [26, 27, 26]  # + 8 bytes of hash and 1 of kind
    middle = index.slice(15, 30)
    assert (middle.start, middle.end, middle.num_entries) == (26, 26 + 27, 1)
    assert data[middle.start + 9:middle.end] == frame(b"bb")


def test_reference_entries_plan_by_record_size_and_read_by_entry_size():
    entries = sorted([make_record_entry(1, b"abc"), make_reference_entry(2, 250_000, b"pickled sample")])
    index = RunIndex.of_entries("r", entries)
    assert index.framed_sizes.tolist() == [19, 250_000]
    assert index.entry_sizes.tolist() == [28, 9 + 8 + len(b"pickled sample")]
    assert entry_kind(entries[1]) == REFERENCE
    assert entry_reference(entries[1]) == (250_000, b"pickled sample")


@pytest.mark.parametrize("with_ties", [False, True], ids=["distinct-hashes", "duplicate-keys"])
def test_merge_order_is_independent_of_which_run_holds_what(with_ties):
    items = [(h, f"record-{h}".encode()) for h in (5, 1, 9, 3, 7, 2**64 - 1)]
    if with_ties:
        items += [(3, b"another record with hash 3"), (3, b"a third")]
    expected = [framed for _, framed in sorted((h, frame(record)) for h, record in items)]  # ties: by framed bytes
    for split_at in range(len(items) + 1):
        for permutation in itertools.islice(itertools.permutations(items), 0, 40, 7):
            runs = [_run("a", list(permutation[:split_at])), _run("b", list(permutation[split_at:]))]
            assert _merge(runs) == expected
            assert _merge(list(reversed(runs))) == expected


def test_merge_of_a_hash_range_only():
    runs = [_run("a", [(1, b"x"), (5, b"y")]), _run("b", [(2, b"z"), (9, b"w")])]
    assert _merge(runs, 2, 9) == [frame(b"z"), frame(b"y")]


@pytest.mark.parametrize("group_bytes", [1, 40, 100, 1 << 20], ids=["entry-per-group", "small", "medium", "one-group"])
def test_merge_in_groups_reads_each_slice_front_to_back(group_bytes):
    """Groups cut anywhere (even inside an entry's bytes) give the same order and bytes."""
    runs = [_run(name, [(h, f"{name}-{h}".encode() * (h % 7 + 1)) for h in range(offset, 400, 3)])
            for name, offset in (("a", 0), ("b", 1), ("c", 2))]
    runs.append(_run("empty", []))
    expected = _merge(runs)  # the default group size holds everything at once
    assert len(expected) == 400
    assert _merge(runs, group_bytes=group_bytes) == expected
    assert _merge(runs, 50, 300, group_bytes=group_bytes) == expected[50:300]


def test_merge_of_a_truncated_run_names_the_run():
    index, data = _run("runs/broken.run", [(1, b"x" * 100), (5, b"y" * 100)])
    with pytest.raises(CorruptShardError, match="runs/broken.run.*truncated spill run"):
        _merge([(index, data[:-10])])


def test_index_file_round_trip_and_ranged_slices():
    index, _ = _run("runs/a.run", [(h, b"r" * (h % 5)) for h in (40, 10, 30, 20, 50)])
    data = index.to_bytes()
    assert len(data) == 24 * 5 + 16 and data.endswith(b"BTFRIDX1")  # items, then count and magic
    again = RunIndex.from_bytes("runs/a.run", data)
    for name in ("hashes", "framed_sizes", "entry_sizes"):
        assert getattr(again, name).tolist() == getattr(index, name).tolist()
    piece = index.slice(20, 45)
    assert piece.hashes.tolist() == [20, 30, 40] and piece.num_entries == 3
    assert piece.entry_sizes.tolist() == index.entry_sizes[1:4].tolist()
    assert (piece.start, piece.end) == (int(index.entry_sizes[:1].sum()), int(index.entry_sizes[:4].sum()))
    assert index.slice(0, 2**64).end == int(index.entry_sizes.sum()) and index.slice(51, 60).num_entries == 0


def test_damaged_index_files_name_the_index():
    index, _ = _run("runs/a.run", [(1, b"x"), (2, b"y")])
    data = index.to_bytes()
    with pytest.raises(CorruptShardError, match=r"runs/a.run.idx.*63 bytes do not end with a run index trailer"):
        RunIndex.from_bytes("runs/a.run", data[:-1])
    # Cut at an item boundary, trailer kept (as a torn write could leave it): the count disagrees.
    with pytest.raises(CorruptShardError, match=r"runs/a.run.idx.*expected 2 index items, found 1"):
        RunIndex.from_bytes("runs/a.run", data[24:])


class _Writes(io.BytesIO):
    """A handle that keeps the size of each write."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, data) -> int:
        self.sizes.append(len(data))
        return super().write(data)


@pytest.mark.parametrize("sizes, chunk, writes", [
    ([], 10, []),
    ([3], 10, [3]),
    ([4, 4, 4, 4], 8, [8, 8]),  # a write ends with the entry that brings it to the chunk size
    ([3, 3, 3, 3, 3], 8, [9, 6]),
    ([30, 2, 2], 8, [30, 4]),  # an entry larger than a chunk is one write of its own
    ([2, 30, 2, 25, 1], 8, [32, 27, 1]),
], ids=["none", "one", "exact", "over", "large-first", "large-inside"])
def test_a_run_is_its_entries_end_to_end_in_writes_of_about_the_chunk_size(sizes, chunk, writes):
    entries = [bytes([i]) * size for i, size in enumerate(sizes)]
    handle = _Writes()
    write_run(handle, entries, chunk_bytes=chunk)
    assert handle.getvalue() == b"".join(entries)
    assert handle.sizes == writes

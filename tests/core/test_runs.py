"""Spill runs: slicing by hash range and merging in an order that does not depend on the runs."""

import io
import itertools

import pytest

from beam_tfrecord.core.framing import frame
from beam_tfrecord.core.runs import (REFERENCE, RunIndex, entry_kind, entry_record, entry_reference,
                                     make_record_entry, make_reference_entry, merge_slices, write_run)


def _run(path: str, items: list[tuple[int, bytes]]) -> tuple[RunIndex, bytes]:
    entries = sorted(make_record_entry(h, record) for h, record in items)
    run = io.BytesIO()
    write_run(run, entries)
    return RunIndex.of_entries(path, entries), run.getvalue()


def _merge(runs: list[tuple[RunIndex, bytes]], lo: int = 0, hi: int = 2**64) -> list[bytes]:
    slices = [index.slice(lo, hi) for index, _ in runs]
    streams = []
    for (index, data), piece in zip(runs, slices):
        stream = io.BytesIO(data)
        stream.seek(piece.start)
        streams.append(stream)
    return [bytes(entry_record(entry)) for entry in merge_slices(streams, slices)]


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

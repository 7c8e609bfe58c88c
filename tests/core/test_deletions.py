"""DeletionVector: live runs at the edges, union, the JSON round trip, and bytes in Roaring's portable format."""

from __future__ import annotations

import base64
import struct

import pytest
from pyroaring import FrozenBitMap

from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.errors import ManifestError


@pytest.mark.parametrize("positions, num_records, runs", [
    ([0], 1, []),
    ([0, 1, 2], 3, []),
    ([0], 4, [(1, 3)]),
    ([3], 4, [(0, 3)]),
    ([0, 3], 4, [(1, 2)]),
    ([1, 2], 4, [(0, 1), (3, 1)]),
    ([1, 3, 5], 7, [(0, 1), (2, 1), (4, 1), (6, 1)]),
    ([70_000], 70_002, [(0, 70_000), (70_001, 1)]),  # past one Roaring container (65,536 values)
], ids=["the-only-record", "every-record", "the-first", "the-last", "both-ends", "the-middle", "every-other",
        "second-container"])
def test_live_runs_are_the_records_between_deleted_positions(positions, num_records, runs):
    vector = DeletionVector.of(positions)
    assert vector.live_runs(num_records) == runs
    live = [p for start, length in runs for p in range(start, start + length)]
    assert sorted(live + positions) == list(range(num_records))  # no live record missed, none deleted returned


def test_union_adds_positions_and_leaves_the_vector_as_it_was():
    vector = DeletionVector.of([1, 5])
    both = vector.union([5, 9])
    assert list(both.positions) == [1, 5, 9] and both.count == 3 and list(vector.positions) == [1, 5]
    assert both == DeletionVector.of([9, 1, 5]) and hash(both) == hash(DeletionVector.of([1, 5, 9]))


def test_a_vector_holds_at_least_one_position():
    with pytest.raises(ValueError, match="at least one position"):
        DeletionVector.of([])


@pytest.mark.parametrize("positions", [[0], [2, 3, 4], list(range(0, 200_000, 3)), list(range(10, 100_000))],
                         ids=["one", "a-run", "sparse-over-containers", "a-long-run"])
def test_json_round_trip(positions):
    vector = DeletionVector.of(positions)
    data = vector.to_json()
    assert DeletionVector.from_json(data, path="p", num_records=max(positions) + 1) == vector
    assert data["count"] == len(positions)


def test_bytes_are_roaring_portable_format():
    """The recipe: RoaringFormatSpec (github.com/RoaringBitmap/RoaringFormatSpec), the bytes CRoaring, Java's
    RoaringBitmap, Go's roaring, Iceberg v3 and Delta read: cookie 12346 (no run container), 1 container, its key 0
    and cardinality - 1 as uint16, its offset (16), then the array container's values as uint16, little-endian."""
    data = DeletionVector.of([1, 2, 5]).to_json()
    expected = struct.pack("<IIHHIHHH", 12346, 1, 0, 2, 16, 1, 2, 5)
    assert base64.b64decode(data["roaring"]) == expected
    assert FrozenBitMap.deserialize(expected) == FrozenBitMap([1, 2, 5])
    assert data["crc32c"] == "88815784"  # google_crc32c.value(expected)


def test_a_position_past_the_shard_is_refused():
    with pytest.raises(ManifestError, match=r"manifest field 'p.roaring': expected positions below the shard's 5 "
                                            r"records, got 'position 5'"):
        DeletionVector.from_json(DeletionVector.of([5]).to_json(), path="p", num_records=5)

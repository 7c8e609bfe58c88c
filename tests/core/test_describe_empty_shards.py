"""Why a split's shards are empty, as the summary says it (``describe.empty_shards_note``)."""

from __future__ import annotations

import pytest

from beam_tfrecord.core.manifest import ShardInfo, SplitInfo
from beam_tfrecord.describe import empty_shards_note


def _split(*record_counts_and_bytes: tuple[int, int]) -> SplitInfo:
    count = len(record_counts_and_bytes)
    return SplitInfo("train", tuple(
        ShardInfo(f"d-train.tfrecord-{i:05d}-of-{count:05d}", "train", i, records, size, size, "00000000")
        for i, (records, size) in enumerate(record_counts_and_bytes)))


@pytest.mark.parametrize("split, note", [
    pytest.param(_split((5, 500), (5, 500)), None, id="none-empty"),
    pytest.param(_split((0, 0), (0, 0)), "2 of its 2 shards are empty files: the split has no record", id="no-record"),
    pytest.param(_split((1, 5016), (0, 0), (0, 0), (0, 0)),
                 "3 of its 4 shards are empty files: 1 record cannot fill 4 shards (a shard holds whole records)",
                 id="one-record"),
    pytest.param(_split((30, 3_000), (1, 100_016), (10, 1_000), (0, 0)),
                 "1 of its 4 shards is an empty file: some records are larger than a shard's share of the split "
                 "(97.7 KiB in one shard, 25.4 KiB a share); a record is never cut", id="a-record-over-a-share"),
])
def test_the_note_says_why_shards_are_empty(split, note):
    assert empty_shards_note(split) == note

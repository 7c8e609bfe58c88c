"""WriteBalancedTFRecord on an unbounded input (issue 62): each fired pane of a TestStream on the DirectRunner's
streaming mode is one commit of byte-balanced shards under Beam's per-window names, listed by the manifest; a late
pane is its own commit; records read back exactly once."""

from __future__ import annotations

import collections
import json
import os
import re
from pathlib import Path

import pytest
import tensorflow as tf
from late_stream import run_late_stream

from beam_tfrecord import WriteBalancedTFRecord, load_manifest, read_numpy
from beam_tfrecord.beam.pane_manifest import STREAMING_KEY
from beam_tfrecord.storage import crc32c_and_size

PER_WINDOW = 40
TARGET_SHARD_BYTES = 4_000
LATE = [3 * PER_WINDOW + i for i in range(7)]  # ids of window [0, 10) that arrive after its on-time pane
# Beam's W: PREFIX-[start, end)-SSSSS-of-NNNNN.SUFFIX; a late pane adds its index after the window.
NAME = re.compile(r"out-\[(?P<start>\d+\.\d+), (?P<end>\d+\.\d+)\)(?P<pane>-pane\d+)?-(?P<index>\d{5})-of-"
                  r"(?P<count>\d{5})\.tfrecord")


def _example(i: int) -> bytes:
    example = tf.train.Example()
    example.features.feature["id"].int64_list.value.append(i)
    example.features.feature["text"].bytes_list.value.append(b"x" * (37 * i % 400))
    return example.SerializeToString()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> str:
    prefix = str(tmp_path_factory.mktemp("stream") / "out")
    run_late_stream(_example, per_window=PER_WINDOW, late=LATE, writer=WriteBalancedTFRecord(
        prefix, file_name_suffix=".tfrecord", target_shard_bytes=TARGET_SHARD_BYTES))
    return prefix


def test_each_pane_is_one_commit_under_beams_window_names(written):
    manifest = load_manifest(written)
    panes = manifest.metadata[STREAMING_KEY]["panes"]
    assert sorted((p["window"], p["index"]) for p in panes) == [
        ("[0.0, 10.0)", 0), ("[0.0, 10.0)-pane1", 1), ("[10.0, 20.0)", 0), ("[20.0, 30.0)", 0)]
    assert sorted(p["num_records"] for p in panes) == [len(LATE), PER_WINDOW, PER_WINDOW, PER_WINDOW]
    by_pane = collections.defaultdict(list)
    for shard in manifest.shards:
        match = NAME.fullmatch(shard.filename)
        assert match is not None, shard.filename
        by_pane[(match["start"], match["pane"])].append((int(match["index"]), int(match["count"]), shard))
    assert len(by_pane) == 4
    for pane in panes:  # the manifest's record of each pane names its shards, numbered 0..N-1 of N
        first, count = pane["first_shard"]["train"], pane["num_shards"]["train"]
        listed = manifest.split("train").shards[first:first + count]
        assert [NAME.fullmatch(s.filename)["index"] for s in listed] == [f"{i:05d}" for i in range(count)]
        assert {NAME.fullmatch(s.filename)["count"] for s in listed} == {f"{count:05d}"}


def test_each_panes_shards_are_balanced_as_a_batch_builds(written):
    manifest = load_manifest(written)
    largest_record = 16 + len(_example(0)) + 400
    for pane in manifest.metadata[STREAMING_KEY]["panes"]:
        first, count = pane["first_shard"]["train"], pane["num_shards"]["train"]
        sizes = [s.num_record_bytes for s in manifest.split("train").shards[first:first + count]]
        if pane["num_records"] == PER_WINDOW:  # ~10 KB: several shards of about the target each
            assert count >= 2 and max(sizes) - min(sizes[:-1] or sizes) <= largest_record, sizes
        assert 0.0 <= pane["balance_spread"] <= 0.5


def test_records_read_back_exactly_once_and_only_listed_files_remain(written):
    expected = sorted([*range(3 * PER_WINDOW), *LATE])
    assert sorted(int(e["id"]) for e in read_numpy(written)) == expected
    manifest = load_manifest(written)
    folder = Path(written).parent
    paths = [str(folder / s.filename) for s in manifest.shards]
    read = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(paths)]
    assert sorted(e.features.feature["id"].int64_list.value[0] for e in read) == expected
    assert sorted(os.listdir(folder)) == sorted([".out.beam-tfrecord", *(s.filename for s in manifest.shards)])
    assert sorted(os.listdir(folder / ".out.beam-tfrecord")) == ["manifest.json", "panes"]  # no lease left
    assert os.listdir(folder / ".out.beam-tfrecord" / "panes") == []  # no pane's temporary shards
    for shard in manifest.shards:
        assert crc32c_and_size(str(folder / shard.filename)) == (shard.crc32c, shard.num_bytes)
    assert json.loads((folder / ".out.beam-tfrecord" / "manifest.json").read_text())["num_written"] == len(expected)


def test_a_stream_commits_under_a_prefix_on_an_object_store(gcs_bucket):
    """Beam's window names (brackets, a comma, a space) as object names: listed, read back, committed once."""
    prefix = f"{gcs_bucket}/stream/out"
    run_late_stream(_example, per_window=4, late=[12], writer=WriteBalancedTFRecord(prefix, num_shards=2))
    manifest = load_manifest(prefix)
    assert len(manifest.shards) == 4 * 2 and manifest.shards[0].filename == "out-[0.0, 10.0)-00000-of-00002"
    assert sorted(int(e["id"]) for e in read_numpy(prefix)) == [*range(12), 12]

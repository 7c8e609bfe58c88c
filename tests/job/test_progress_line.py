"""The progress line's content: sums over every DoFn's sink, rates and the ETA in each phase."""

from __future__ import annotations

import io

import pytest

from beam_tfrecord.job.progress import ProgressCounts, ProgressDisplay, ProgressSink, describe_progress, read_progress


def test_sinks_of_several_dofns_are_summed_and_a_half_written_file_is_not_read(tmp_path):
    encode, shard = ProgressSink(str(tmp_path)), ProgressSink(str(tmp_path))
    encode.add(encoded=90, rejected=3)
    shard.add(planned=("train", 4))
    shard.add(planned=("test", 1))
    shard.add(shards=2, num_bytes=5_000_000)
    encode.flush()
    shard.flush()
    (tmp_path / "999-deadbeef.progress.json").write_text('{"samples_encoded": 1')  # torn: skipped
    counts = read_progress(str(tmp_path))
    assert (counts.samples_encoded, counts.samples_rejected, counts.shards_written, counts.bytes_written) == (
        90, 3, 2, 5_000_000)
    assert counts.shards_planned == {"train": 4, "test": 1} and counts.num_shards_planned == 5


def test_while_encoding_the_eta_follows_the_sample_rate():
    counts = ProgressCounts(samples_encoded=240, samples_rejected=10)
    assert describe_progress(counts, elapsed_seconds=5, expected_inputs=1000) == (
        "250/1,000 samples (10 rejected) | shards 0/? | 0.0 MB/s | 0:00:05 | ETA 0:00:15")


def test_no_eta_before_one_percent_of_the_inputs_or_when_their_number_is_unknown():
    few = ProgressCounts(samples_encoded=9)
    assert "ETA" not in describe_progress(few, elapsed_seconds=1, expected_inputs=1000)
    assert describe_progress(ProgressCounts(samples_encoded=500), elapsed_seconds=1, expected_inputs=None) == (
        "500 samples (0 rejected) | shards 0/? | 0.0 MB/s | 0:00:01")


def test_while_writing_the_eta_follows_the_shard_rate_since_writing_began():
    counts = ProgressCounts(samples_encoded=1000, shards_written=2, bytes_written=80_000_000,
                            shards_planned={"train": 8, "test": 2})
    # 100 s of encoding, then 2 shards in 20 s: 8 shards left at 10 s each, not at 60 s each.
    assert describe_progress(counts, elapsed_seconds=120, expected_inputs=1000, writing_seconds=20) == (
        "1,000/1,000 samples (0 rejected) | shards 2/10 | 0.7 MB/s | 0:02:00 | ETA 0:01:20")
    # Without the writing start, the whole build's time is the estimate's base.
    assert describe_progress(counts, elapsed_seconds=120, expected_inputs=1000).endswith("ETA 0:08:00")


def test_a_log_display_ends_with_the_final_counts(tmp_path):
    stream = io.StringIO()
    with ProgressDisplay(str(tmp_path), expected_inputs=30, stream=stream, live=False, interval_seconds=60):
        sink = ProgressSink(str(tmp_path))
        sink.add(encoded=30, planned=("train", 1))
        sink.add(shards=1, num_bytes=1000)
        sink.flush()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1  # no tick within the 60 s interval: only the closing line
    assert lines[0].startswith("progress: 30/30 samples (0 rejected) | shards 1/1 | ")


def test_a_failed_build_ends_with_its_error_not_a_progress_line(tmp_path):
    stream = io.StringIO()
    with pytest.raises(RuntimeError, match="the pipeline failed"), ProgressDisplay(
            str(tmp_path), expected_inputs=30, stream=stream, live=False, interval_seconds=60):
        raise RuntimeError("the pipeline failed")
    assert stream.getvalue() == ""


def test_no_eta_once_encoding_ends_until_a_shard_is_written_nor_once_every_shard_is():
    encoded = ProgressCounts(samples_encoded=1000, shards_planned={"train": 4})
    assert describe_progress(encoded, elapsed_seconds=30, expected_inputs=1000) == (
        "1,000/1,000 samples (0 rejected) | shards 0/4 | 0.0 MB/s | 0:00:30")
    done = ProgressCounts(samples_encoded=1000, shards_written=4, bytes_written=4_000_000, shards_planned={"train": 4})
    assert describe_progress(done, elapsed_seconds=40, expected_inputs=1000, writing_seconds=10) == (
        "1,000/1,000 samples (0 rejected) | shards 4/4 | 0.1 MB/s | 0:00:40")

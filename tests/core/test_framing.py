"""TFRecord framing against TensorFlow's own writer and reader, and corruption detection."""

import io

import pytest

from beam_tfrecord.core.framing import FRAMING_BYTES, frame, frame_parts, iter_records, masked_crc, record_spans
from beam_tfrecord.errors import CorruptShardError

RECORDS = [b"", b"a", b"hello world", bytes(range(256)) * 40]


def test_masked_crc_of_known_values():
    # CRC32C("123456789") is 0xE3069283 (the standard check value); masking rotates right 15 and adds
    # 0xa282ead8. The empty string's CRC is 0, so its mask is the delta itself.
    crc = 0xE3069283
    assert masked_crc(b"123456789") == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
    assert masked_crc(b"") == 0xA282EAD8


def test_frames_match_tensorflow_writer(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in RECORDS:
            writer.write(record)
    assert (tmp_path / "tf.tfrecord").read_bytes() == b"".join(frame(r) for r in RECORDS)


def test_tensorflow_reads_our_frames(tmp_path):
    import tensorflow as tf

    path = tmp_path / "ours.tfrecord"
    path.write_bytes(b"".join(frame(r) for r in RECORDS))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == RECORDS


def test_frame_parts_surround_the_data_as_frame_does():
    for record in RECORDS:
        header, footer = frame_parts(record)
        assert (len(header), len(footer)) == (12, 4)
        assert header + record + footer == frame(record)


def test_iter_records_round_trip():
    stream = io.BytesIO(b"".join(frame(r) for r in RECORDS))
    assert list(iter_records(stream, name="mem")) == RECORDS
    assert len(frame(b"xyz")) == 3 + FRAMING_BYTES


@pytest.mark.parametrize("damage, reason, offset", [
    pytest.param(lambda b: b[:5], "truncated record header", 0, id="truncated-header"),
    pytest.param(lambda b: b[:-2], "truncated record", 16 + 1, id="truncated-body"),
    pytest.param(lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:], "data CRC mismatch", 17, id="flipped-data-byte"),
    pytest.param(lambda b: bytes([b[0] ^ 1]) + b[1:], "length CRC mismatch", 0, id="flipped-length-byte"),
])
def test_corruption_is_reported_with_offset(damage, reason, offset):
    data = frame(b"x") + frame(b"hello world")
    with pytest.raises(CorruptShardError) as info:
        list(iter_records(io.BytesIO(damage(data)), name="shard-7"))
    assert info.value.shard == "shard-7"
    assert reason in info.value.reason
    assert info.value.offset == offset


@pytest.mark.parametrize("lengths", [[], [5] * 300, [5, 0, 0, 5, 5, 7, 0] + [5] * 200 + [0]],
                         ids=["empty", "one_length", "runs"])
def test_record_spans_cut_every_record(lengths):
    records = [bytes([i % 256]) * n for i, n in enumerate(lengths)]
    buffer = b"".join(frame(r) for r in records)
    starts, sizes = record_spans(buffer, name="col.tfrecord", num_records=len(records))
    assert [buffer[s:s + n] for s, n in zip(starts, sizes)] == records


@pytest.mark.parametrize("rows, count, reason", [(2.5, 3, "truncated record"), (3, 4, "3 records, the manifest says 4"),
                                                 (4, 3, "4 records, the manifest says 3")],
                         ids=["truncated", "fewer", "more"])
def test_record_spans_fail_naming_the_file(rows, count, reason):
    buffer = b"".join(frame(b"row") for _ in range(4))[:int(rows * len(frame(b"row")))]
    with pytest.raises(CorruptShardError, match=f"col.tfrecord.*{reason}"):
        record_spans(buffer, name="col.tfrecord", num_records=count)

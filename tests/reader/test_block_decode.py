"""The block decoder gives what the protobuf library gives, record for record (hypothesis property tests).

The reference is ``RecordDecoder`` (the protobuf library): for blocks of records the project's
encoder wrote, and for the same records altered (unknown fields, merged messages, flipped or cut
bytes), the block decoder returns the same values, or raises the same typed error at the same offset.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image as PILImage

from beam_tfrecord import ClassLabel, DType, FixedList, Image, ImageFormat, Sample, Scalar, Schema, Tensor, TensorDType
from beam_tfrecord.core.blocks import RecordBlock, split_frames
from beam_tfrecord.core.framing import frame
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.reader.decode.block_decode import BlockDecoder, FixedLayout, rows
from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder
from beam_tfrecord.reader.options import ImageDecoding

TENSORS = {f"t_{t.name.lower()}": Tensor(t, (2, 3)) for t in TensorDType}
FIXED_SCHEMA = Schema(features={
    "s_int": Scalar(DType.INT64), "s_float": Scalar(DType.FLOAT32), "s_bytes": Scalar(DType.BYTES),
    "s_str": Scalar(DType.STRING), "l_int": FixedList(DType.INT64, 3), "l_float": FixedList(DType.FLOAT32, 2),
    "l_bytes": FixedList(DType.BYTES, 2), "label": ClassLabel(("a", "b", "c")),
    "img": Image(ImageFormat.PNG, shape=(2, 3, 3)), **TENSORS,
})


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(np.random.default_rng(seed).integers(0, 256, (2, 3, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


PNGS = [_png(seed) for seed in range(3)]
int64s = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(width=32, allow_nan=False, allow_infinity=False)
blobs = st.binary(max_size=40)
texts = st.text(max_size=20)


def _finite(dtype: np.dtype) -> st.SearchStrategy | None:
    """Finite values for float tensors (the encoder refuses others); None: any value of the dtype."""
    return st.floats(width=8 * dtype.itemsize, allow_nan=False, allow_infinity=False) if dtype.kind == "f" else None


@st.composite
def samples(draw: st.DrawFn) -> dict:
    tensors = {name: draw(arrays(f.dtype.value, (2, 3), elements=_finite(np.dtype(f.dtype.value))))
               for name, f in TENSORS.items()}
    return {"s_int": draw(int64s), "s_float": draw(floats), "s_bytes": draw(blobs), "s_str": draw(texts),
            "l_int": draw(st.lists(int64s, min_size=3, max_size=3)),
            "l_float": draw(st.lists(floats, min_size=2, max_size=2)),
            "l_bytes": draw(st.lists(blobs, min_size=2, max_size=2)), "label": draw(st.sampled_from("abc")),
            "img": draw(st.sampled_from(PNGS)), **tensors}


ENCODER = SampleEncoder(FIXED_SCHEMA)
REFERENCE = RecordDecoder(FIXED_SCHEMA)
BLOCKS = BlockDecoder(FIXED_SCHEMA)


def _assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        if isinstance(value, bytes):
            assert got[name] == value, name
        else:
            np.testing.assert_array_equal(got[name], value, err_msg=name)
            assert np.asarray(got[name]).dtype == value.dtype and np.shape(got[name]) == value.shape, name


def _reference(records: list[bytes], offsets: list[int]) -> list[dict] | CorruptShardError:
    try:
        return [REFERENCE.decode(r, shard="shard", offset=o) for r, o in zip(records, offsets)]
    except CorruptShardError as err:
        return err


def _check_block(records: list[bytes]) -> None:
    offsets = [10 * i for i in range(len(records))]
    want = _reference(records, offsets)
    block = RecordBlock.of_records("shard", records, offsets)
    if isinstance(want, CorruptShardError):
        with pytest.raises(CorruptShardError) as raised:
            BLOCKS.decode(block)
        assert (raised.value.shard, raised.value.offset) == (want.shard, want.offset)
        return
    got = list(rows(BLOCKS.decode(block)))
    assert len(got) == len(want)
    for one, reference in zip(got, want):
        _assert_same(one, reference)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(samples(), min_size=1, max_size=6))
def test_encoded_blocks_take_the_fast_path_and_equal_the_protobuf_library(values):
    records = [ENCODER.encode(Sample(str(i), v)) for i, v in enumerate(values)]
    assert FixedLayout(FIXED_SCHEMA).parse(RecordBlock.of_records("shard", records, list(range(len(records))))) \
        is not None
    _check_block(records)


ALTERATIONS = ("unknown_field", "merged", "flip", "cut", "duplicate_key")


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(samples(), min_size=1, max_size=4), st.sampled_from(ALTERATIONS), st.integers(0, 10**6),
       st.integers(0, 255))
def test_altered_records_decode_as_the_protobuf_library_decodes_them(values, alteration, where, byte):
    records = [ENCODER.encode(Sample(str(i), v)) for i, v in enumerate(values)]
    target = where % len(records)
    record = records[target]
    if alteration == "unknown_field":  # field 5, varint: valid, ignored by the library
        record = record + bytes([0x28, byte & 0x7F])
    elif alteration == "merged":  # two Examples back to back parse as one (maps merged)
        record = record + records[(target + 1) % len(records)]
    elif alteration == "flip":
        position = where % len(record)
        record = record[:position] + bytes([byte]) + record[position + 1:]
    elif alteration == "cut":
        record = record[:where % len(record)]
    else:  # the first entry again, with the other record's value: the library keeps the last
        other = records[(target + 1) % len(records)]
        record = record + other[:2 + other[1]] if other[1] < 0x80 else record
    records[target] = record
    _check_block(records)


def test_empty_records_and_blocks_go_through_the_protobuf_library():
    record = ENCODER.encode(Sample("0", _fixed_values(0)))
    _check_block([record, b"", record])  # an empty Example: the library finds no features
    _check_block([b""])
    assert BLOCKS.decode(RecordBlock.of_records("shard", [], [])) == BLOCKS.columns([])


def test_sequence_and_variable_schemas_go_through_the_protobuf_library():
    from beam_tfrecord.core.schema import VarList

    schema = Schema(features={"v": VarList(DType.INT64), "s": Scalar(DType.STRING)})
    assert FixedLayout.of(schema) is None
    records = [SampleEncoder(schema).encode(Sample(str(i), {"v": list(range(i)), "s": str(i)})) for i in range(4)]
    got = list(rows(BlockDecoder(schema).decode(RecordBlock.of_records("shard", records, [0, 1, 2, 3]))))
    assert [list(e["v"]) for e in got] == [list(range(i)) for i in range(4)]
    assert [e["s"] for e in got] == [b"0", b"1", b"2", b"3"]


def test_images_are_decoded_in_the_block():
    records = [ENCODER.encode(Sample(str(i), {**values, "img": PNGS[i]}))
               for i, values in enumerate([_fixed_values(i) for i in range(3)])]
    decoded = BlockDecoder(FIXED_SCHEMA, image_decoding=ImageDecoding()).decode(
        RecordBlock.of_records("shard", records, [0, 1, 2]))
    assert decoded["img"].shape == (3, 2, 3, 3)
    for i in range(3):
        np.testing.assert_array_equal(decoded["img"][i], np.asarray(PILImage.open(io.BytesIO(PNGS[i]))))


def _fixed_values(i: int) -> dict:
    return {"s_int": i, "s_float": 0.5, "s_bytes": b"b", "s_str": "s", "l_int": [1, 2, 3], "l_float": [1.0, 2.0],
            "l_bytes": [b"x", b"y"], "label": "a", "img": PNGS[0],
            **{name: np.zeros((2, 3), dtype=f.dtype.value) for name, f in TENSORS.items()}}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(0, 10**6), st.integers(0, 255),
       st.sampled_from(("none", "flip", "cut")))
def test_framing_walk_equals_the_record_by_record_reader(datas, where, byte, damage):
    from beam_tfrecord.core.framing import iter_records

    stream = b"".join(frame(d) for d in datas)
    if stream and damage == "flip":
        position = where % len(stream)
        stream = stream[:position] + bytes([stream[position] ^ (byte or 1)]) + stream[position + 1:]
    elif stream and damage == "cut":
        stream = stream[:where % len(stream)]
    try:
        want: list[bytes] | tuple = list(iter_records(io.BytesIO(stream), name="s"))
    except CorruptShardError as err:
        want = (err.offset, str(err))
    try:
        block, used = split_frames(np.frombuffer(stream, dtype=np.uint8), name="s")
        got: list[bytes] | tuple = [block.record(i) for i in range(len(block))]
        if used != len(stream):  # a cut record: the reader reports it at the stream's end
            got = ("cut", used)
    except CorruptShardError as err:
        got = (err.offset, str(err))
    if isinstance(want, list):
        assert got == want
    elif isinstance(got, tuple) and got[0] == "cut":
        assert want[0] == got[1] and "truncated" in want[1]
    else:
        assert got == want

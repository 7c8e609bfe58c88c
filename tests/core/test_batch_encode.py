"""The batch encoder writes exactly the reference's bytes (property based, hypothesis).

The reference is ``SampleEncoder`` (the protobuf library fills and serializes one message per
sample) and ``EntryEncoder.encode`` (hash, framing, run entry per sample). For random schemas
over every feature type of ``core/schema.py`` and random chunks of values, valid or not:
``BatchEncoder.encode`` is the reference's records or None (never other bytes), and it is not None
when every value is valid; ``EntryEncoder.encode_chunk`` gives the same entries and dead letters
as ``encode`` sample by sample.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from beam_tfrecord.core import batch_encoder, wire
from beam_tfrecord.core.batch_encoder import BatchEncoder
from beam_tfrecord.core.framing import frame_parts, frame_parts_of_chunk
from beam_tfrecord.core.hashing import key_digests, key_hash
from beam_tfrecord.core.sample_encoder import SampleEncoder
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import (
    ClassLabel,
    DType,
    FixedList,
    Image,
    ImageFormat,
    Scalar,
    Schema,
    Tensor,
    TensorDType,
    VarList,
)
from beam_tfrecord.encoding.entries import EntryEncoder
from beam_tfrecord.errors import SampleError

FLOAT32_MAX = float(np.finfo(np.float32).max)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIGNATURES = {ImageFormat.JPEG: b"\xff\xd8\xff", ImageFormat.PNG: b"\x89PNG\r\n\x1a\n", ImageFormat.GIF: b"GIF89a",
              ImageFormat.BMP: b"BM", ImageFormat.WEBP: b"RIFF\0\0\0\0WEBP"}

names = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=6)
int64s = st.integers(-(2**63), 2**63 - 1)


def floats32(allow_non_finite: bool) -> st.SearchStrategy:
    finite = st.floats(-FLOAT32_MAX, FLOAT32_MAX)  # doubles: rounded to float32 when written
    edge = st.floats(width=32, allow_nan=allow_non_finite, allow_infinity=allow_non_finite)
    return st.one_of(finite, edge, st.integers(-(2**70), 2**70).filter(lambda n: abs(n) <= FLOAT32_MAX))


def elements(dtype: DType, allow_non_finite: bool) -> st.SearchStrategy:
    return {DType.INT64: int64s, DType.FLOAT32: floats32(allow_non_finite), DType.BYTES: st.binary(max_size=12),
            DType.STRING: st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=6),
                                    st.text(max_size=4).map(lambda t: t.encode("utf-8", "ignore")))}[dtype]


def as_array(values: list, dtype: DType) -> st.SearchStrategy:
    """A list of values, or the same values as a 1-d array (the reference reads both)."""
    if dtype is DType.INT64 and all(-(2**31) <= v < 2**31 for v in values):
        return st.sampled_from([values, tuple(values), np.array(values, np.int64), np.array(values, np.int32)])
    if dtype is DType.FLOAT32:
        return st.sampled_from([values, np.array(values, np.float64)])
    return st.just(values)


@st.composite
def features_and_values(draw):
    """(feature, strategy of its valid values) for one random feature."""
    kind = draw(st.sampled_from(["scalar", "fixed", "var", "tensor", "image", "label"]))
    dtype = draw(st.sampled_from(list(DType)))
    allow = dtype is DType.FLOAT32 and draw(st.booleans())
    item = elements(dtype, allow)
    if kind == "scalar":
        default = draw(st.one_of(st.none(), elements(dtype, False).filter(
            lambda v: not isinstance(v, bytes) or dtype is DType.BYTES)))
        feature = Scalar(dtype, default=default, allow_non_finite=allow)
        values = item if default is None else st.one_of(item, st.none())
        if dtype is DType.INT64:
            values = st.one_of(values, int64s.map(np.int64), int64s.map(np.array))
    elif kind == "fixed":
        length = draw(st.integers(1, 4))
        default = draw(st.one_of(st.none(), st.lists(elements(dtype, False).filter(
            lambda v: not isinstance(v, bytes) or dtype is DType.BYTES), min_size=length, max_size=length)))
        feature = FixedList(dtype, length, default=default, allow_non_finite=allow)
        values = st.lists(item, min_size=length, max_size=length).flatmap(lambda v: as_array(v, dtype))
        values = values if default is None else st.one_of(values, st.none())
    elif kind == "var":
        feature = VarList(dtype, allow_non_finite=allow)
        values = st.one_of(st.none(), st.lists(item, max_size=4).flatmap(lambda v: as_array(v, dtype)))
    elif kind == "tensor":
        tensor_dtype = draw(st.sampled_from(list(TensorDType)))
        shape = tuple(draw(st.lists(st.integers(1, 3), max_size=3)))
        allow = tensor_dtype.is_float and draw(st.booleans())
        feature = Tensor(tensor_dtype, shape, allow_non_finite=allow)
        arrays = hnp.arrays(np.dtype(tensor_dtype.value), shape,
                            elements={"allow_nan": allow, "allow_infinity": allow} if tensor_dtype.is_float else None)
        fortran = arrays.map(np.asfortranarray) if len(shape) > 1 else arrays  # not C-contiguous
        read_only = arrays.map(lambda a: np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape))
        values = st.one_of(arrays, fortran, read_only, arrays.map(lambda a: a.tolist()))
    elif kind == "image":
        fmt = draw(st.sampled_from(list(ImageFormat)))
        feature = Image(fmt)
        signatures = list(SIGNATURES.values()) if fmt is ImageFormat.ANY else [SIGNATURES[fmt]]
        values = st.tuples(st.sampled_from(signatures), st.binary(max_size=10)).map(b"".join)
    else:
        labels = draw(st.lists(names, min_size=1, max_size=5, unique=True))
        feature = ClassLabel(tuple(labels))
        values = st.one_of(st.integers(0, len(labels) - 1), st.sampled_from(labels))
    return feature, values


@st.composite
def schemas_and_chunks(draw, *, junk: bool = False):
    """A random schema and a chunk of 1-6 samples of valid values (with ``junk``: some invalid)."""
    drawn = draw(st.dictionaries(names, features_and_values(), min_size=1, max_size=4))
    schema = Schema({name: feature for name, (feature, _) in drawn.items()})
    bad = st.one_of(st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=3),
                    st.binary(max_size=3), st.lists(st.integers(-3, 3), max_size=3), st.just(float("nan")))
    samples = []
    for i in range(draw(st.integers(1, 6))):
        values = {}
        for name, (_, strategy) in drawn.items():
            value = draw(bad if junk and draw(st.integers(0, 9)) == 0 else strategy)
            if value is not None or draw(st.booleans()):
                values[name] = value  # absent or None: the same to the reference
        if junk and draw(st.integers(0, 19)) == 0:
            values["not in the schema"] = 1
        samples.append(Sample(draw(st.text(max_size=5)) + f"/{i}", values))
    return schema, samples


@SETTINGS
@given(schemas_and_chunks())
def test_valid_chunks_are_the_references_bytes(case):
    schema, samples = case
    reference = [SampleEncoder(schema).encode(sample) for sample in samples]
    assert BatchEncoder(schema).encode([sample.values for sample in samples]) == reference


@SETTINGS
@given(schemas_and_chunks(junk=True))
def test_any_chunk_gives_the_references_bytes_or_none(case):
    schema, samples = case
    records = BatchEncoder(schema).encode([sample.values for sample in samples])
    if records is not None:
        assert records == [SampleEncoder(schema).encode(sample) for sample in samples]


@SETTINGS
@given(schemas_and_chunks(junk=True), st.integers(0, 5))
def test_entries_and_dead_letters_as_one_by_one(case, dead_at):
    schema, samples = case
    items = list(samples)
    items.insert(min(dead_at, len(items)), DeadLetter("source/1", Stage.READ, "SourceError", "bad row"))
    encoder = EntryEncoder(schema, salt="salt", max_record_bytes=1 << 20, feature_transforms={}, reread_min_bytes=0)
    expected = [item if type(item) is DeadLetter else encoder.encode(item) for item in items]
    assert list(encoder.encode_chunk(items)) == expected


SMALL = Schema({"image": Tensor(TensorDType.UINT8, (4, 4, 3)), "label": ClassLabel(("cat", "dog")),
                "score": Scalar(DType.FLOAT32), "tags": VarList(DType.STRING)})


def small_samples(count: int) -> list[Sample]:
    rng = np.random.default_rng(0)
    return [Sample(f"k{i}", {"image": rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), "label": i % 2,
                             "score": i / 7, "tags": ["a", "é"][: i % 3]}) for i in range(count)]


@pytest.mark.parametrize("bad_value, feature, error", [
    pytest.param(2, "label", "class id 2", id="class-id-out-of-range"),
    pytest.param(float("nan"), "score", "finite", id="nan-where-forbidden"),
    pytest.param(np.zeros((4, 4, 3), np.float32), "image", "uint8 array", id="tensor-wrong-dtype"),
    pytest.param(["\ud800"], "tags", "UTF-8", id="lone-surrogate"),
])
def test_one_bad_sample_gives_the_same_dead_letter_and_entries(bad_value, feature, error):
    samples = small_samples(20)
    samples[7] = Sample(samples[7].key, {**samples[7].values, feature: bad_value})
    encoder = EntryEncoder(SMALL, salt="s", max_record_bytes=1 << 20, feature_transforms={}, reread_min_bytes=0)
    outcomes = list(encoder.encode_chunk(samples))
    assert outcomes == [encoder.encode(sample) for sample in samples]
    dead = outcomes[7]
    assert type(dead) is DeadLetter and dead.feature == feature and error in dead.message
    assert dead.error_type == SampleError.__name__
    assert sum(type(o) is DeadLetter for o in outcomes) == 1


def test_records_over_the_cap_are_dead_letters_as_one_by_one():
    samples = small_samples(10)
    size = len(SampleEncoder(SMALL).encode(samples[0])) + 16
    encoder = EntryEncoder(SMALL, salt="s", max_record_bytes=size, feature_transforms={}, reread_min_bytes=0)
    outcomes = list(encoder.encode_chunk(samples))
    assert outcomes == [encoder.encode(sample) for sample in samples]
    assert any(type(o) is DeadLetter and o.stage.value == "encode" for o in outcomes)


def test_valid_chunk_takes_the_batch_path_and_file_refs_do_not():
    samples = small_samples(5)
    assert BatchEncoder(SMALL).encode([s.values for s in samples]) is not None
    with_file = [Sample("f", {**samples[0].values, "tags": FileRef("/nonexistent")})]
    encoder = EntryEncoder(SMALL, salt="s", max_record_bytes=1 << 20, feature_transforms={}, reread_min_bytes=0)
    assert list(encoder.encode_chunk(with_file)) == [encoder.encode(with_file[0])]
    assert BatchEncoder(Schema({"b": Scalar(DType.BYTES)})).encode(
        [{"b": bytes(batch_encoder.LARGE_RECORD_BYTES)}]) is None  # large records: one by one


@SETTINGS
@given(st.lists(st.text(), max_size=8), st.text(max_size=70))
def test_key_digests_are_key_hash(keys, salt):
    keys.append("\ud800 lone surrogate")
    assert [int.from_bytes(d, "big") for d in key_digests(keys, salt)] == [key_hash(k, salt) for k in keys]


@SETTINGS
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_chunk_framing_is_frame_parts(records):
    # Joined, each row is its record: bytes and arrays (the parts the batch encoder gives).
    parts = [(r[:1], np.frombuffer(r[1:], np.uint8), b"") if r else (r,) for r in records]
    headers, footers = frame_parts_of_chunk(parts, list(map(len, records)))
    assert list(zip(headers, footers)) == [frame_parts(r) for r in records]


@SETTINGS
@given(st.lists(st.lists(int64s, max_size=5), max_size=6))
def test_packed_varints_are_varints(groups):
    flat = np.array([v for g in groups for v in g], np.int64)
    counts = np.array([len(g) for g in groups], np.int64)
    assert wire.packed_varints(flat, counts) == [b"".join(map(wire.varint, g)) for g in groups]


def test_varint_matches_a_known_encoding():
    # Protocol Buffers' encoding guide: 150 is 96 01; -1 as int64 is ten bytes.
    assert wire.varint(150) == b"\x96\x01"
    assert wire.varint(-1) == b"\xff" * 9 + b"\x01"

"""File-backed records sized from listed file sizes, and rebuilt around the files' bytes, are the
protobuf library's records.

``RecordBuilder.listed_record_bytes`` encodes the sample with each file's value empty (the protobuf
library) and adds the files' sizes to the record's lengths (``wire.record_bytes_with_values``);
``RecordBuilder.build_parts`` splices the files' bytes into that record without copying them
(``wire.record_parts_with_values``). The reference is the record the library builds with each
file's bytes in place: for random schemas (every feature type, Example and SequenceExample) and
sizes around every varint width, the lengths are equal and the parts joined are its bytes.
"""

from __future__ import annotations

import os
import pickle
import tempfile

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from beam_tfrecord.core import proto, wire
from beam_tfrecord.core.batch_encoder import BatchEncoder
from beam_tfrecord.core.framing import framed_size
from beam_tfrecord.core.runs import REFERENCE, entry_kind, entry_reference
from beam_tfrecord.core.samples import DeadLetter, FileRef, Sample, Stage
from beam_tfrecord.core.schema import DType, Scalar, Schema, VarList
from beam_tfrecord.encoding.entries import EntryEncoder
from beam_tfrecord.encoding.records import RecordBuilder
from tests.core.test_batch_encode import SETTINGS, features_and_values, names

# Lengths where a varint of the value, or of a length around it, changes width (1, 2, 3, 4 bytes).
file_sizes = st.one_of(st.integers(0, 300), st.integers(16_250, 16_400), st.integers(2**21 - 120, 2**21 + 8))


@st.composite
def file_backed_samples(draw):
    """(schema, sample with FileRef values, the same sample with each file's bytes in place)."""
    others = draw(st.dictionaries(names.filter(lambda n: n != "steps"), features_and_values(), max_size=3))
    files = draw(st.dictionaries(names.filter(lambda n: n not in others and n != "steps"), file_sizes,
                                 min_size=1, max_size=3))  # "steps": the sequence feature's name
    sequence = {"steps": VarList(DType.INT64)} if draw(st.booleans()) else {}
    schema = Schema({**{name: feature for name, (feature, _) in others.items()},
                     **dict.fromkeys(files, Scalar(DType.BYTES))}, sequence_features=sequence)
    values = {name: draw(strategy) for name, (_, strategy) in others.items()}
    if sequence:
        values["steps"] = draw(st.lists(st.lists(st.integers(-5, 2**40), max_size=3), max_size=3))
    numbered = list(enumerate(files.items()))
    listed = Sample("k", {**values, **{name: FileRef(f"/data/{i}", size) for i, (name, size) in numbered}})
    real = Sample("k", {**values, **{name: bytes([i % 251]) * size for i, (name, size) in numbered}})
    return schema, listed, real


@SETTINGS
@given(file_backed_samples())
def test_listed_record_bytes_are_the_real_records_length(case):
    schema, listed, real = case
    builder = RecordBuilder(schema, {})
    record = builder.build(real)
    assert not isinstance(record, DeadLetter)
    assert builder.listed_record_bytes(listed, min_file_bytes=0) == len(record)


@SETTINGS
@given(file_backed_samples())
def test_the_spilled_reference_entry_carries_the_real_framed_size(case):
    schema, listed, real = case
    files = {name: value for name, value in listed.values.items() if isinstance(value, FileRef)}
    assume(sum(file.size_bytes for file in files.values()) >= 1)  # reread_min_bytes below
    encoder = EntryEncoder(schema, salt="s", max_record_bytes=1 << 30, feature_transforms={}, reread_min_bytes=1)
    record = RecordBuilder(schema, {}).build(real)
    assert not isinstance(record, DeadLetter)
    entry = encoder.encode(listed)
    assert isinstance(entry, bytes) and entry_kind(entry) == REFERENCE
    size, sample_pickle = entry_reference(entry)
    assert size == framed_size(len(record))
    spilled = pickle.loads(sample_pickle)  # what the shard writer rebuilds the record from
    assert spilled.key == listed.key and {n: v for n, v in spilled.values.items() if n in files} == files
    assert encoder.num_listed == 1


@SETTINGS
@given(file_backed_samples())
def test_a_record_rebuilt_around_the_files_bytes_is_the_librarys_record(case):
    schema, listed, real = case
    builder = RecordBuilder(schema, {})
    with tempfile.TemporaryDirectory() as folder:
        files = {}
        for name, value in real.values.items():
            if isinstance(listed.values[name], FileRef):
                files[name] = FileRef(os.path.join(folder, f"{len(files)}.bin"))
                with open(files[name].path, "wb") as handle:
                    handle.write(value)
        built = builder.build_parts(Sample(listed.key, {**listed.values, **files}))
    assert isinstance(built, tuple)
    parts, length = built
    record = builder.build(real)
    assert b"".join(parts) == record and length == len(record)
    assert all(real.values[name] in parts for name in files)  # each file's bytes are one part, whole


def test_a_bad_value_beside_the_files_is_the_same_dead_letter_as_when_they_are_read():
    schema = Schema({"blob": Scalar(DType.BYTES), "label": Scalar(DType.INT64)})
    builder = RecordBuilder(schema, {})
    listed = builder.listed_record_bytes(Sample("cats/1", {"blob": FileRef("/x", 10), "label": 2.5}), min_file_bytes=0)
    read = builder.build(Sample("cats/1", {"blob": bytes(10), "label": 2.5}))
    assert isinstance(listed, DeadLetter) and listed == read
    assert (listed.stage, listed.feature) == (Stage.VALIDATE, "label")


@pytest.mark.parametrize("values, reason", [
    ({"blob": FileRef("/x", None), "label": 1}, "no listed size"),
    ({"blob": FileRef("/x", 5), "label": 1}, "smaller than min_file_bytes"),
    ({"blob": b"in memory", "label": 1}, "no file"),
])
def test_no_listed_size_when_the_record_cannot_be_sized_from_the_listing(values, reason):
    builder = RecordBuilder(Schema({"blob": Scalar(DType.BYTES), "label": Scalar(DType.INT64)}), {})
    assert builder.listed_record_bytes(Sample("k", values), min_file_bytes=6) is None, reason


def test_a_record_that_does_not_start_with_its_features_is_refused():
    with pytest.raises(ValueError, match="starts with its features"):
        wire.record_bytes_with_values(b"\x12\x00", {"blob": 3})


def test_a_file_that_cannot_be_read_is_the_dead_letter_build_gives():
    builder = RecordBuilder(Schema({"blob": Scalar(DType.BYTES)}), {})
    sample = Sample("cats/1", {"blob": FileRef("/no/such/file.bin")})
    rebuilt, built = builder.build_parts(sample), builder.build(sample)
    assert isinstance(rebuilt, DeadLetter) and rebuilt == built and rebuilt.stage is Stage.READ


@pytest.mark.parametrize("record, values, error", [
    (b"\x0a\x00", {"blob": b"x"}, r"features \['blob'\] are not in the record"),
    (None, {"blob": b"x"}, "feature 'blob' is not one empty bytes value in the record"),
], ids=["absent", "not-empty"])
def test_a_value_is_spliced_only_where_the_record_holds_it_empty(record, values, error):
    if record is None:  # the feature holds a value already
        record = RecordBuilder(Schema({"blob": Scalar(DType.BYTES)}), {}).build(Sample("k", {"blob": b"full"}))
    with pytest.raises(ValueError, match=error):
        wire.record_parts_with_values(record, values)


@SETTINGS
@given(names, file_sizes)
def test_a_bytes_value_entry_is_sized_as_the_library_writes_it(name, size):
    features = proto.Features()
    features.feature[name].bytes_list.value.append(b"x" * size)
    assert wire.bytes_value_entry_bytes(len(name.encode("utf-8")), size) == len(
        features.SerializeToString(deterministic=True))


@st.composite
def file_backed_chunks(draw):
    """(schema, chunk of samples with FileRef values, the same samples with each file's bytes in place):
    one schema, so every sample has the same file features, as a source's chunk has."""
    others = draw(st.dictionaries(names.filter(lambda n: n != "steps"), features_and_values(), max_size=3))
    files = draw(st.lists(names.filter(lambda n: n not in others), min_size=1, max_size=2, unique=True))
    schema = Schema({**{name: feature for name, (feature, _) in others.items()},
                     **dict.fromkeys(files, Scalar(DType.BYTES))})
    listed, real = [], []
    for i in range(draw(st.integers(1, 6))):
        values = {name: draw(strategy) for name, (_, strategy) in others.items()}
        sizes = {name: draw(file_sizes) for name in files}
        listed.append(Sample(f"k{i}", {**values, **{n: FileRef(f"/data/{i}-{n}", s) for n, s in sizes.items()}}))
        real.append(Sample(f"k{i}", {**values, **{n: bytes([i]) * s for n, s in sizes.items()}}))
    return schema, listed, real


@SETTINGS
@given(file_backed_chunks())
def test_a_chunk_sized_at_once_has_the_real_records_lengths(case):
    schema, listed, real = case
    builder = RecordBuilder(schema, {})
    sizes = builder.listed_record_bytes_of_chunk(listed, BatchEncoder(schema), min_file_bytes=0)
    assume(sizes is not None)  # a value the batch encoder leaves to the reference
    assert sizes == [len(builder.build(sample)) for sample in real]


@SETTINGS
@given(file_backed_chunks())
def test_a_chunks_entries_are_the_ones_made_sample_by_sample(case):
    schema, listed, _ = case
    options = {"salt": "s", "max_record_bytes": 1 << 30, "feature_transforms": {}, "reread_min_bytes": 0}
    chunked, one_by_one = EntryEncoder(schema, **options), EntryEncoder(schema, **options)
    assert list(chunked.encode_chunk(listed)) == [one_by_one.encode(sample) for sample in listed]
    assert chunked.num_listed == one_by_one.num_listed


BLOBS = Schema({"image": Scalar(DType.BYTES), "label": Scalar(DType.INT64)})


@pytest.mark.parametrize("chunk, sized_at_once", [
    ([Sample(f"b{i}", {"image": FileRef(f"/b{i}", 200_000 + i), "label": i % 10}) for i in range(50)], True),
    ([Sample("a", {"image": FileRef("/a", 10), "label": 1}), Sample("b", {"image": FileRef("/b"), "label": 2})],
     False),  # a file without a listed size
    ([Sample("a", {"image": FileRef("/a", 10), "label": 1}), Sample("b", {"image": b"in memory", "label": 2})],
     False),  # a sample without a file
    ([Sample("a", {"image": FileRef("/a", 10), "label": 1}), Sample("b", {"image": FileRef("/b", 9), "label": 2.5})],
     False),  # a bad value: sample by sample, so that its dead letter names it
], ids=["blobs", "unlisted", "in-memory", "bad-label"])
def test_which_chunks_are_sized_at_once(chunk, sized_at_once):
    sizes = RecordBuilder(BLOBS, {}).listed_record_bytes_of_chunk(chunk, BatchEncoder(BLOBS), min_file_bytes=0)
    assert (sizes is not None) == sized_at_once
    encoder = EntryEncoder(BLOBS, salt="", max_record_bytes=1 << 30, feature_transforms={}, reread_min_bytes=1)
    entries = list(encoder.encode_chunk(chunk))
    reference = EntryEncoder(BLOBS, salt="", max_record_bytes=1 << 30, feature_transforms={}, reread_min_bytes=1)
    assert entries == [reference.encode(sample) for sample in chunk]
    if chunk[-1].values["label"] == 2.5:
        assert isinstance(entries[-1], DeadLetter) and entries[-1].feature == "label"

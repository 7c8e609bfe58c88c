"""tf.data's dense path over column files: rows of fixed-size numbers decoded without an Example parse, exactly as
``tf.io.parse_example`` gives them; any row it does not take sends its file to the Example parse.

``dense_rows`` against the parse of the same rows (NumPy, no file), then ``read_dataset`` over a root (~60 records,
one Beam build, one native build) whose column files take the uniform path, the row-by-row path, the parse (a row
with an unknown field) and the string path (a variable list), with deleted records: equal to the native build; a
damaged column file (truncated, a flipped bit) fails the dense read naming it.
"""

from __future__ import annotations

import dataclasses

import google_crc32c
import numpy as np
import pytest
import tensorflow as tf
from read_fixtures import add_columns, first_version, record_keys, write_build

from beam_tfrecord import Sample, storage
from beam_tfrecord.core import proto
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.framing import frame, record_spans
from beam_tfrecord.core.manifest import MANIFEST_FILENAME
from beam_tfrecord.core.sample_encoder import SampleEncoder
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
from beam_tfrecord.dataset import load_manifest, version_dir
from beam_tfrecord.reader.decode.dense_rows import dense_rows, dense_specs
from beam_tfrecord.reader.tf_data import read_dataset
from beam_tfrecord.reader.tf_spec import make_batch_parser

FLOATS = {"emb": FixedList(DType.FLOAT32, 4), "s": Scalar(DType.FLOAT32), "t": Tensor(TensorDType.FLOAT16, (2, 3))}
INTS = {"c": ClassLabel(("a", "b", "c")), "n": FixedList(DType.INT64, 2)}
VARIABLE = {"v": VarList(DType.FLOAT32)}
UNKNOWN_FIELD = b"\x12\x00"  # Example's field 2, empty: protobuf (and parse_example) skip it


def _floats(key: str) -> dict:
    i = int(key[1:])
    return {"emb": [i + j / 4 for j in range(4)], "s": -i / 8, "t": np.arange(6, dtype=np.float16).reshape(2, 3) * i}


def _ints(key: str) -> dict:
    i = int(key[1:])
    return {"c": i % 3, "n": [i, -(i ** 5)]}  # negative: 10-byte varints


def _variable(key: str) -> dict:
    return {"v": [0.5] * (int(key[1:]) % 4)}


def _file(rows: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    content = b"".join(frame(row) for row in rows)
    return (np.frombuffer(content, np.uint8), *record_spans(content, name="f", num_records=len(rows)))


def _parsed(schema: Schema, rows: list[bytes]) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in make_batch_parser(schema)(tf.constant(rows)).items()}


def _swapped(row: bytes) -> bytes:
    """The row with its map entries in reverse order: another layout of the same Example."""
    example = proto.Example.FromString(row)
    body = b"".join(proto.Example(features=proto.Features(feature={name: example.features.feature[name]}))
                    .SerializeToString()[2:] for name in sorted(example.features.feature, reverse=True))
    return b"\x0a" + bytes([len(body)]) + body


def _rows(features: dict, values, count: int = 40) -> list[bytes]:
    encoder = SampleEncoder(Schema(features=features))
    return [encoder.encode(Sample(f"k{i}", values(f"k{i}"))) for i in range(count)]


@pytest.mark.parametrize("features, values, change", [
    (FLOATS, _floats, None), (INTS, _ints, None), (FLOATS, _floats, "deleted"), (INTS, _ints, "deleted")],
    ids=["uniform", "varints", "deleted-rows-empty", "varints-deleted-rows-empty"])
def test_dense_rows_equal_the_example_parse(features: dict, values, change: str | None) -> None:
    schema = Schema(features=features)
    rows = _rows(features, values)
    live = np.ones(len(rows), bool)
    if change == "deleted":
        live[[0, 9, 10]] = False
    read = [row if kept else b"" for row, kept in zip(rows, live)]
    got = dense_rows(*_file(read), live, schema, dense_specs(schema), path="f")
    assert got is not None
    want = _parsed(schema, rows)
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name][live], value[live], err_msg=name)
        assert not got[name][~live].any()


@pytest.mark.parametrize("row", ["empty", "unknown", "missing", "swapped"],
                         ids=["empty-live-row", "unknown-field", "missing-feature", "entries-in-another-order"])
def test_a_row_of_another_layout_leaves_the_file_to_the_parse(row: str) -> None:
    schema = Schema(features=FLOATS)
    rows = _rows(FLOATS, _floats)
    rows[5] = {"empty": b"", "unknown": rows[5] + UNKNOWN_FIELD, "swapped": _swapped(rows[5]),
               "missing": _rows({"emb": FLOATS["emb"]}, lambda key: {"emb": [1.0] * 4}, 1)[0]}[row]
    assert dense_rows(*_file(rows), np.ones(len(rows), bool), schema, dense_specs(schema), path="f") is None
    if row in ("unknown", "swapped"):  # the same values in another layout: the parse reads them
        np.testing.assert_array_equal(_parsed(schema, rows)["emb"][5], _floats("k5")["emb"])


def test_rows_all_deleted_are_not_read() -> None:
    schema = Schema(features=FLOATS)
    got = dense_rows(*_file([b""] * 3), np.zeros(3, bool), schema, dense_specs(schema), path="f")
    assert got is not None and {name: (v.dtype, v.shape, v.any()) for name, v in got.items()} == {
        "emb": (np.float32, (3, 4), False), "s": (np.float32, (3,), False), "t": (np.float16, (3, 2, 3), False)}


def test_only_fixed_counts_of_numbers_are_dense() -> None:
    assert dense_specs(Schema(features={**FLOATS, **INTS})) is not None
    for other in (VARIABLE, {"id": Scalar(DType.STRING)}, {"image": Image(ImageFormat.PNG)}):
        assert dense_specs(Schema(features={**FLOATS, **other})) is None, other


@dataclasses.dataclass(frozen=True)
class Roots:
    root: str
    native: str


FIRST, SECOND = "20260101T000000.000Z-d1d1d1", "20260102T000000.000Z-d2d2d2"
COUNT = 60
BASE = Schema(features={"key": Scalar(DType.STRING), "i": Scalar(DType.INT64)})


def _with_a_row_of_another_layout(root: str, shard: int, position: int) -> None:
    """Column file 0 of shard ``shard`` rewritten with row ``position`` ending in an unknown field (same values),
    its size and CRC32C in the manifest."""
    directory = version_dir(root, SECOND)
    manifest = load_manifest(directory)
    split = manifest.split("train")
    base = split.shards[shard]
    column = base.columns[0]
    path = storage.join(directory, column.filename)
    content = storage.read_bytes(path)
    starts, lengths = record_spans(content, name=path, num_records=base.num_records)
    rows = [content[start:start + length] for start, length in zip(starts.tolist(), lengths.tolist())]
    rows[position] += UNKNOWN_FIELD
    content = b"".join(frame(row) for row in rows)
    storage.write_bytes_atomic(path, content)
    changed = dataclasses.replace(column, num_bytes=len(content), crc32c=f"{google_crc32c.value(content):08x}")
    shards = tuple(dataclasses.replace(s, columns=(changed, *s.columns[1:])) if s is base else s for s in split.shards)
    manifest = dataclasses.replace(manifest, splits=tuple(dataclasses.replace(s, shards=shards) if s is split else s
                                                          for s in manifest.splits))
    storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode())


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Roots:
    tmp = str(tmp_path_factory.mktemp("dense"))
    samples = [Sample(f"k{i:04d}", {"key": f"k{i:04d}", "i": i}) for i in range(COUNT)]
    root, native = f"{tmp}/root", f"{tmp}/native"
    manifest = first_version(root, FIRST, samples, BASE, file_format=FileFormat.TFRECORD)
    shards = manifest.split("train").shards
    deleted = {shards[2].filename: [1, 2]}
    add_columns(root, FIRST, SECOND, adds=[(FLOATS, _floats), (INTS, _ints), (VARIABLE, _variable)], deleted=deleted)
    _with_a_row_of_another_layout(root, 1, 3)
    keys = record_keys(version_dir(root, FIRST), manifest, shards[2], FIRST)
    gone = {keys[position] for position in deleted[shards[2].filename]}
    write_build(native, [Sample(s.key, {**s.values, **_floats(s.key), **_ints(s.key), **_variable(s.key)})
                         for s in samples if s.key not in gone], Schema(features={**BASE.features, **FLOATS, **INTS,
                                                                                  **VARIABLE}),
                file_format=FileFormat.TFRECORD)
    return Roots(root, native)


@pytest.mark.parametrize("options", [{}, {"drop_remainder": True}, {"num_workers": 2, "worker_index": 1}],
                         ids=["stored", "drop-remainder", "worker"])
def test_tf_data_reads_the_dense_path_as_the_native_build(roots: Roots, options: dict) -> None:
    """Shard 0's float file takes the uniform path, shard 2's (deleted records) the rows left, shard 1's the parse
    (a row with an unknown field); the int64 files the row-by-row decode, the variable list the strings."""

    def batches(path: str) -> list[dict]:
        return [{name: (value.dtype, value.to_list()) if isinstance(value, tf.RaggedTensor) else value.numpy()
                 for name, value in batch.items()} for batch in read_dataset(path, batch_size=16, **options)]

    got, want = batches(roots.root), batches(roots.native)
    assert [sorted(b) for b in got] == [sorted(b) for b in want]
    for joined, native in zip(got, want):
        for name, value in native.items():
            if isinstance(value, tuple):  # the variable list: ragged
                assert joined[name] == value, name
                continue
            assert joined[name].dtype == value.dtype and joined[name].shape == value.shape, name
            np.testing.assert_array_equal(joined[name], value, err_msg=name)


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_column_file_fails_the_dense_read_naming_it(roots: Roots, tmp_path, damage: str) -> None:
    import shutil

    copy = str(tmp_path / "root")
    shutil.copytree(roots.root, copy)
    column = load_manifest(copy).split("train").shards[0].columns[0].filename  # the floats: the uniform path
    path = f"{version_dir(copy, SECOND)}/{column}"
    with open(path, "r+b") as file:
        if damage == "truncated":
            file.truncate(file.seek(0, 2) - 1)
        else:
            file.seek(40)
            byte = file.read(1)
            file.seek(40)
            file.write(bytes([byte[0] ^ 1]))
    expected = "bytes, the manifest says" if damage == "truncated" else "CRC32C"
    with pytest.raises(tf.errors.OpError, match=f"CorruptShardError.*{column}.*{expected}"):
        list(read_dataset(copy, batch_size=16))

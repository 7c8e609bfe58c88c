"""CSV and JSONL manifests round-trip: typed columns, file columns, missing values, sequences."""

import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image as PILImage

from beam_tfrecord.core.infer import infer_schema
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
from beam_tfrecord.errors import SourceError
from beam_tfrecord.sources.rows import RowConverter, RowOptions
from beam_tfrecord.sources.tabular import CsvRowReader, ReadCsvManifest, ReadJsonlManifest
from beam_tfrecord.storage.paths import resolve_path
from pipelines import build_from_manifest

SCHEMA = Schema({
    "id": Scalar(DType.INT64),
    "image": Image(ImageFormat.PNG),
    "label": ClassLabel(("cat", "dog")),
    "score": Scalar(DType.FLOAT32, default=-1.0),
    "caption": Scalar(DType.STRING, default="none"),
    "point": FixedList(DType.FLOAT32, 2),
    "tags": VarList(DType.STRING),
    "grid": Tensor(TensorDType.UINT8, (2, 2)),
})
SPEC = {"id": tf.io.FixedLenFeature([], tf.int64), "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64), "score": tf.io.FixedLenFeature([], tf.float32),
        "caption": tf.io.FixedLenFeature([], tf.string), "point": tf.io.FixedLenFeature([2], tf.float32),
        "tags": tf.io.RaggedFeature(tf.string), "grid": tf.io.FixedLenFeature([], tf.string)}


def _png(seed: int) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(np.full((4, 5, 3), seed * 40, np.uint8)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("manifest")
    (root / "images").mkdir()
    for i in range(3):
        (root / "images" / f"{i}.png").write_bytes(_png(i))
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "abs.png").write_bytes(_png(5))
    return str(root)


def _check_round_trip(output: str, parse, folder: str) -> None:
    rows = parse(output, SPEC)
    order = np.argsort(rows["id"])
    pick = lambda name: [rows[name][i] for i in order]  # noqa: E731
    assert pick("id") == [0, 1, 2]
    assert pick("image") == [_png(0), _png(1), _png(5)]
    assert pick("label") == [0, 1, 1]
    assert pick("score") == [0.5, -1.0, 2.0]  # row 1: missing -> the default
    assert pick("caption") == [b"a, quoted\nmulti-line caption", b"none", "café ✓".encode()]
    assert [list(p) for p in pick("point")] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert pick("tags") == [[b"x", b"y"], [], [b"z"]]
    assert [np.frombuffer(g, np.uint8).reshape(2, 2).tolist() for g in pick("grid")] == [
        [[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 255]]]


def test_csv_manifest_round_trip(folder, tmp_path, write, parse):
    absolute = os.path.join(folder, "elsewhere", "abs.png")
    (tmp_path / "m.csv").write_text(
        "id,image,label,score,caption,point,tags,grid,unused\n"
        '0,images/0.png,cat,0.5,"a, quoted\nmulti-line caption","[1, 2]","[""x"", ""y""]","[[0,1],[2,3]]",q\n'
        "1,images/1.png,1,,,\"[3,4]\",,\"[[4,5],[6,7]]\",q\n"
        f'2,{absolute},dog,2,café ✓,"[5,6]","[""z""]","[[8,9],[10,255]]",q\n', encoding="utf-8")
    (tmp_path / "images").symlink_to(os.path.join(folder, "images"))
    manifest = write(ReadCsvManifest(str(tmp_path / "m.csv"), schema=SCHEMA, options=RowOptions(key_column="id")),
                     SCHEMA, str(tmp_path / "out"))
    assert (manifest.num_inputs, manifest.num_rejected) == (3, 0)
    _check_round_trip(str(tmp_path / "out"), parse, folder)


def test_jsonl_manifest_round_trip(folder, tmp_path, write, parse):
    rows = [
        {"id": 0, "image": "images/0.png", "label": "cat", "score": 0.5, "caption": "a, quoted\nmulti-line caption",
         "point": [1, 2], "tags": ["x", "y"], "grid": [[0, 1], [2, 3]]},
        {"id": 1, "image": "images/1.png", "label": 1, "score": None, "point": [3, 4], "grid": [[4, 5], [6, 7]]},
        {"id": 2, "image": os.path.join(folder, "elsewhere", "abs.png"), "label": "dog", "score": 2,
         "caption": "café ✓", "point": [5.0, 6.0], "tags": ["z"], "grid": [[8, 9], [10, 255]]},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n\n" for r in rows), encoding="utf-8")
    (tmp_path / "images").symlink_to(os.path.join(folder, "images"))
    manifest = write(ReadJsonlManifest(str(tmp_path / "m.jsonl"), schema=SCHEMA, options=RowOptions(key_column="id"),
                                       chunk_size=2), SCHEMA, str(tmp_path / "out"))
    assert (manifest.num_inputs, manifest.num_rejected) == (3, 0)
    _check_round_trip(str(tmp_path / "out"), parse, folder)


def test_jsonl_sequence_example_round_trip(tmp_path, write, parse):
    """Per-step features: a variable number of boxes [n, 4] and tokens per sample."""
    schema = Schema({"image_id": Scalar(DType.INT64)},
                    sequence_features={"boxes": FixedList(DType.FLOAT32, 4), "tokens": Scalar(DType.INT64)})
    rows = [{"image_id": 1, "boxes": [[0, 0, 1, 1], [0.5, 0.5, 1, 1]], "tokens": [5, 6, 7]},
            {"image_id": 2, "boxes": [], "tokens": [9]},
            {"image_id": 3, "boxes": [[0.25, 0, 0.5, 1]]}]
    (tmp_path / "seq.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write(ReadJsonlManifest(str(tmp_path / "seq.jsonl"), schema=schema), schema, str(tmp_path / "out"))
    parsed = parse(str(tmp_path / "out"), {"image_id": tf.io.FixedLenFeature([], tf.int64)},
                   sequence_spec={"boxes": tf.io.RaggedFeature(tf.float32), "tokens": tf.io.RaggedFeature(tf.int64)})
    by_id = {i: (b, t) for i, b, t in zip(parsed["image_id"], parsed["boxes"], parsed["tokens"])}
    assert by_id == {1: ([[0, 0, 1, 1], [0.5, 0.5, 1, 1]], [[5], [6], [7]]), 2: ([], [[9]]),
                     3: ([[0.25, 0, 0.5, 1]], [])}


def test_csv_without_header_and_default_keys(tmp_path):
    (tmp_path / "rows.csv").write_text("1,a\n\n2,b\n")
    schema = Schema({"n": Scalar(DType.INT64), "s": Scalar(DType.STRING)})
    reader = CsvRowReader(schema, RowOptions(), column_names=("n", "s"))
    assert list(reader("rows.csv", str(tmp_path / "rows.csv"))) == [
        Sample("rows.csv:1", {"n": 1, "s": "a"}), Sample("rows.csv:2", {"n": 2, "s": "b"})]


def test_paths_resolve_against_the_manifest_folder():
    assert resolve_path("gs://bucket/data", "img/../a.jpg") == "gs://bucket/data/a.jpg"
    assert resolve_path("/data", "gs://other/x.jpg") == "gs://other/x.jpg"
    assert resolve_path("/data/m", "/abs/x.jpg") == "/abs/x.jpg"
    assert resolve_path("/data/m", "./x/../../y.jpg") == "/data/y.jpg"


def test_gs_path_outside_allowed_root_is_a_dead_letter():
    converter = RowConverter(Schema({"image": Image(ImageFormat.JPEG)}),
                             RowOptions(allowed_root="gs://bucket/data"))
    inside = converter.convert("m.csv", "gs://bucket/data", 1, {"image": "a/b.jpg"}, from_text=True)
    outside = converter.convert("m.csv", "gs://bucket/data", 2, {"image": "../secret.jpg"}, from_text=True)
    assert inside == Sample("m.csv:1", {"image": FileRef("gs://bucket/data/a/b.jpg")})
    assert outside == DeadLetter(
        key="m.csv:2", stage=Stage.READ, error_type="PathOutsideRootError", feature="image",
        message="feature 'image': cannot read 'gs://bucket/secret.jpg' (it resolves outside the allowed root "
                "'gs://bucket/data') in sample 'm.csv:2'")


def test_file_columns_must_be_schema_features():
    with pytest.raises(SourceError, match=r"file columns \['audio'\] are not features of the schema \['n'\]"):
        ReadCsvManifest("x.csv", schema=Schema({"n": Scalar(DType.INT64)}),
                        options=RowOptions(file_columns=frozenset({"audio"})))


def test_inferred_schema_is_printed_and_written_through_the_job(folder, tmp_path, capsys, parse):
    (tmp_path / "images").symlink_to(os.path.join(folder, "images"))
    (tmp_path / "m.csv").write_text("name,image,size,weight,vec\n"
                                    "a,images/0.png,3,0.5,\"[1,2]\"\nb,images/1.png,,1,\"[3]\"\n")
    manifest = build_from_manifest.run(["--manifest", str(tmp_path / "m.csv"), "--key_column", "name",
                                        "--output", str(tmp_path / "out")])
    expected = Schema({"image": Image(ImageFormat.PNG), "size": Scalar(DType.INT64, default=0),
                       "weight": Scalar(DType.FLOAT32), "vec": VarList(DType.INT64)})
    assert manifest.schema == expected
    printed = capsys.readouterr().out
    assert "Inferred schema (save it to a file and pass --schema FILE to pin it):" in printed
    assert json.dumps(expected.to_json(), indent=2, sort_keys=True) in printed
    rows = parse(str(tmp_path / "out"), {"size": tf.io.FixedLenFeature([], tf.int64),
                                         "vec": tf.io.RaggedFeature(tf.int64)})
    assert sorted(zip(rows["size"].tolist(), rows["vec"])) == [(0, [3]), (3, [1, 2])]


def test_infer_schema_from_typed_rows():
    rows = [{"a": 1, "b": 1.5, "c": "x", "d": [[1.0, 2.0]], "e": None}, {"a": 2, "b": 2, "c": "y", "d": [[3, 4]]}]
    assert infer_schema(rows, from_text=False) == Schema({
        "a": Scalar(DType.INT64), "b": Scalar(DType.FLOAT32), "c": Scalar(DType.STRING),
        "d": Tensor(TensorDType.FLOAT32, (1, 2)), "e": Scalar(DType.STRING, default="")})

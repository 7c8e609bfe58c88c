"""The bad-input corpus: every kind of bad sample, through the manifest job, in one pipeline run.

Each bad row has exactly one defect. The job runs once allowing skips (it publishes the good
rows and lists every bad one with its reason) and once with the default threshold 0 (it fails
and publishes nothing). Every reason is asserted word for word.
"""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image as PILImage

from beam_tfrecord.core.schema import ClassLabel, DType, Image, ImageFormat, Scalar, Schema
from beam_tfrecord.verify import verify_dataset
from pipelines import build_from_manifest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = "id,photo,mask,label,count,score,caption,blob"
SCHEMA = Schema({
    "photo": Image(ImageFormat.JPEG, shape=(16, 16, 3)),
    "mask": Image(ImageFormat.PNG),
    "label": ClassLabel(("cat", "dog")),
    "count": Scalar(DType.INT64),
    "score": Scalar(DType.FLOAT32),
    "caption": Scalar(DType.STRING, default=""),
    "blob": Scalar(DType.BYTES, default=b""),
})


def _image_bytes(size: int, fmt: str, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    PILImage.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def write_corpus(root: str) -> dict[str, tuple[str, str, str | None, str]]:
    """Writes the files and manifest.csv; returns key -> (stage, error type, feature, message)."""
    data = os.path.join(root, "data")
    os.makedirs(os.path.join(data, "img"))
    files = {
        "img/good.jpg": _image_bytes(16, "JPEG", 0), "img/mask.png": _image_bytes(8, "PNG", 1),
        "img/empty.jpg": b"", "img/notes.jpg": b"these are my notes, not a photo\n",
        "img/big.jpg": _image_bytes(32, "JPEG", 2), "img/huge.bin": os.urandom(300_000),
    }
    files["img/truncated.jpg"] = files["img/good.jpg"][:-60]  # header intact, scan data cut short
    files["img/truncated.png"] = files["img/mask.png"][: len(files["img/mask.png"]) // 2]
    for name, payload in files.items():
        with open(os.path.join(data, name), "wb") as handle:
            handle.write(payload)
    with open(os.path.join(root, "outside.jpg"), "wb") as handle:
        handle.write(files["img/good.jpg"])
    good = "img/good.jpg,img/mask.png,cat,3,0.5"
    rows = [
        f"good-1,{good},plain,", f"good-2,{good},\"two\nlines, quoted\",",
        "good-3,img/good.jpg,img/mask.png,dog,4,1.5,,",
        "missing-file,img/missing.jpg,img/mask.png,cat,1,0.5,,",
        "zero-byte,img/empty.jpg,img/mask.png,cat,1,0.5,,",
        "truncated-jpeg,img/truncated.jpg,img/mask.png,cat,1,0.5,,",
        "truncated-png,img/good.jpg,img/truncated.png,cat,1,0.5,,",
        "text-as-jpg,img/notes.jpg,img/mask.png,cat,1,0.5,,",
        "wrong-size,img/big.jpg,img/mask.png,cat,1,0.5,,",
        "wrong-type,img/good.jpg,img/mask.png,cat,abc,0.5,,",
        "nan-score,img/good.jpg,img/mask.png,cat,1,nan,,",
        "inf-score,img/good.jpg,img/mask.png,cat,1,-inf,,",
        "unknown-label,img/good.jpg,img/mask.png,bird,1,0.5,,",
        "too-few-columns,img/good.jpg,img/mask.png,cat",
        "outside-root,../outside.jpg,img/mask.png,cat,1,0.5,,",
        "too-large,img/good.jpg,img/mask.png,cat,1,0.5,,img/huge.bin",
    ]
    with open(os.path.join(data, "manifest.csv"), "wb") as handle:
        handle.write((HEADER + "\n" + "\n".join(rows) + "\n").encode())
        handle.write(b"bad-utf8,img/good.jpg,img/mask.png,cat,1,0.5,caf\xe9,\n")
    img = os.path.join(data, "img")
    photo = "feature 'photo': expected "
    truncated_jpeg, truncated_png = len(files["img/truncated.jpg"]), len(files["img/truncated.png"])
    return {
        "missing-file": ("read", "SampleReadError", "photo",
                         f"feature 'photo': cannot read '{img}/missing.jpg' (FileNotFoundError: "),
        "zero-byte": ("validate", "SampleError", "photo",
                      photo + "jpeg image bytes, got an empty (0-byte) value in sample 'zero-byte'"),
        "truncated-jpeg": ("validate", "SampleError", "photo",
                           photo + f"a complete, decodable jpeg image, got image of {truncated_jpeg} bytes "
                           "(OSError: image file is truncated"),
        "truncated-png": ("validate", "SampleError", "mask",
                          f"feature 'mask': expected a complete, decodable png image, got image of {truncated_png} "
                          "bytes (OSError: Truncated File Read) in sample 'truncated-png'"),
        "text-as-jpg": ("validate", "SampleError", "photo",
                        photo + "jpeg image bytes, got 32 bytes starting b'these ar', not a jpeg signature "
                        "in sample 'text-as-jpg'"),
        "wrong-size": ("validate", "SampleError", "photo",
                       photo + "jpeg image of shape (16, 16, 3), got shape (32, 32, 3) in sample 'wrong-size'"),
        "wrong-type": ("validate", "SampleError", "count",
                       "feature 'count': expected int64 scalar, got str 'abc' in sample 'wrong-type'"),
        "nan-score": ("validate", "SampleError", "score",
                      "feature 'score': expected float32 scalar that is finite (the schema forbids NaN and inf), "
                      "got float nan in sample 'nan-score'"),
        "inf-score": ("validate", "SampleError", "score",
                      "feature 'score': expected float32 scalar that is finite (the schema forbids NaN and inf), "
                      "got float -inf in sample 'inf-score'"),
        "unknown-label": ("validate", "SampleError", "label",
                          "feature 'label': expected a class id in [0, 2) or one of the class names "
                          "['cat', 'dog'], got unknown class name 'bird' in sample 'unknown-label'"),
        "bad-utf8": ("validate", "SampleError", "caption",
                     "feature 'caption': expected string scalar of valid UTF-8, got invalid UTF-8 byte b'\\xe9' "
                     "at position 3 in sample 'bad-utf8'"),
        "too-few-columns": ("read", "MalformedRowError", None,
                            "expected 8 columns (id, photo, mask, label, count, score, caption, blob), got 4 "
                            "columns in CSV row 14 of manifest.csv in sample 'too-few-columns'"),
        "outside-root": ("read", "PathOutsideRootError", "photo",
                         f"feature 'photo': cannot read '{os.path.join(root, 'outside.jpg')}' (it resolves outside "
                         f"the allowed root '{data}') in sample 'outside-root'"),
        "too-large": ("encode", "SampleError", None,
                      "expected a record of at most 200000 bytes (the hard shard-size cap), got 301"),
    }


def _job_args(root: str, output: str) -> list[str]:
    return ["--manifest", os.path.join(root, "data", "manifest.csv"), "--schema", os.path.join(root, "schema.json"),
            "--key_column", "id", "--file_columns", "blob", "--restrict_paths", "--check_decode",
            "--output", output, "--target_shard_bytes", "100000", "--max_shard_bytes", "200000"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, dict]:
    root = str(tmp_path_factory.mktemp("corpus"))
    expected = write_corpus(root)
    with open(os.path.join(root, "schema.json"), "w") as handle:
        json.dump(SCHEMA.to_json(), handle)
    return root, expected


@pytest.fixture(scope="module")
def skipped_run(corpus) -> tuple[str, object, dict]:
    """The job allowing every sample to be skipped: it publishes the good rows."""
    root, expected = corpus
    output = os.path.join(root, "skipping")
    manifest = build_from_manifest.run(_job_args(root, output) + ["--max_rejected_fraction", "1.0"])
    with open(os.path.join(output, manifest.dead_letters)) as handle:
        letters = {letter["key"]: letter for letter in map(json.loads, handle)}
    return output, manifest, letters


@pytest.mark.parametrize("key", [
    "missing-file", "zero-byte", "truncated-jpeg", "truncated-png", "text-as-jpg", "wrong-size", "wrong-type",
    "nan-score", "inf-score", "unknown-label", "bad-utf8", "too-few-columns", "outside-root", "too-large"])
def test_bad_sample_has_its_exact_reason(corpus, skipped_run, key):
    _, expected = corpus
    _, _, letters = skipped_run
    stage, error_type, feature, message = expected[key]
    letter = letters[key]
    assert (letter["stage"], letter["error_type"], letter["feature"]) == (stage, error_type, feature)
    assert letter["message"].startswith(message), letter["message"]
    assert letter["message"].endswith(f" in sample {key!r}")


def test_every_input_is_accounted_for(corpus, skipped_run):
    _, expected = corpus
    output, manifest, letters = skipped_run
    assert sorted(letters) == sorted(expected)
    assert (manifest.num_inputs, manifest.num_rejected) == (17, 14)
    assert manifest.num_inputs == sum(s.num_records for s in manifest.shards) + manifest.num_rejected
    assert verify_dataset(output).num_records == 3


def test_good_rows_read_back_equal(corpus, skipped_run):
    import tensorflow as tf

    root, _ = corpus
    output, manifest, _ = skipped_run
    files = [os.path.join(output, s.filename) for s in manifest.shards]
    spec = {"caption": tf.io.FixedLenFeature([], tf.string), "count": tf.io.FixedLenFeature([], tf.int64),
            "label": tf.io.FixedLenFeature([], tf.int64), "photo": tf.io.FixedLenFeature([], tf.string),
            "blob": tf.io.FixedLenFeature([], tf.string)}
    batch = tf.io.parse_example(next(iter(tf.data.TFRecordDataset(files).batch(10))), spec)
    rows = sorted(zip(batch["caption"].numpy().tolist(), batch["count"].numpy().tolist(),
                      batch["label"].numpy().tolist(), batch["blob"].numpy().tolist()))
    assert rows == [(b"", 4, 1, b""), (b"plain", 3, 0, b""), (b"two\nlines, quoted", 3, 0, b"")]
    with open(os.path.join(root, "data", "img", "good.jpg"), "rb") as handle:
        assert set(batch["photo"].numpy().tolist()) == {handle.read()}


def test_default_threshold_fails_through_the_cli_and_publishes_nothing(corpus):
    root, expected = corpus
    output = os.path.join(root, "strict")
    result = subprocess.run([sys.executable, "-m", "pipelines.build_from_manifest", *_job_args(root, output)],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode != 0
    assert ("RejectedSamplesError: 14 of 17 input samples were rejected, more than the allowed fraction 0; "
            "the dataset was NOT published.") in result.stderr
    assert "(Allow skipping with --max_rejected_fraction=0.8236 or more.)" in result.stderr  # 14/17, rounded up
    written = os.listdir(output)
    assert len(written) == 1 and written[0].startswith("dead_letters-"), written
    with open(os.path.join(output, written[0])) as handle:
        assert sorted(json.loads(line)["key"] for line in handle) == sorted(expected)

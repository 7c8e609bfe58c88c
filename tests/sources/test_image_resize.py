"""Image folders: decode + resize + re-encode, with the decoded shape in the schema."""

import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image as PILImage

from beam_tfrecord.core.image_ops import ResizeImage, check_decodable
from beam_tfrecord.core.schema import Image, ImageFormat
from beam_tfrecord.errors import ImageDecodeError, SchemaError
from pipelines import build_image_dataset


def _jpeg(size: tuple[int, int], seed: int) -> bytes:
    out = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    PILImage.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    for label, sizes in (("cats", [(20, 30), (31, 17)]), ("dogs", [(64, 64)])):
        (root / label).mkdir()
        for i, size in enumerate(sizes):
            (root / label / f"{i}.jpg").write_bytes(_jpeg(size, i))
    (root / "dogs" / "broken.jpg").write_bytes(_jpeg((40, 40), 9)[:300])
    return root


@pytest.mark.parametrize("encode, channels", [("jpeg", 3), ("png", 1)])
def test_resize_job_writes_fixed_size_images(folder, tmp_path, encode, channels):
    output = str(tmp_path / "out")
    manifest = build_image_dataset.run(["--input", str(folder), "--output", output, "--resize", "12x16",
                                        "--encode", encode, "--channels", str(channels),
                                        "--max_rejected_fraction", "0.5"])
    assert manifest.schema.features["image"] == Image(ImageFormat(encode), shape=(12, 16, channels))
    assert (manifest.num_inputs, manifest.num_rejected) == (4, 1)
    files = [os.path.join(output, s.filename) for s in manifest.shards]
    records = next(iter(tf.data.TFRecordDataset(files).batch(10)))
    images = tf.io.parse_example(records, {"image": tf.io.FixedLenFeature([], tf.string)})["image"]
    for data in images.numpy():
        assert tf.io.decode_image(data).shape == (12, 16, channels)
    with open(os.path.join(output, manifest.dead_letters)) as handle:
        letter = json.loads(handle.read())
    assert (letter["key"], letter["stage"], letter["error_type"], letter["feature"]) == (
        "dogs/broken.jpg", "decode", "ImageDecodeError", "image")
    assert letter["message"].startswith("feature 'image': cannot decode image of 300 bytes (OSError: ")
    assert letter["message"].endswith(" in sample 'dogs/broken.jpg'")


def test_resize_is_deterministic(folder):
    resize = ResizeImage(8, 8, jpeg_quality=80)
    data = (folder / "cats" / "0.jpg").read_bytes()
    assert resize(data) == resize(data)
    assert PILImage.open(io.BytesIO(resize(data))).size == (8, 8)


def test_resize_options_are_checked():
    with pytest.raises(SchemaError, match=r"channels must be 1 or 3 \(JPEG\) or 1, 3 or 4 \(PNG\), got 4"):
        ResizeImage(8, 8, channels=4, output_format=ImageFormat.JPEG)
    with pytest.raises(SchemaError, match="output_format must be jpeg or png, got 'gif'"):
        ResizeImage(8, 8, output_format=ImageFormat.GIF)


def test_check_decodable_rejects_truncation(folder):
    check_decodable((folder / "cats" / "0.jpg").read_bytes())
    with pytest.raises(ImageDecodeError, match=r"cannot decode image of 300 bytes \(OSError: "):
        check_decodable((folder / "dogs" / "broken.jpg").read_bytes())


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(PILImage.open(io.BytesIO(data)), dtype=np.int16)


def _full_decode_then_resize(data: bytes, size: tuple[int, int]) -> bytes:
    """The recipe of ``reduced_decode=False`` (and of every resize before it): Pillow, whole decode."""
    out = io.BytesIO()
    with PILImage.open(io.BytesIO(data)) as image:
        image.convert("RGB").resize(size, resample=PILImage.Resampling.BILINEAR).save(
            out, format="JPEG", quality=90, optimize=False, progressive=False)
    return out.getvalue()


def test_a_large_jpeg_is_decoded_at_a_reduced_scale_unless_asked_not_to():
    source = _jpeg((256, 256), 3)
    reduced, full = ResizeImage(64, 64)(source), ResizeImage(64, 64, reduced_decode=False)(source)
    assert full == _full_decode_then_resize(source, (64, 64))  # the bytes of a whole decode, as before
    assert reduced != full and _pixels(reduced).shape == (64, 64, 3)
    assert np.abs(_pixels(reduced) - _pixels(full)).mean() < 8  # the same picture, a few levels apart
    assert ResizeImage(64, 64)(source) == reduced  # deterministic


def test_an_image_not_twice_the_target_decodes_whole_and_a_png_always_does():
    small = _jpeg((100, 120), 4)  # under 2x 64 in height: no reduction possible
    assert ResizeImage(64, 64)(small) == ResizeImage(64, 64, reduced_decode=False)(small)
    out = io.BytesIO()
    PILImage.fromarray(np.full((256, 256, 3), 7, np.uint8)).save(out, format="PNG")
    assert ResizeImage(64, 64)(out.getvalue()) == ResizeImage(64, 64, reduced_decode=False)(out.getvalue())


def test_the_decode_choice_is_part_of_the_transforms_identity():
    """A refresh reuses records only from a version encoded the same way (``encoding_digest``: the repr)."""
    assert repr(ResizeImage(8, 8)) != repr(ResizeImage(8, 8, reduced_decode=False))

"""simplejpeg (the ``fast_jpeg`` extra) decodes JPEGs to Pillow's pixels; what it cannot match goes to Pillow."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image as PILImage

from beam_tfrecord import Image, ImageFormat
from beam_tfrecord.core.image_ops import ResizeImage
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.reader.decode.jpeg import fast_jpeg_decoder
from beam_tfrecord.reader.decode.numpy_decode import RecordDecoder, decode_image
from beam_tfrecord.reader.options import ImageDecoding, PixelType
from pipelines.make_sample_images import write_sample_images

pytest.importorskip("simplejpeg")

SHAPE = (128, 128, 3)


def _encoded(image: PILImage.Image, image_format: str = "JPEG", **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=image_format, **options)
    return out.getvalue()


@pytest.fixture(scope="module")
def benchmark_jpegs(tmp_path_factory) -> list[bytes]:
    """The read benchmark's JPEGs, a few of each class: 256-px sample images as ``--resize 128x128`` stores them."""
    root = str(tmp_path_factory.mktemp("images"))
    write_sample_images(root, per_class=4, size=256, seed=0)
    resize = ResizeImage(128, 128)
    return [resize(open(os.path.join(folder, name), "rb").read())
            for folder, _, names in sorted(os.walk(root)) for name in sorted(names)]


@pytest.mark.parametrize("pixel_type", [PixelType.UINT8, PixelType.FLOAT32])
def test_pixels_are_pillows_on_the_benchmark_jpegs(benchmark_jpegs, pixel_type):
    feature = Image(ImageFormat.JPEG, SHAPE)
    fast = decode_image("image", feature, ImageDecoding(pixel_type=pixel_type))
    pillow = decode_image("image", feature, ImageDecoding(pixel_type=pixel_type, fast_jpeg=False))
    assert len(benchmark_jpegs) == 12
    for data in benchmark_jpegs:
        assert fast_jpeg_decoder(SHAPE)(data) is not None  # decoded by simplejpeg, not handed to Pillow
        got, expected = fast(np.frombuffer(data, np.uint8).data), pillow(data)
        assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_what_simplejpeg_cannot_match_is_decoded_by_pillow():
    rng = np.random.default_rng(0)
    image = PILImage.fromarray(rng.integers(0, 256, SHAPE, dtype=np.uint8))
    fast_cases = {"4:4:4": _encoded(image, subsampling=0), "progressive": _encoded(image, progressive=True),
                  "grey source": _encoded(image.convert("L"))}
    pillow_cases = {"CMYK (Pillow's RGB differs by 1)": _encoded(image.convert("CMYK")),
                    "another size (resized)": _encoded(image.crop((0, 0, 90, 100))), "PNG": _encoded(image, "PNG")}
    feature = Image(ImageFormat.ANY, SHAPE)
    fast, pillow = (decode_image("image", feature, ImageDecoding(fast_jpeg=f)) for f in (True, False))
    for name, data in {**fast_cases, **pillow_cases}.items():
        assert (fast_jpeg_decoder(SHAPE)(data) is not None) == (name in fast_cases), name
        assert np.array_equal(fast(data), pillow(data)), name
    assert fast_jpeg_decoder((128, 128, 1)) is None  # grey output: Pillow's luma from RGB, not libjpeg's Y


def test_a_damaged_jpeg_raises_pillows_error(benchmark_jpegs):
    feature = Image(ImageFormat.JPEG, SHAPE)
    errors = []
    for fast_jpeg in (True, False):
        decode = decode_image("image", feature, ImageDecoding(fast_jpeg=fast_jpeg))
        with pytest.raises(CorruptShardError) as info:
            RecordDecoder.guard(decode, benchmark_jpegs[0][:2000], shard="s", offset=7)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and errors[0].startswith("shard 's' at offset 7: record does not match the schema")

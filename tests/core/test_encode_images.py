"""Image validation: cheap signature/header checks by default, a full decode with check_decode."""

import io

import numpy as np
import pytest
from PIL import Image as PILImage

from beam_tfrecord.core.sample_encoder import SampleEncoder, image_format_of
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import Image, ImageFormat, Schema, feature_from_json, feature_to_json
from beam_tfrecord.errors import SampleError, SchemaError


def _png(size: int = 6) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(np.arange(size * size * 3, dtype=np.uint8).reshape(size, size, 3)).save(out, format="PNG")
    return out.getvalue()


def _encode(feature: Image, data: bytes) -> bytes:
    return SampleEncoder(Schema({"img": feature})).encode(Sample("s", {"img": data}))


def test_truncated_png_passes_the_cheap_check_and_fails_the_full_decode():
    truncated = _png()[:-20]
    _encode(Image(ImageFormat.PNG), truncated)  # default: signature only, cheap
    with pytest.raises(SampleError) as info:
        _encode(Image(ImageFormat.PNG, check_decode=True), truncated)
    assert str(info.value).startswith(f"feature 'img': expected a complete, decodable png image, got image of "
                                      f"{len(truncated)} bytes (")
    assert info.value.feature == "img"


def test_check_decode_accepts_good_images():
    assert _encode(Image(ImageFormat.PNG, shape=(6, 6, 3), check_decode=True), _png())


def test_check_decode_is_in_the_schema_json_only_when_set():
    assert feature_to_json(Image(ImageFormat.JPEG)) == {"kind": "image", "format": "jpeg", "shape": None}
    data = feature_to_json(Image(ImageFormat.JPEG, check_decode=True))
    assert data["check_decode"] is True
    assert feature_from_json("img", data) == Image(ImageFormat.JPEG, check_decode=True)


def test_check_decode_must_be_a_bool():
    with pytest.raises(SchemaError, match="Image: check_decode must be a bool, got 'yes'"):
        Image(ImageFormat.JPEG, check_decode="yes")


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP", "WEBP"])
def test_image_format_of_tells_each_encoding_from_its_bytes(fmt):
    out = io.BytesIO()
    PILImage.fromarray(np.zeros((4, 5, 3), np.uint8)).save(out, format=fmt)
    assert image_format_of(out.getvalue()) is ImageFormat[fmt]
    assert _encode(Image(ImageFormat.ANY), out.getvalue())


@pytest.mark.parametrize("data", [b"", b"GIF8", b"RIFF\0\0\0\0WAVE", b"%PDF-1.7"])
def test_image_format_of_is_none_without_a_known_signature_and_any_rejects_it(data):
    assert image_format_of(data) is None
    with pytest.raises(SampleError, match=r"expected image bytes \(jpeg, png, gif, bmp or webp\)"):
        _encode(Image(ImageFormat.ANY), data)

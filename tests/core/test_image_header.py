"""Image sizes, formats and shapes read without Pillow (statistics.pb's, the schema's shape check) are Pillow's,
on whole, cut and damaged images."""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image, UnidentifiedImageError

from beam_tfrecord.core.image_header import _plain_jpeg_size, image_header, image_headers, plain_jpeg_shape
from beam_tfrecord.core.sample_encoder import image_size


def pillow_header(data: bytes) -> tuple[int, int, str] | None:
    """The reference: what statistics.pb took from Pillow before the header was read here."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size[0], image.size[1], (image.format or "unknown").lower()
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def pillow_shape(data: bytes) -> tuple[int, int, int] | None:
    """The reference of the shape check: (height, width, channels) as Pillow opens the image."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size[1], image.size[0], len(image.getbands())
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def _jpeg(rng: random.Random, mode: str, **options: object) -> bytes:
    size = (rng.randint(1, 200), rng.randint(1, 200))
    out = io.BytesIO()
    Image.new(mode, size, rng.randint(0, 255) if mode == "L" else (9,) * len(mode)).save(out, "JPEG", **options)
    return out.getvalue()


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    rng = random.Random(63)
    made = [_jpeg(rng, "RGB", quality=90), _jpeg(rng, "L", quality=50), _jpeg(rng, "RGB", progressive=True),
            _jpeg(rng, "RGB", optimize=True, comment=b"a comment"), _jpeg(rng, "CMYK"),  # APP14 Adobe
            _jpeg(rng, "RGB", comment=b"c" * 3000),  # a header longer than the first copy of it
            _jpeg(rng, "RGB", exif=b"Exif\0\0" + bytes(30)), _jpeg(rng, "RGB", icc_profile=b"\0" * 200)]
    png = io.BytesIO()
    Image.new("RGB", (3, 4)).save(png, "PNG")
    return [*made, png.getvalue(), b"", b"\xff\xd8\xff", b"not an image"]


def test_encoders_jpegs_are_read_without_pillow(images: list[bytes]) -> None:
    plain = images[:6]
    assert [_plain_jpeg_size(data) is not None for data in plain] == [True] * 6
    assert [image_header(data) for data in plain] == [pillow_header(data) for data in plain]
    assert _plain_jpeg_size(images[6]) is None and _plain_jpeg_size(images[7]) is None  # EXIF, ICC: Pillow's


def test_every_cut_and_damaged_header_gets_pillows_answer(images: list[bytes]) -> None:
    rng = random.Random(0)
    checked = 0
    for data in images:
        cases = [data, *(data[:cut] for cut in [*range(0, min(len(data), 700), 5), *range(2040, 2060)])]
        for _ in range(60):
            damaged = bytearray(data[:700])
            if damaged:
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            cases.append(bytes(damaged) + data[700:])
        for case in cases:
            assert image_header(case) == pillow_header(case), case[:40]
            assert image_header(memoryview(case)) == pillow_header(case)
            shape = plain_jpeg_shape(case)
            assert shape is None or shape == pillow_shape(case), case[:40]
        # After the whole image, each case's first bytes are its header's, or not: the remembered answer only
        # for the first (an image cut inside its scan's header is Pillow's to answer, as alone).
        assert image_headers([data, *cases, *map(memoryview, cases)]) == \
            [pillow_header(data), *map(pillow_header, cases), *map(pillow_header, cases)]
        checked += len(cases)
    assert checked > 1_000


def test_an_image_over_pillows_pixel_limit_is_left_to_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.BytesIO()
    Image.new("RGB", (50, 50)).save(out, "JPEG")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # Pillow warns over it, and fails over twice it
    assert _plain_jpeg_size(out.getvalue()) is None
    with pytest.raises(Image.DecompressionBombError):
        image_header(out.getvalue())


def test_the_shape_check_reads_plain_jpegs_as_pillow_does(images: list[bytes]) -> None:
    """``image_size`` (the schema's shape check) answers a plain JPEG without Pillow, every mode; others by
    Pillow, as before (a PNG's shape, a header Pillow refuses: its error)."""
    assert [plain_jpeg_shape(data) for data in images[:6]] == [pillow_shape(data) for data in images[:6]]
    assert {shape[2] for shape in map(plain_jpeg_shape, images[:6]) if shape} == {1, 3, 4}  # L, RGB, CMYK
    assert [image_size(data) for data in images[:9]] == [pillow_shape(data) for data in images[:9]]
    assert plain_jpeg_shape(images[8]) is None  # the PNG
    with pytest.raises(UnidentifiedImageError):
        image_size(images[-1])

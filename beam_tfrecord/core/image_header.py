"""An encoded image's (width, height, format) or shape, as Pillow's ``Image.open`` reports them, Pillow-free if it can.

Invariant: the answer is Pillow's, always. A JPEG whose header holds only segments Pillow reads without a choice
(DQT, DHT, DRI, COM, APPn but EXIF, ICC, MPO and Photoshop's, a baseline, extended or progressive SOF, then SOS:
what encoders write) is read here, in a fifth of the time of Pillow's open (which was most of statistics.pb's
cost on an image build, and 7% of the encoders' on a resized one: the schema's shape check); any other byte
string goes to Pillow. ``tests/core/test_image_header.py`` compares the two.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterable
from types import ModuleType

_SOI = b"\xff\xd8\xff"
_SOS = 0xDA
_SOF = frozenset((0xC0, 0xC1, 0xC2))  # Pillow reads these; its other SOFs (lossless, arithmetic) go to it
_SKIPPED = frozenset((0xC4, 0xDD, 0xFE))  # DHT, DRI: Pillow skips them; COM: it keeps the bytes
_DQT = 0xDB
_ONE_TABLE = 2 + 1 + 64  # a DQT segment of one 8-bit table (what libjpeg writes)
_HEAD_BYTES = 2048  # a JPEG's segments before its scan fit here, mostly (else the whole is copied)
_APPS = range(0xE0, 0xF0)
# APPn segments Pillow parses, by marker: (prefix, the bytes it reads: shorter, Pillow decides; None: Pillow
# decides always) (EXIF, ICC profiles, MPO, Photoshop: parsed further, or their errors not all caught).
_PARSED_APPS: dict[int, tuple[tuple[bytes, int | None], ...]] = {
    0xE0: ((b"JFIF", 12),), 0xEE: ((b"Adobe", 7),), 0xE1: ((b"Exif\0\0", None),),
    0xE2: ((b"ICC_PROFILE\0", None), (b"MPF\0", None)), 0xED: ((b"Photoshop 3.0\0", None),)}
_LAYERS = frozenset((1, 3, 4))  # L, RGB, CMYK: Pillow refuses other counts


def image_header(data: bytes | memoryview) -> tuple[int, int, str] | None:
    """(width, height, format) of an encoded image from its header, lowercase format; None when Pillow cannot
    identify it (``UnidentifiedImageError``, ``OSError``, ``ValueError``)."""
    found = _plain_jpeg_size(data)
    return (found[0], found[1], "jpeg") if found is not None else _pillow_header(data)


def image_headers(images: Iterable[bytes | memoryview]) -> list[tuple[int, int, str] | None]:
    """``image_header`` of each of ``images``; an image whose first bytes, up to its scan, are those of the
    plain JPEG before it (one encoder's output: the same tables, the same size) has its answer without a second
    reading (a comparison of ~600 bytes, not a walk through its segments in Python)."""
    headers: list[tuple[int, int, str] | None] = []
    last: tuple[int, int, str] | None = None
    prefix, needed = b"", 0
    for data in images:
        if last is not None and len(data) >= needed and bytes(data[:len(prefix)]) == prefix:  # not a view's ==:
            # memoryview compares item by item (~2.5 us for 600 bytes), a copy and bytes' == in ~0.3 us
            headers.append(last)
            continue
        found = _plain_jpeg_size(data)
        if found is None:
            headers.append(_pillow_header(data))
            continue
        width, height, read, needed, _ = found
        prefix, last = bytes(data[:read]), (width, height, "jpeg")
        headers.append(last)
    return headers


def plain_jpeg_shape(data: bytes | memoryview) -> tuple[int, int, int] | None:
    """(height, width, channels) of a plain JPEG (see the module's doc), as Pillow's ``Image.open`` reports its
    size and mode (L, RGB, CMYK: 1, 3, 4 channels); None for any other byte string, which Pillow must answer."""
    found = _plain_jpeg_size(data)
    return None if found is None else (found[1], found[0], found[4])


def _pillow_header(data: bytes | memoryview) -> tuple[int, int, str] | None:
    from PIL import UnidentifiedImageError

    try:
        with _pillow().open(io.BytesIO(bytes(data))) as image:
            return image.size[0], image.size[1], (image.format or "unknown").lower()
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def _dqt_ok(segment: bytes | memoryview) -> bool:
    """Whether Pillow's DQT handler reads the tables of ``segment`` without an error."""
    position = 0
    while position < len(segment):
        length = 1 + (64 if segment[position] < 16 else 128)
        if len(segment) - position < length:
            return False
        position += length
    return True


def _app_ok(head: bytes, marker: int, start: int, end: int) -> bool:
    """Whether Pillow's APP handler reads the segment ``head[start:end]`` without an error and without parsing
    it further."""
    for prefix, needed in _PARSED_APPS.get(marker, ()):
        if head.startswith(prefix, start, end):
            return needed is not None and end - start >= needed
    return True


def _plain_jpeg_size(data: bytes | memoryview) -> tuple[int, int, int, int, int] | None:
    """(width, height, bytes read, bytes needed, layers) of a JPEG of only the segments Pillow reads without a choice to
    make; None otherwise (not a JPEG, another segment, anything Pillow would refuse or warn about: Pillow decides
    those). The answer depends on the first ``bytes read`` and on the image being ``bytes needed`` long at least
    (its scan's header ends there)."""
    head = bytes(data[:_HEAD_BYTES])  # a copy of the header (where bytes index fastest); the whole when longer
    if not head.startswith(_SOI):
        return None
    size: tuple[int, int, int] | None = None
    end = len(data)
    position = 2  # Pillow reads its first marker from the third byte
    while position + 4 <= end:
        if position + 4 > len(head) or position + 2 + (head[position + 2] << 8 | head[position + 3]) > len(head):
            if len(head) == end:
                return None
            head = bytes(data)
        if head[position] != 0xFF:
            return None
        marker = head[position + 1]
        length = head[position + 2] << 8 | head[position + 3]
        start, position = position + 4, position + 2 + length
        if length < 2 or position > end:
            return None
        if marker == _SOS:
            return None if size is None else (size[0], size[1], start, position, size[2])
        if marker in _SOF:
            if length < 8 or head[start] != 8 or head[start + 5] not in _LAYERS:
                return None
            height = head[start + 1] << 8 | head[start + 2]
            width = head[start + 3] << 8 | head[start + 4]
            if not width or not height or _too_large(width, height):
                return None
            size = (width, height, head[start + 5])
        elif marker == _DQT:
            if not (length == _ONE_TABLE and head[start] < 16) and not _dqt_ok(head[start:position]):
                return None
        elif marker in _APPS:
            if not _app_ok(head, marker, start, position):
                return None
        elif marker not in _SKIPPED:
            return None
    return None


def _too_large(width: int, height: int) -> bool:
    """Whether Pillow's decompression-bomb check would warn or fail (it decides those images itself)."""
    limit = _pillow().MAX_IMAGE_PIXELS
    return limit is not None and width * height > limit


@functools.cache
def _pillow() -> ModuleType:
    """``PIL.Image``, imported once an image is summarized (not with the statistics, at every job's start)."""
    from PIL import Image

    return Image

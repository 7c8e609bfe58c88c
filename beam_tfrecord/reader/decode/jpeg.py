"""JPEG decoding with simplejpeg (libjpeg-turbo) when it is installed (the ``fast_jpeg`` extra): Pillow's pixels.

On the benchmark's 15,000 128-px JPEGs, simplejpeg took ~110 us per image against Pillow's ~310, with the same
pixels for every one (``benchmarks/read_benchmark.py --litdata``, decoded). Only what gives Pillow's pixels
is decoded here: RGB out of a YCbCr or greyscale JPEG (a CMYK one differs by 1 and goes to Pillow, as does a
grey output, which Pillow computes from RGB and libjpeg takes from Y).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    simplejpeg: Any = importlib.import_module("simplejpeg")
except ImportError:  # the fast_jpeg extra is not installed: Pillow decodes every image
    simplejpeg = None

_PILLOW_ALIKE = frozenset({"YCbCr", "Gray"})  # source colour spaces whose RGB output is Pillow's


def fast_jpeg_decoder(shape: tuple[int, int, int]) -> Callable[[Any], np.ndarray | None] | None:
    """A decoder of JPEGs of ``shape`` (height, width, 3) to RGB pixels, None when simplejpeg is not installed.

    It returns None for data it leaves to Pillow: not a JPEG, another size (resized by Pillow), a CMYK JPEG,
    or one libjpeg-turbo reports an error on (Pillow then decodes it, or raises its own error).
    """
    if simplejpeg is None or shape[2] != 3:
        return None
    height, width = shape[0], shape[1]

    def decode(data: Any) -> np.ndarray | None:
        if bytes(data[:2]) != b"\xff\xd8":  # PNG, WebP...: Pillow's
            return None
        try:
            found_height, found_width, colour_space, _ = simplejpeg.decode_jpeg_header(data)
            if (found_height, found_width) != (height, width) or colour_space not in _PILLOW_ALIKE:
                return None
            pixels: np.ndarray = simplejpeg.decode_jpeg(data, colorspace="RGB")
        except ValueError:
            return None
        return pixels

    return decode

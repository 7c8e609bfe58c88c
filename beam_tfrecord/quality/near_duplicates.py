"""Near-duplicate images: a 64-bit perceptual hash and a colour layout per image, candidates by hash bands.

Candidates come from a bounded search: the hash is cut into ``bands`` bands and images sharing a band's
value meet; a pair within Hamming distance < ``bands`` shares at least one band (pigeonhole). A pair is one
within ``max_distance`` bits and ``max_colour_difference``. Read more: docs/quality.md (what it cannot see).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import itertools
import operator
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
from PIL import Image, UnidentifiedImageError

from beam_tfrecord.errors import ImageDecodeError, WriterOptionError

HASH_BITS = 64  # pHash of an 8x8 block of the DCT of a 32x32 grey image
_DRAFT_SIZE = (64, 64)  # a JPEG decodes at 1/2-1/8 scale (libjpeg's DCT scaling) when still >= this: ~5x less CPU
# Above this many images, 8-bit bands (N/256 images per value) near max_bucket: 16-bit bands (N/65,536), which
# find fewer crops (benchmarks/near_duplicates.py: 8 bands ~98%, 4 bands ~82% of 5% crops at distance 12).
WIDE_BANDS_FROM_IMAGES = 100_000
_LAYOUT = (4, 4)  # the colour layout: the image averaged down to 4x4 RGB pixels (48 bytes)


@dataclasses.dataclass(frozen=True)
class NearDuplicateSettings:
    """How near duplicates are searched for (measured in benchmarks/near_duplicates.py).

    Attributes:
        max_distance: the largest Hamming distance between two hashes reported as a pair.
        max_colour_difference: the largest mean absolute difference (0-255 levels) between two colour
            layouts reported as a pair (pHash sees grey only: this tells apart alike shapes in other colours).
        bands: the hash is cut into this many bands; pairs at distance < ``bands`` are always found.
        max_bucket: images one band value keeps (by key order); a value held by more is a degenerate
            bucket (blank or uniform images), capped and named in the report.
        max_examples: example pairs kept per split pair.
        feature: the feature holding each sample's encoded image.
    """

    max_distance: int = 12
    max_colour_difference: float = 20.0
    bands: int = 8
    max_bucket: int = 1000
    max_examples: int = 20
    feature: str = "image"

    def __post_init__(self) -> None:
        if not 0 <= self.max_distance < HASH_BITS:
            raise WriterOptionError(f"near duplicates: max_distance must be in [0, {HASH_BITS}), "
                                    f"got {self.max_distance}")
        if not 1 <= self.bands <= HASH_BITS // 4:
            raise WriterOptionError(f"near duplicates: bands must be in [1, {HASH_BITS // 4}], got {self.bands}")
        if self.max_bucket < 2 or self.max_examples < 0:
            raise WriterOptionError(f"near duplicates: max_bucket must be >= 2 and max_examples >= 0, got "
                                    f"{self.max_bucket} and {self.max_examples}")

    @classmethod
    def for_images(cls, count: int | None) -> "NearDuplicateSettings":
        """The defaults for a build of ``count`` images: 4 bands of 16 bits from ``WIDE_BANDS_FROM_IMAGES`` on."""
        return cls(bands=4) if count is not None and count >= WIDE_BANDS_FROM_IMAGES else cls()

    def method(self) -> dict[str, object]:
        """How the pairs were found, as the manifest records it."""
        import imagehash  # its version only (the hash is computed here: ``phash``); not imported at every start

        return {"hash": f"imagehash.phash {imagehash.__version__} ({HASH_BITS} bits)",
                "max_distance": self.max_distance, "colour_layout": f"{_LAYOUT[0]}x{_LAYOUT[1]} RGB",
                "max_colour_difference": self.max_colour_difference, "bands": self.bands,
                "always_found_below": self.bands,
                "max_bucket": self.max_bucket}


class ImageSignature(NamedTuple):
    """What an image is compared by: its pHash (an int, bit 63: the DCT's first cell) and its colour layout."""

    phash: int
    colour: bytes


def image_signature(data: bytes, *, key: str) -> ImageSignature:
    """The pHash (``imagehash.phash``) and colour layout of an encoded image (``signature_of_image``).

    Raises:
        ImageDecodeError: naming ``key``, when Pillow cannot decode ``data``.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", _DRAFT_SIZE)  # JPEG only: decodes at a reduced scale; others ignore it
            return signature_of_image(image)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise ImageDecodeError(f"sample {key!r}: near duplicates: cannot decode the image ({err})") from err


def signature_of_image(image: Image.Image) -> ImageSignature:
    """The signature of a decoded image: first reduced by a whole factor (box average) to under twice
    ``_DRAFT_SIZE``, as a JPEG's reduced decode would (``image_signature``), then hashed."""
    factor = min(image.size) // _DRAFT_SIZE[0]
    rgb = image.convert("RGB") if image.mode != "RGB" else image
    if factor > 1:
        rgb = rgb.reduce(factor)
    colour = rgb.resize(_LAYOUT, Image.Resampling.BOX).tobytes()
    return ImageSignature(phash(rgb), colour)


def _dct_matrix(size: int) -> np.ndarray:
    """scipy.fftpack.dct's type II, unnormalized, as a matrix: y[k] = 2 sum_n x[n] cos(pi k (2n + 1) / 2N)."""
    k, n = np.mgrid[0:size, 0:size]
    return 2.0 * np.cos(np.pi * k * (2 * n + 1) / (2 * size))


_PHASH_SIZE, _PHASH_LOW = 32, 8
_DCT = _dct_matrix(_PHASH_SIZE)[:_PHASH_LOW]  # only the 8 lowest frequencies are kept
_MIDDLE = [_PHASH_LOW * _PHASH_LOW // 2 - 1, _PHASH_LOW * _PHASH_LOW // 2]


def phash(image: Image.Image) -> int:
    """``imagehash.phash(image)`` as an int (bit 63: the DCT's first cell), the same bits (tests compare them)
    without scipy: a 32x32 grey image, the low 8x8 of its 2-D DCT as two small matrix products, above
    their median. 10x less CPU per image here than the library's call, and no scipy import per worker."""
    grey = image.convert("L").resize((_PHASH_SIZE, _PHASH_SIZE), Image.Resampling.LANCZOS)
    pixels = np.frombuffer(grey.tobytes(), np.uint8).reshape(_PHASH_SIZE, _PHASH_SIZE).astype(np.float64)
    low = _DCT @ pixels @ _DCT.T
    middle = np.sort(low, axis=None)[_MIDDLE]  # np.median's two middle values, without its overhead (~30 us)
    return int.from_bytes(np.packbits(low > (middle[0] + middle[1]) / 2).tobytes(), "big")


def distance(a: int, b: int) -> int:
    """Hamming distance between two hashes."""
    return (a ^ b).bit_count()


def colour_difference(a: bytes, b: bytes) -> float:
    """Mean absolute difference of two colour layouts, in 0-255 levels (48 values: plain ints beat numpy)."""
    return sum(map(abs, map(operator.sub, a, b))) / len(a)


def band_values(image_hash_value: int, bands: int) -> list[int]:
    """The value of each of the hash's ``bands`` bands (band i: bits [i*64//bands, (i+1)*64//bands))."""
    edges = [i * HASH_BITS // bands for i in range(bands + 1)]
    return [(image_hash_value >> (HASH_BITS - hi)) & ((1 << (hi - lo)) - 1) for lo, hi in itertools.pairwise(edges)]


@dataclasses.dataclass(frozen=True, order=True)
class NearPair:
    """Two images whose hashes are within ``distance`` bits: ``key_a`` < ``key_b``."""

    key_a: str
    key_b: str
    distance: int


@dataclasses.dataclass(frozen=True)
class BucketPairs:
    """What one band bucket gave: its pairs, and, when it held more images than the cap, its size."""

    pairs: tuple[NearPair, ...]
    capped_size: int | None = None


def bucket_pairs(band: int, members: Iterable[tuple[str, ImageSignature]],
                 settings: NearDuplicateSettings) -> BucketPairs:
    """The pairs within the settings' distances among the (key, signature) ``members`` of one band's bucket.

    A pair sharing several bands is given by the first of them only, so every pair comes once over all
    buckets; a bucket over ``max_bucket`` images keeps its first ``max_bucket`` keys (the same on every run).
    """
    listed = sorted(members)
    kept = listed[:settings.max_bucket]
    pairs = []
    for (key_a, signature_a), (key_b, signature_b) in itertools.combinations(kept, 2):
        gap = distance(signature_a.phash, signature_b.phash)
        if gap > settings.max_distance or key_a == key_b:
            continue
        if band and _share_earlier_band(signature_a.phash, signature_b.phash, band, settings.bands):
            continue
        if colour_difference(signature_a.colour, signature_b.colour) > settings.max_colour_difference:
            continue
        pairs.append(NearPair(key_a, key_b, gap))
    return BucketPairs(tuple(pairs), len(listed) if len(listed) > settings.max_bucket else None)


@functools.cache
def _band_masks(bands: int) -> tuple[tuple[int, int], ...]:
    """(shift, mask) of each band: band i of a hash h is (h >> shift) & mask."""
    edges = [i * HASH_BITS // bands for i in range(bands + 1)]
    return tuple((HASH_BITS - hi, (1 << (hi - lo)) - 1) for lo, hi in itertools.pairwise(edges))


def _share_earlier_band(a: int, b: int, band: int, bands: int) -> bool:
    differ = a ^ b
    return any(not (differ >> shift) & mask for shift, mask in _band_masks(bands)[:band])


def find_pairs(signatures: Sequence[tuple[str, ImageSignature]], settings: NearDuplicateSettings) -> list[NearPair]:
    """Every pair among (key, signature) ``signatures`` that the banded search finds, sorted (in one process)."""
    buckets: dict[tuple[int, int], list[tuple[str, ImageSignature]]] = {}
    for key, signature in signatures:
        for band, band_value in enumerate(band_values(signature.phash, settings.bands)):
            buckets.setdefault((band, band_value), []).append((key, signature))
    return sorted(pair for (band, _), members in buckets.items() if len(members) > 1
                  for pair in bucket_pairs(band, members, settings).pairs)

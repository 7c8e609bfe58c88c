"""Near-duplicate images: a 64-bit perceptual hash per image, candidates by hash bands, pairs by distance.

Candidates come from a bounded search: the hash is cut into ``bands`` bands and images sharing a band's
value meet; a pair within Hamming distance < ``bands`` shares at least one band (pigeonhole). Read more:
docs/quality.md, "Near-duplicate images" (what the hash cannot see).
"""

from __future__ import annotations

import dataclasses
import io
import itertools
from collections.abc import Iterable, Sequence

import imagehash
from PIL import Image, UnidentifiedImageError

from beam_tfrecord.errors import ImageDecodeError, WriterOptionError

HASH_BITS = 64  # pHash of an 8x8 block of the DCT of a 32x32 grey image
_DRAFT_SIZE = (64, 64)  # a JPEG decodes at 1/2-1/8 scale (libjpeg's DCT scaling) when still >= this: ~5x less CPU


@dataclasses.dataclass(frozen=True)
class NearDuplicateSettings:
    """How near duplicates are searched for (measured in benchmarks/near_duplicates.py).

    Attributes:
        max_distance: the largest Hamming distance between two hashes reported as a pair.
        bands: the hash is cut into this many bands; pairs at distance < ``bands`` are always found.
        max_bucket: images one band value keeps (by key order); a value held by more is a degenerate
            bucket (blank or uniform images), capped and named in the report.
        max_examples: example pairs kept per split pair.
        feature: the feature holding each sample's encoded image.
    """

    max_distance: int = 10
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

    def method(self) -> dict[str, object]:
        """How the pairs were found, as the manifest records it."""
        return {"hash": f"imagehash.phash {imagehash.__version__} ({HASH_BITS} bits)",
                "max_distance": self.max_distance, "bands": self.bands, "always_found_below": self.bands,
                "max_bucket": self.max_bucket}


def image_hash(data: bytes, *, key: str) -> int:
    """The 64-bit pHash of an encoded image (``imagehash.phash``), as an int (bit i: the DCT's i-th cell).

    Raises:
        ImageDecodeError: naming ``key``, when Pillow cannot decode ``data``.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("L", _DRAFT_SIZE)  # JPEG only: decodes grey at a reduced scale; others ignore it
            bits = imagehash.phash(image).hash.ravel()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise ImageDecodeError(f"sample {key!r}: near duplicates: cannot decode the image ({err})") from err
    return int("".join("1" if bit else "0" for bit in bits), 2)


def distance(a: int, b: int) -> int:
    """Hamming distance between two hashes."""
    return (a ^ b).bit_count()


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


def bucket_pairs(band: int, members: Iterable[tuple[str, int]], settings: NearDuplicateSettings) -> BucketPairs:
    """The pairs within ``settings.max_distance`` among the (key, hash) ``members`` of one band's bucket.

    A pair sharing several bands is given by the first of them only, so every pair comes once over all
    buckets; a bucket over ``max_bucket`` images keeps its first ``max_bucket`` keys (the same on every run).
    """
    listed = sorted(members)
    kept = listed[:settings.max_bucket]
    pairs = []
    for (key_a, hash_a), (key_b, hash_b) in itertools.combinations(kept, 2):
        gap = distance(hash_a, hash_b)
        if gap > settings.max_distance or key_a == key_b:
            continue
        if band and _share_earlier_band(hash_a, hash_b, band, settings.bands):
            continue
        pairs.append(NearPair(key_a, key_b, gap))
    return BucketPairs(tuple(pairs), len(listed) if len(listed) > settings.max_bucket else None)


def _share_earlier_band(a: int, b: int, band: int, bands: int) -> bool:
    return any(x == y for x, y in zip(band_values(a, bands)[:band], band_values(b, bands)[:band]))


def find_pairs(hashes: Sequence[tuple[str, int]], settings: NearDuplicateSettings) -> list[NearPair]:
    """Every pair among (key, hash) ``hashes`` that the banded search finds, sorted (in one process)."""
    buckets: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for key, value in hashes:
        for band, band_value in enumerate(band_values(value, settings.bands)):
            buckets.setdefault((band, band_value), []).append((key, value))
    return sorted(pair for (band, _), members in buckets.items() if len(members) > 1
                  for pair in bucket_pairs(band, members, settings).pairs)

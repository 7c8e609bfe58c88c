"""NearTally: what a build's near-duplicate pairs come to, in bounded memory, merged in a combiner.

Counts are exact; examples are capped (``max_examples`` per split pair, 20 capped buckets and unhashed images);
distinct images in pairs are counted exactly up to ``EXACT_IMAGES``, then estimated (HyperLogLog). Ratio splits
are known from the keys' hashes alone; count splits only from the plan: their pairs wait for it as two key
hashes (16 bytes a pair), the one part that grows with the pairs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from datasketches import hll_sketch, hll_union

from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.quality.near_duplicates import NearPair

MAX_LISTED = 20  # capped buckets and unhashed images named in the report
EXACT_IMAGES = 1 << 20  # images in pairs counted exactly (8 MB of key hashes), then estimated
_IMAGES_LG_K = 14  # ~0.8% relative error
UNKNOWN = ""  # the split pair of a pair before the plan (count splits)


def _smallest(items: list, cap: int) -> list:
    return sorted(items)[:cap]


@dataclasses.dataclass
class NearTally:
    """Pairs by split pair, capped examples, capped buckets, unhashed images: see the module's docstring."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    examples: dict[str, list[NearPair]] = dataclasses.field(default_factory=dict)
    waiting: list[np.ndarray] = dataclasses.field(default_factory=list)  # (n, 2) uint64 key hashes
    images: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.uint64))
    sketch: bytes | None = None  # an HLL of the images' key hashes, once over EXACT_IMAGES
    capped: int = 0
    capped_examples: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)
    not_hashed: int = 0
    not_hashed_examples: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def merge(self, other: "NearTally", max_examples: int) -> "NearTally":
        """This tally with ``other``'s added (both are spent)."""
        for name, count in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + count
        for name, pairs in other.examples.items():
            self.examples[name] = _smallest(self.examples.get(name, []) + pairs, max_examples)
        self.waiting.extend(other.waiting)
        self._add_images(other.images, other.sketch)
        self.capped += other.capped
        self.capped_examples = _smallest(self.capped_examples + other.capped_examples, MAX_LISTED)
        self.not_hashed += other.not_hashed
        self.not_hashed_examples = _smallest(self.not_hashed_examples + other.not_hashed_examples, MAX_LISTED)
        return self

    def _add_images(self, hashes: np.ndarray, sketch: bytes | None) -> None:
        if self.sketch is None and sketch is None:
            self.images = np.union1d(self.images, hashes)
            if len(self.images) <= EXACT_IMAGES:
                return
            hashes, self.images = self.images, np.zeros(0, np.uint64)
        union = hll_union(_IMAGES_LG_K)
        for part in (self.sketch, sketch):
            if part is not None:
                union.update(hll_sketch.deserialize(part))
        fresh = hll_sketch(_IMAGES_LG_K)
        for value in np.concatenate([self.images, hashes]).tolist():
            fresh.update(value)
        union.update(fresh)
        self.images, self.sketch = np.zeros(0, np.uint64), union.get_result().serialize_compact()

    def images_in_pairs(self) -> tuple[int, bool]:
        """(distinct images in pairs, whether estimated)."""
        if self.sketch is None:
            return len(self.images), False
        return round(hll_sketch.deserialize(self.sketch).get_estimate()), True


def tally_pairs(pairs: Sequence[NearPair], *, salt: str, split_pair_of: Callable[[int, int], str] | None,
                max_examples: int) -> NearTally:
    """The tally of some pairs; ``split_pair_of`` (two key hashes -> ``train/test``), or None: splits unknown yet."""
    tally = NearTally()
    hashes = np.array([(key_hash(p.key_a, salt), key_hash(p.key_b, salt)) for p in pairs], np.uint64).reshape(-1, 2)
    names = ([split_pair_of(a, b) for a, b in hashes.tolist()] if split_pair_of is not None
             else [UNKNOWN] * len(pairs))
    if split_pair_of is None and len(pairs):
        tally.waiting.append(hashes)
    for name, pair in zip(names, pairs):
        tally.counts[name] = tally.counts.get(name, 0) + 1
        tally.examples.setdefault(name, []).append(pair)
    tally.examples = {name: _smallest(found, max_examples) for name, found in tally.examples.items()}
    tally._add_images(np.unique(hashes.ravel()), None)
    return tally


def tally_capped(buckets: Iterable[tuple[int, int, int]]) -> NearTally:
    listed = list(buckets)
    return NearTally(capped=len(listed), capped_examples=_smallest(listed, MAX_LISTED))


def tally_not_hashed(images: Iterable[tuple[str, str]]) -> NearTally:
    listed = list(images)
    return NearTally(not_hashed=len(listed), not_hashed_examples=_smallest(listed, MAX_LISTED))

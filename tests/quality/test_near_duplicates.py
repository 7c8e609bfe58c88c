"""Near-duplicate images without Beam: the hash of planted copies, the banded search, the report."""

import imagehash
import numpy as np
import pytest
from near_duplicate_images import COPY_KINDS, distinct_image, jpeg, planted_copy

from beam_tfrecord import SplitConfig
from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.errors import ImageDecodeError, WriterOptionError
from beam_tfrecord.quality import near_tally
from beam_tfrecord.quality.near_duplicates import (
    ImageSignature,
    NearDuplicateSettings,
    NearPair,
    band_values,
    bucket_pairs,
    distance,
    find_pairs,
    image_signature,
    phash,
)
from beam_tfrecord.quality.near_report import describe_near_duplicates, near_duplicate_report, split_pair_namer
from beam_tfrecord.quality.near_tally import UNKNOWN, NearTally, tally_capped, tally_not_hashed, tally_pairs


@pytest.fixture(scope="module")
def originals():
    rng = np.random.default_rng(7)
    return [distinct_image(rng) for _ in range(4)]


def test_phash_gives_the_bits_of_imagehash(originals):
    images = [*originals, *(image.convert("L").resize((50, 90)) for image in originals)]
    expected = [int.from_bytes(np.packbits(imagehash.phash(image).hash.ravel()).tobytes(), "big") for image in images]
    assert [phash(image) for image in images] == expected


@pytest.mark.parametrize("kind, distances", [("jpeg_quality", [0, 2, 0, 0]), ("resize", [2, 0, 0, 2]),
                                             ("crop", [4, 8, 8, 6])])
def test_planted_copies_are_found_with_their_distances(originals, kind, distances):
    hashes = []
    for number, image in enumerate(originals):
        copy = planted_copy(image, kind, np.random.default_rng(number))
        hashes += [(f"{number}", image_signature(jpeg(image), key=f"{number}")),
                   (f"{number}.{kind}", image_signature(copy, key=f"{number}.{kind}"))]
    assert find_pairs(hashes, NearDuplicateSettings()) == [
        NearPair(f"{number}", f"{number}.{kind}", gap) for number, gap in enumerate(distances)]
    assert kind in COPY_KINDS


def test_distinct_images_give_no_pair():
    rng = np.random.default_rng(1)
    hashes = [(f"{n:03d}", image_signature(jpeg(distinct_image(rng, (96, 72))), key=f"{n:03d}")) for n in range(30)]
    assert min(distance(a.phash, b.phash) for (_, a) in hashes for (_, b) in hashes if a != b) == 20
    assert find_pairs(hashes, NearDuplicateSettings()) == []


def test_every_pair_below_the_band_count_is_found_once():
    rng = np.random.default_rng(3)
    settings = NearDuplicateSettings(max_distance=10, bands=8)
    base = int(rng.integers(0, 2**63)) * 2 + 1
    colour = bytes(48)
    hashes = [("base", ImageSignature(base, colour))]
    for flips in range(1, 8):  # distance < bands: a band is untouched, whichever bits flip
        bits = rng.choice(64, size=flips, replace=False)
        hashes.append((f"flip{flips}", ImageSignature(base ^ sum(1 << int(b) for b in bits), colour)))
    pairs = find_pairs(hashes, settings)
    assert [(p.key_a, p.key_b, p.distance) for p in pairs if p.key_a == "base"] == [
        ("base", f"flip{n}", n) for n in range(1, 8)]
    assert len(pairs) == len({(p.key_a, p.key_b) for p in pairs})  # no pair twice, over 8 bands
    assert band_values(0xE1A714A3DAB5236C, 4) == [0xE1A7, 0x14A3, 0xDAB5, 0x236C]


def test_a_degenerate_bucket_is_capped_and_says_so():
    settings = NearDuplicateSettings(max_bucket=3)
    found = bucket_pairs(0, [(f"blank{n}", ImageSignature(0, bytes(48))) for n in range(5)], settings)
    assert found.capped_size == 5
    assert found.pairs == (NearPair("blank0", "blank1", 0), NearPair("blank0", "blank2", 0),
                           NearPair("blank1", "blank2", 0))


def test_alike_shapes_in_other_colours_are_no_pair():
    grey, red = bytes(48), bytes([200, 0, 0] * 16)
    pairs = find_pairs([("a", ImageSignature(7, grey)), ("b", ImageSignature(7, red)), ("c", ImageSignature(7, grey))],
                       NearDuplicateSettings())
    assert pairs == [NearPair("a", "c", 0)]


def test_an_undecodable_image_raises_naming_the_sample():
    with pytest.raises(ImageDecodeError, match=r"sample 'cats/bad.jpg': near duplicates: cannot decode the image"):
        image_signature(b"\xff\xd8\xff\xe0 truncated", key="cats/bad.jpg")


def test_a_large_build_takes_wider_bands():
    assert (NearDuplicateSettings.for_images(99_999).bands, NearDuplicateSettings.for_images(100_000).bands) == (8, 4)


def test_settings_out_of_range_are_refused():
    with pytest.raises(WriterOptionError, match=r"bands must be in \[1, 16\], got 0"):
        NearDuplicateSettings(bands=0)


SPLITS = SplitConfig.parse("train=0.5,test=0.5")


def _split(key: str) -> str:
    return next(name for name, lo, hi in SPLITS.ratio_bounds() if lo <= key_hash(key, "s") < hi)


def test_report_counts_pairs_within_and_across_splits_before_or_after_the_plan():
    """Ratio splits tally pairs by split at once; count splits keep their key hashes for the plan: one report."""
    pairs = [NearPair(f"k{n:02d}", f"k{n + 1:02d}", n % 7) for n in range(60)]
    expected: dict[str, list[NearPair]] = {}
    for pair in pairs:
        a, b = _split(pair.key_a), _split(pair.key_b)
        expected.setdefault(a if a == b else "train/test", []).append(pair)
    settings = NearDuplicateSettings()
    for namer, cap in ((split_pair_namer(SPLITS.ratio_bounds()), 20), (None, 60)):
        parts = [tally_pairs(pairs[:25], salt="s", split_pair_of=namer, max_examples=cap),
                 tally_pairs(pairs[25:], salt="s", split_pair_of=namer, max_examples=cap),
                 tally_capped([(1, 0, 1500)]), tally_not_hashed([("z", "cannot decode")])]
        tally = parts[0]
        for part in parts[1:]:
            tally = tally.merge(part, cap)
        report = near_duplicate_report(tally, settings, split_ranges=SPLITS.ratio_bounds(), salt="s")
        assert (report["pairs"], report["images_in_pairs"]) == (60, 61)
        assert {**report["within_splits"], **report["across_splits"]} == {k: len(v) for k, v in expected.items()}
        assert report["examples"] == {k: [[p.key_a, p.key_b, p.distance] for p in sorted(v)[:20]]
                                      for k, v in sorted(expected.items())}
        assert report["capped_buckets"] == {"count": 1, "examples": [{"band": 1, "value": 0, "images": 1500}]}
    within = ", ".join(f"{k} {n}" for k, n in report["within_splits"].items())
    assert describe_near_duplicates(report) == (
        f"near duplicates: 60 pairs; across splits: train/test {len(expected['train/test'])}; within: {within} "
        "(pHash distance <= 12 of 64 bits, alike colours); 1 images not hashed (cannot decode, e.g. 'z'); 1 hash "
        "buckets over 1000 images were capped: pairs among their other images were not searched")


def test_images_in_pairs_are_estimated_past_the_exact_cap(monkeypatch):
    monkeypatch.setattr(near_tally, "EXACT_IMAGES", 100)
    tally = NearTally()
    for start in range(0, 3000, 500):
        pairs = [NearPair(f"k{n}", f"k{n}b", 1) for n in range(start, start + 500)]
        tally = tally.merge(tally_pairs(pairs, salt="s", split_pair_of=None, max_examples=20), 20)
    count, estimated = tally.images_in_pairs()
    assert estimated and abs(count - 6000) < 6000 * 0.03
    assert (sum(tally.counts.values()), len(tally.examples[UNKNOWN]), len(tally.images)) == (3000, 20, 0)

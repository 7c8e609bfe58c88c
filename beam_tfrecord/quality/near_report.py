"""The near-duplicate report of a build (manifest metadata "near_duplicates") and its summary line.

Pairs are counted by the splits of their two images, found as the writer places them (the plan's hash
ranges), within each split and across each pair of splits, with up to ``max_examples`` examples per split pair.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings
from beam_tfrecord.quality.near_tally import UNKNOWN, NearTally

REPORT_KEY = "near_duplicates"  # the manifest metadata's key


def split_pair_namer(ranges: Sequence[tuple[str, int, int]]) -> Callable[[int, int], str]:
    """Two key hashes -> their split pair's name (``split_pair_name``), by the splits' (name, lo, hi) hash ranges."""
    starts = np.array([lo for _, lo, _ in ranges], np.uint64)
    names = [name for name, _, _ in ranges]
    order = {name: number for number, name in enumerate(names)}

    def split_pair_of(hash_a: int, hash_b: int) -> str:
        a, b = np.searchsorted(starts, np.array([hash_a, hash_b], np.uint64), side="right") - 1
        return split_pair_name(names[a], names[b], order)

    return split_pair_of


def split_pair_name(split_a: str, split_b: str, order: Mapping[str, int]) -> str:
    """``train/test`` for a pair across splits (in the splits' order), ``train`` within one."""
    if split_a == split_b:
        return split_a
    first, second = sorted((split_a, split_b), key=lambda name: (order.get(name, len(order)), name))
    return f"{first}/{second}"


def near_duplicate_report(tally: NearTally, settings: NearDuplicateSettings, *,
                          split_ranges: Sequence[tuple[str, int, int]], salt: str) -> dict[str, Any]:
    """The report of a build's ``NearTally``: pairs by split pair, capped buckets, unhashed images.

    Args:
        tally: the build's, merged; its pairs waiting for the plan (count splits) are placed here.
        settings: how the pairs were found (recorded as the method).
        split_ranges: the splits' (name, hash_lo, hash_hi), in the dataset's order.
        salt: the keys' hash salt (the examples of pairs that waited for the plan are placed by it).
    """
    order = {name: number for number, name in enumerate(name for name, _, _ in split_ranges)}
    counts = {name: n for name, n in tally.counts.items() if name != UNKNOWN}
    examples = {name: list(pairs) for name, pairs in tally.examples.items() if name != UNKNOWN}
    if tally.waiting and split_ranges:
        split_pair_of = split_pair_namer(split_ranges)
        for a, b in np.concatenate(tally.waiting).tolist():
            name = split_pair_of(a, b)
            counts[name] = counts.get(name, 0) + 1
        for pair in tally.examples.get(UNKNOWN, []):
            name = split_pair_of(key_hash(pair.key_a, salt), key_hash(pair.key_b, salt))
            examples.setdefault(name, []).append(pair)
    images, estimated = tally.images_in_pairs()
    within = {name: counts[name] for name in sorted(counts, key=lambda n: order.get(n, len(order))) if "/" not in name}
    across = {name: counts[name] for name in sorted(n for n in counts if "/" in n)}
    report: dict[str, Any] = {
        "method": settings.method(), "pairs": sum(counts.values()), "images_in_pairs": images,
        "within_splits": within, "across_splits": across,
        "examples": {name: [[p.key_a, p.key_b, p.distance] for p in sorted(pairs)[:settings.max_examples]]
                     for name, pairs in sorted(examples.items())},
        "capped_buckets": {"count": tally.capped, "examples": [
            {"band": band, "value": band_value, "images": size} for band, band_value, size in tally.capped_examples]},
        "not_hashed": {"count": tally.not_hashed, "examples": [
            {"key": key, "reason": reason} for key, reason in tally.not_hashed_examples]},
    }
    if estimated:
        report["images_in_pairs_estimated"] = True
    return report


def describe_near_duplicates(report: Mapping[str, Any]) -> str:
    """The summary's line: ``near duplicates: 12 pairs; across splits: train/test 3; within: train 9``."""
    line = f"near duplicates: {report['pairs']} pairs"
    if report["across_splits"]:
        line += "; across splits: " + ", ".join(f"{name} {n}" for name, n in report["across_splits"].items())
    else:
        line += "; none across splits"
    if report["within_splits"]:
        line += "; within: " + ", ".join(f"{name} {n}" for name, n in report["within_splits"].items())
    method = report["method"]
    line += f" (pHash distance <= {method['max_distance']} of 64 bits, alike colours)"
    if report["not_hashed"]["count"]:
        first = report["not_hashed"]["examples"][0]["key"]
        line += f"; {report['not_hashed']['count']} images not hashed (cannot decode, e.g. {first!r})"
    if report["capped_buckets"]["count"]:
        line += (f"; {report['capped_buckets']['count']} hash buckets over {method['max_bucket']} images were "
                 "capped: pairs among their other images were not searched")
    return line

"""The near-duplicate report of a build (manifest metadata "near_duplicates") and its summary line.

Pairs are counted by the splits of their two images, found as the writer places them (the plan's hash
ranges), within each split and across each pair of splits, with up to ``max_examples`` examples per split pair.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from beam_tfrecord.core.hashing import key_hash
from beam_tfrecord.core.sharding import DatasetPlan
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings, NearPair

REPORT_KEY = "near_duplicates"  # the manifest metadata's key
BUCKET, PAIRS, CAPPED, NOT_HASHED = "bucket", "pairs", "capped", "not_hashed"  # FindNearDuplicates' kinds
_MAX_LISTED = 20  # capped buckets and unhashed images named in the report


def split_finder(plan: DatasetPlan | None, salt: str) -> Callable[[str], str]:
    """A published key -> its split, as the writer places it: the split whose hash range holds the key's hash."""
    ranges = [(split.hash_lo, split.hash_hi, split.name) for split in plan.splits] if plan is not None else []

    def split_of(key: str) -> str:
        hashed = key_hash(key, salt)
        return next((name for lo, hi, name in ranges if lo <= hashed < hi), "(no split)")

    return split_of


def split_pair_name(split_a: str, split_b: str, order: Mapping[str, int]) -> str:
    """``train/test`` for a pair across splits (in the splits' order), ``train`` within one."""
    if split_a == split_b:
        return split_a
    first, second = sorted((split_a, split_b), key=lambda name: (order.get(name, len(order)), name))
    return f"{first}/{second}"


def near_duplicate_report(entries: Iterable[tuple[str, Any]], settings: NearDuplicateSettings, *,
                          split_of: Callable[[str], str], split_order: Collection[str],
                          rejected: Collection[str] = ()) -> dict[str, Any]:
    """The report of ``FindNearDuplicates``' entries: pairs by split pair, capped buckets, unhashed images.

    Args:
        entries: ``(PAIRS, (NearPair, ...))``, ``(CAPPED, (band, value, images))``, ``(NOT_HASHED, (key, reason))``.
        settings: how the pairs were found (recorded as the method).
        split_of: a published sample's key -> its split.
        split_order: the splits, in the dataset's order (how a split pair is named).
        rejected: keys of rejected samples: their pairs are counted apart (they are in no split).
    """
    order = {name: number for number, name in enumerate(split_order)}
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[NearPair]] = {}
    capped, not_hashed, with_rejected = [], [], 0
    in_pairs: set[str] = set()
    for kind, value in entries:
        if kind == CAPPED:
            capped.append(value)
        elif kind == NOT_HASHED:
            not_hashed.append(value)
        else:
            for pair in value:
                if pair.key_a in rejected or pair.key_b in rejected:
                    with_rejected += 1
                    continue
                name = split_pair_name(split_of(pair.key_a), split_of(pair.key_b), order)
                counts[name] += 1
                examples.setdefault(name, []).append(pair)
                in_pairs.update((pair.key_a, pair.key_b))
    within = {name: counts[name] for name in sorted(counts, key=lambda n: order.get(n, len(order))) if "/" not in name}
    across = {name: counts[name] for name in sorted(n for n in counts if "/" in n)}
    report: dict[str, Any] = {
        "method": settings.method(), "pairs": sum(counts.values()), "images_in_pairs": len(in_pairs),
        "within_splits": within, "across_splits": across,
        "examples": {name: [[p.key_a, p.key_b, p.distance] for p in sorted(pairs)[:settings.max_examples]]
                     for name, pairs in sorted(examples.items())},
        "capped_buckets": {"count": len(capped), "examples": [
            {"band": band, "value": band_value, "images": size}
            for band, band_value, size in sorted(capped)[:_MAX_LISTED]]},
        "not_hashed": {"count": len(not_hashed), "examples": [
            {"key": key, "reason": reason} for key, reason in sorted(not_hashed)[:_MAX_LISTED]]},
    }
    if with_rejected:
        report["pairs_with_rejected_samples"] = with_rejected
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

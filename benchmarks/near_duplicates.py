"""Near-duplicate images (issue 48): recall on planted copies, false pairs among distinct images, per
(bands, max_distance, colour check), and the search's candidate comparisons; prints the curve the defaults
come from.

    python benchmarks/near_duplicates.py                      # 10,000 distinct images, 300 copies per kind
    python benchmarks/near_duplicates.py --distinct 2000 --copies 100   # quicker

Distinct images: tests/quality/near_duplicate_images.py (random smooth fields, shapes, noise). Planted copies:
``--copies`` originals per kind get one copy each (JPEG quality 30-70, resized 0.5x-2x, cropped by up to 5%);
a pair found that is not (original, its copy) is a false pair. Targets: >= 95% of each kind found, <= 1 false
pair per 10,000 distinct images. The build's cost is measured by benchmarks/image_folder_build.py
(``--variants default,near duplicates``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "tests", "quality")]

import numpy as np
from near_duplicate_images import COPY_KINDS, distinct_image, jpeg, planted_copy

from beam_tfrecord.quality.near_duplicates import (
    ImageSignature,
    NearDuplicateSettings,
    band_values,
    find_pairs,
    image_signature,
)

_BANDS = (4, 6, 8, 11)
_DISTANCES = (8, 10, 12, 14)
_COLOUR = (NearDuplicateSettings().max_colour_difference, 255.0)  # the default check, and none


def _hashes_of(task: tuple[int, int, int]) -> list[tuple[str, ImageSignature, float]]:
    """(key, hash, seconds hashing) of the distinct images [start, stop), and of the copies planted on them."""
    start, stop, copies = task
    out = []
    for number in range(start, stop):
        rng = np.random.default_rng(number)
        image = distinct_image(rng, (int(rng.integers(120, 260)), int(rng.integers(120, 260))))
        encoded = {f"{number:06d}": jpeg(image)}
        if number < copies * len(COPY_KINDS):
            kind = COPY_KINDS[number % len(COPY_KINDS)]
            encoded[f"{number:06d}.{kind}"] = planted_copy(image, kind, rng)
        for key, data in encoded.items():
            began = time.perf_counter()
            value = image_signature(data, key=key)
            out.append((key, value, time.perf_counter() - began))
    return out


def _comparisons(hashes: list[tuple[str, ImageSignature]], bands: int) -> int:
    """Pairs the banded search compares (each bucket's pairs, over every band)."""
    sizes: dict[tuple[int, int], int] = {}
    for _, value in hashes:
        for band, band_value in enumerate(band_values(value.phash, bands)):
            sizes[band, band_value] = sizes.get((band, band_value), 0) + 1
    return sum(n * (n - 1) // 2 for n in sizes.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distinct", type=int, default=10_000)
    parser.add_argument("--copies", type=int, default=300, help="planted copies per kind")
    parser.add_argument("--processes", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    if args.copies * len(COPY_KINDS) > args.distinct:
        parser.error("--copies x 3 must be at most --distinct (one copy per original)")
    step = 200
    tasks = [(start, min(start + step, args.distinct), args.copies) for start in range(0, args.distinct, step)]
    began = time.perf_counter()
    with multiprocessing.Pool(args.processes) as pool:
        rows = [row for chunk in pool.map(_hashes_of, tasks) for row in chunk]
    hashes = [(key, value) for key, value, _ in rows]
    print(f"{args.distinct} distinct images + {args.copies} copies of each kind ({', '.join(COPY_KINDS)}); made and "
          f"hashed in {time.perf_counter() - began:.0f} s; hashing {np.mean([s for *_, s in rows]) * 1e3:.2f} ms "
          f"per image (median {np.median([s for *_, s in rows]) * 1e3:.2f})")
    planted = {(key.split(".")[0], key): key.split(".")[1] for key, _ in hashes if "." in key}
    print(f"\n  {'bands':>5} {'max dist':>8} {'colour':>6} " + " ".join(f"{kind:>13}" for kind in COPY_KINDS)
          + f" {'false pairs':>11} {'per 10k':>8} {'compared':>10}")
    for bands in _BANDS:
        compared = _comparisons(hashes, bands)
        for max_distance in _DISTANCES:
            for colour in _COLOUR:
                settings = NearDuplicateSettings(max_distance=max_distance, bands=bands, max_bucket=10**9,
                                                 max_colour_difference=colour)
                found = {(p.key_a, p.key_b) for p in find_pairs(hashes, settings)}
                recall = [sum(pair in found for pair, k in planted.items() if k == kind) / args.copies
                          for kind in COPY_KINDS]
                false = len(found - set(planted))
                print(f"  {bands:>5} {max_distance:>8} {colour if colour < 255 else 'off':>6} "
                      + " ".join(f"{r:>13.1%}" for r in recall)
                      + f" {false:>11} {false * 10_000 / args.distinct:>8.2f} {compared:>10,}", flush=True)
    default = NearDuplicateSettings()
    print(f"\ndefaults: bands={default.bands}, max_distance={default.max_distance}, max_colour_difference="
          f"{default.max_colour_difference}; targets: >= 95% of each kind, "
          f"<= 1 false pair per 10,000 distinct images")


if __name__ == "__main__":
    main()

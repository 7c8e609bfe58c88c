"""Scale check of near duplicates (issue 48): what each step of the search holds and takes for N images,
running its real code on inputs shaped as a build of N images makes them.

    python benchmarks/near_duplicates_scale.py --images 1000000,10000000,100000000,1000000000

Steps of a build of N images (``beam.near_duplicates``), with the settings the build picks
(``NearDuplicateSettings.for_images``: 8 bands of 8 bits, 4 of 16 bits from 100,000 images):
- an encoder buffers ``BUFFER_IMAGES`` signatures, then writes one file: F = N / BUFFER_IMAGES files;
- a search task reads ``_FILES_PER_TASK`` files and emits its images by (band, band value): measured on random
  signatures (the same at every N);
- a bucket holds N / 2^(64 / bands) images on average: ``bucket_pairs`` on one such bucket is measured (it sorts
  the bucket, then keeps ``max_bucket``); the share of buckets over ``max_bucket`` (capped) is Poisson's;
- the combiner merges the pairs' tallies: ``--pair_fraction`` x N pairs (near copies), in tallies of 10,000
  pairs, for ratio splits (bounded) and count splits (16 bytes a pair wait for the plan).
CPU is ``time.process_time``; memory the tracemalloc peak of a second run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np
from duplicates_scale import _measured  # (result, CPU seconds, peak MiB), as the exact duplicates' simulation measures
from scipy.stats import poisson

from beam_tfrecord.beam.near_duplicates import _FILES_PER_TASK, _BandEntriesFn
from beam_tfrecord.core.sharding import SplitConfig
from beam_tfrecord.quality.near_duplicates import ImageSignature, NearDuplicateSettings, NearPair, bucket_pairs
from beam_tfrecord.quality.near_report import split_pair_namer
from beam_tfrecord.quality.near_signatures import BUFFER_IMAGES, SignatureRows, Signatures, write_signature_file
from beam_tfrecord.quality.near_tally import NearTally, tally_pairs

_TALLY_PAIRS = 10_000  # pairs per bucket tally merged (a bucket's pairs)
_MAX_SIMULATED_PAIRS = 200_000  # above: the tally's growth is extrapolated (linear or flat, as printed)


def _signatures(rng: np.random.Generator, count: int, first: int) -> SignatureRows:
    rows = SignatureRows()
    phashes, colours = rng.integers(0, 2**63, count, dtype=np.uint64).tolist(), rng.bytes(48 * count)
    for n, phash in enumerate(phashes):
        rows.add(f"images/{first + n:012d}.jpg", ImageSignature(phash * 2, colours[48 * n:48 * n + 48]))
    return rows


def _encoder_buffer(folder: str, rng: np.random.Generator) -> str:
    path = os.path.join(folder, f"{rng.integers(1 << 30)}.sig")
    write_signature_file(path, _signatures(rng, BUFFER_IMAGES, 0).signatures())
    return path


def _search_task(paths: list[str], bands: int) -> int:
    return sum(1 for _ in _BandEntriesFn(bands).process((0, [tuple(paths)])))


def _bucket(signatures: Signatures, settings: NearDuplicateSettings) -> int:
    """One bucket, as the pairs step gets it: its members listed (the GroupByKey's values), then searched."""
    return len(bucket_pairs(1, list(signatures.rows()), settings).pairs)


def _tallies(pairs: int, ratio: bool) -> NearTally:
    splits = SplitConfig.parse("train=0.8,validation=0.1,test=0.1")
    namer = split_pair_namer(splits.ratio_bounds()) if ratio else None
    cap = 20 if ratio else 120
    tally = NearTally()
    for first in range(0, pairs, _TALLY_PAIRS):
        batch = [NearPair(f"images/{n:012d}.jpg", f"images/{n:012d}.copy.jpg", 3)
                 for n in range(first, min(pairs, first + _TALLY_PAIRS))]
        tally = tally.merge(tally_pairs(batch, salt="s", split_pair_of=namer, max_examples=cap), cap)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default="1000000,10000000,100000000,1000000000")
    parser.add_argument("--pair_fraction", type=float, default=0.001, help="near-copy pairs per image")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="near-scale-") as folder:
        _, write_s, write_mb = _measured(_encoder_buffer, folder, rng)
        paths = [_encoder_buffer(folder, rng) for _ in range(_FILES_PER_TASK)]
        for images in (int(n) for n in args.images.split(",")):
            settings = NearDuplicateSettings.for_images(images)
            files = math.ceil(images / BUFFER_IMAGES)
            _, task_s, task_mb = _measured(_search_task, paths, settings.bands)
            mean = images / 2 ** (64 // settings.bands)
            size = max(2, round(mean))
            rows = _signatures(rng, size, 0).signatures()
            _, bucket_s, bucket_mb = _measured(_bucket, rows, settings)
            capped = 1.0 - poisson.cdf(settings.max_bucket, mean)
            pairs = int(images * args.pair_fraction)
            simulated = min(pairs, _MAX_SIMULATED_PAIRS)
            line = (f"near-scale: images={images} bands={settings.bands} files={files} "
                    f"encoder_write_cpu_s={write_s:.2f} encoder_mb={write_mb:.0f} "
                    f"search_tasks={math.ceil(files / _FILES_PER_TASK)} task_cpu_s={task_s:.2f} task_mb={task_mb:.0f} "
                    f"shuffled_entries={images * settings.bands} "
                    f"buckets={settings.bands * 2 ** (64 // settings.bands)} "
                    f"bucket_images={size} bucket_cpu_s={bucket_s:.3f} bucket_mb={bucket_mb:.1f} "
                    f"capped_share={capped:.3g} pairs={pairs}")
            for ratio in (True, False):
                _, tally_s, tally_mb = _measured(_tallies, simulated, ratio)
                scale = pairs / simulated if simulated else 0.0
                kind = "ratio" if ratio else "count"
                line += (f" tally_{kind}_cpu_s={tally_s * scale:.1f} tally_{kind}_mb="
                         f"{tally_mb if ratio else tally_mb * scale:.0f}{'' if scale <= 1 else ' (extrapolated)'}")
            print(line, flush=True)


if __name__ == "__main__":
    main()

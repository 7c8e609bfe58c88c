"""Fixed cost of a build: ``WriteTFRecordDataset`` on the DirectRunner with a handful of tiny samples,
in one in-memory worker (``local_workers=1``) and with the default (one worker process per core),
interleaved in one process after its imports. What a small job pays before its data counts.

    python benchmarks/fixed_cost.py                 # 3 rounds
    python benchmarks/fixed_cost.py --rounds 5 --samples 1000
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import apache_beam as beam

from beam_tfrecord import DType, Sample, Scalar, Schema, WriteTFRecordDataset
from beam_tfrecord.beam.runners.local_workers import available_cores

SCHEMA = Schema({"id": Scalar(DType.INT64)})


def build_seconds(out: str, samples: int, local_workers: int | None) -> float:
    """Seconds to build and publish ``samples`` one-feature samples into ``out``."""
    start = time.perf_counter()
    with beam.Pipeline() as pipeline:  # Beam's default options, as a user's own pipeline
        _ = (pipeline | beam.Create([[Sample(f"k{i}", {"id": i}) for i in range(samples)]])
             | WriteTFRecordDataset(out, schema=SCHEMA, local_workers=local_workers))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    variants = {"1 in-memory worker (local_workers=1)": 1, f"default ({available_cores()} worker processes)": None}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    root = tempfile.mkdtemp(prefix="fixed_cost-")
    try:
        for _ in range(args.rounds):
            for name, workers in variants.items():  # interleaved: both see the same machine state
                out = os.path.join(root, "dataset")
                seconds[name].append(build_seconds(out, args.samples, workers))
                shutil.rmtree(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.samples} tiny samples, median of {args.rounds} rounds")
    for name, values in seconds.items():
        print(f"  {name:<40} {sorted(values)[len(values) // 2]:6.2f} s")


if __name__ == "__main__":
    main()

"""Random access benchmark: ArrayRecord by index vs sequential TFRecord, on the same records.

Builds (once, with the project's Beam writer) the same CIFAR-like dataset as read_benchmark.py
(~3 KB records: a 32x32x3 uint8 Tensor and a ClassLabel) twice, as TFRecord and as ArrayRecord
shards. Then, in one run, interleaved round after round after a warm-up round (page cache warm
for every mode), keeps the best full pass of each:

  (a) TFRecord sequential: read_numpy(shuffle=False), records decoded to NumPy
  (b) ArrayRecord sequential: read_numpy(shuffle=False) on the ArrayRecord copy
  (c) ArrayRecord global shuffle: read_numpy(shuffle=True), every record by index in a random order
  (d) ArrayRecord single reads: ArrayRecordShardReader.read([i]) one record per call, random order
  (e) TFRecord buffered shuffle: read_numpy(shuffle=True, shuffle_buffer=10000), shard order + buffer

and prints records/s and the ratios c/a (what a true global shuffle costs against sequential
TFRecord) and c/e (against the shuffle TFRecord offers).

Run: python benchmarks/random_access.py [--records 100000] [--dir /tmp/bt_random_access] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable

import numpy as np
from read_benchmark import build

from beam_tfrecord import load_manifest, read_numpy
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.formats.array_record import ArrayRecordShardReader


def single_reads(path: str) -> Iterable[bytes]:
    """Every record of the train split, one ``read([i])`` call each, in a seeded random order."""
    manifest = load_manifest(path)
    shards = manifest.split("train").shards
    readers = [ArrayRecordShardReader(os.path.join(path, s.filename), crc32c=s.crc32c, num_records=s.num_records)
               for s in shards]
    pairs = [(i, j) for i, s in enumerate(shards) for j in range(s.num_records)]
    for k in np.random.default_rng(0).permutation(len(pairs)).tolist():
        i, j = pairs[k]
        yield readers[i].read([j])[0]


def measure(modes: dict[str, Callable[[], Iterable]], rounds: int) -> dict[str, tuple[float, int]]:
    """(best seconds, records) of a full pass of each mode; rounds interleave the modes."""
    best: dict[str, tuple[float, int]] = {name: (float("inf"), 0) for name in modes}
    for round_index in range(rounds + 1):
        for name, make in modes.items():
            started = time.perf_counter()
            count = sum(1 for _ in make())
            elapsed = time.perf_counter() - started
            if round_index and elapsed < best[name][0]:
                best[name] = (elapsed, count)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--dir", default="/tmp/bt_random_access")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    tfrecord, array_record = os.path.join(args.dir, "tfrecord"), os.path.join(args.dir, "array_record")
    build(tfrecord, args.records, FileFormat.TFRECORD)
    build(array_record, args.records, FileFormat.ARRAY_RECORD)
    split = load_manifest(array_record).split("train")
    print(f"{split.num_records} records in {len(split.shards)} shards ({split.num_bytes / 1e6:.0f} MB as "
          f"ArrayRecord, {load_manifest(tfrecord).split('train').num_bytes / 1e6:.0f} MB as TFRecord), "
          f"{os.cpu_count()} CPUs")
    results = measure({
        "a": lambda: read_numpy(tfrecord),
        "b": lambda: read_numpy(array_record),
        "c": lambda: read_numpy(array_record, shuffle=True, seed=1),
        "d": lambda: single_reads(array_record),
        "e": lambda: read_numpy(tfrecord, shuffle=True, seed=1, shuffle_buffer=10_000),
    }, args.rounds)
    labels = {"a": "(a) TFRecord sequential, read_numpy", "b": "(b) ArrayRecord sequential, read_numpy",
              "c": "(c) ArrayRecord global shuffle, read_numpy", "d": "(d) ArrayRecord one read([i]) per record",
              "e": "(e) TFRecord buffered shuffle (10k), read_numpy"}
    rates = {}
    for name, label in labels.items():
        seconds, count = results[name]
        rates[name] = count / seconds
        print(f"{label:<50} {rates[name]:>10,.0f} records/s  ({count} records in {seconds:.2f} s)")
    print(f"c/a = {rates['c'] / rates['a']:.2f}   c/e = {rates['c'] / rates['e']:.2f}   "
          f"d/a = {rates['d'] / rates['a']:.2f}   b/a = {rates['b'] / rates['a']:.2f}")


if __name__ == "__main__":
    main()

"""Read benchmark: the tutorials' recipe vs the raw record rate vs ``read_dataset``, on the same shards.

Builds (once, with the project's Beam writer) a dataset of ~3 KB records, CIFAR-like: a 32x32x3
uint8 ``Tensor`` and a ``ClassLabel``. Then, in one run, times full passes of each reader, mode
after mode, after a warm-up round (so every mode reads from the page cache), and keeps the best:

  (a) tutorial: TFRecordDataset(files) -> map(parse_single_example + decode_raw) -> batch(32)
  (b) raw:      TFRecordDataset(files) -> batch(1024), no parsing (the practical limit)
  (c) ours:     read_dataset(path, batch_size=B), parse spec from the manifest, no image decoding

and prints records/s and the ratios c/a and c/b (c at batch 1024, as b, and at batch 32, as a).

Run: python benchmarks/read_benchmark.py [--records 200000] [--dir /tmp/bt_read_bench] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import apache_beam as beam
import numpy as np
import tensorflow as tf
from measure import already_built

from beam_tfrecord import (
    ClassLabel,
    Sample,
    Schema,
    ShardingConfig,
    Tensor,
    TensorDType,
    WriteTFRecordDataset,
    read_dataset,
)
from beam_tfrecord.core.naming import FileFormat
from beam_tfrecord.dataset import load_manifest, shard_paths

SCHEMA = Schema(features={"image": Tensor(TensorDType.UINT8, (32, 32, 3)),
                          "label": ClassLabel(tuple(f"class_{i}" for i in range(10)))})
CHUNK = 1000  # samples per Beam element (the writer accepts lists of samples)


def _chunks(start: int, num_records: int) -> Iterator[list[Sample]]:
    rng = np.random.default_rng(start)
    yield [Sample(f"{i:08d}", {"image": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), "label": i % 10})
           for i in range(start, min(start + CHUNK, num_records))]


def build(path: str, num_records: int, file_format: FileFormat = FileFormat.TFRECORD) -> None:
    """Writes the benchmark dataset in ``file_format`` with the project's writer (skipped when it
    already exists)."""
    if already_built(path, num_records):
        return
    started = time.perf_counter()
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create(list(range(0, num_records, CHUNK)))
             | beam.FlatMap(_chunks, num_records)
             | WriteTFRecordDataset(path, schema=SCHEMA, sharding=ShardingConfig(num_shards=16),
                                    file_format=file_format))
    print(f"built {num_records} {file_format.value} records in {time.perf_counter() - started:.1f} s")


def tutorial(files: list[str]) -> tf.data.Dataset:
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record: tf.Tensor) -> dict[str, tf.Tensor]:
        example = tf.io.parse_single_example(record, spec)
        example["image"] = tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), [32, 32, 3])
        return example

    return tf.data.TFRecordDataset(files).map(parse).batch(32)


def raw(files: list[str]) -> tf.data.Dataset:
    return tf.data.TFRecordDataset(files).batch(1024)


def measure(modes: dict[str, Callable[[], tf.data.Dataset]], num_records: int,
            rounds: int) -> dict[str, tuple[float, float]]:
    """(records/s, CPU microseconds per record) of each mode: the best of ``rounds`` full passes.

    Passes are iterated from Python like a training loop. Rounds go mode after mode (a, b, c, a,
    b, c...), after one warm-up round, so that a busy moment on a shared machine hits every mode
    alike rather than one of them. CPU time (all threads of this process) is the noise-robust view.
    """
    best = {name: (float("inf"), float("inf")) for name in modes}
    for round_index in range(rounds + 1):
        for name, make in modes.items():
            dataset = make()
            started, cpu_started = time.perf_counter(), time.process_time()
            for _ in dataset:
                pass
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            if round_index:
                best[name] = (min(best[name][0], elapsed), min(best[name][1], cpu))
    return {name: (num_records / wall, cpu * 1e6 / num_records) for name, (wall, cpu) in best.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--dir", default="/tmp/bt_read_bench")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    build(args.dir, args.records)
    manifest = load_manifest(args.dir)
    files = [str(p) for p in shard_paths(args.dir, manifest, "train")]
    split = manifest.split("train")
    print(f"{split.num_records} records of {split.num_bytes / split.num_records / 1000:.2f} KB "
          f"in {len(files)} shards ({split.num_bytes / 1e6:.0f} MB), {os.cpu_count()} CPUs, TF {tf.__version__}")

    rates = measure({
        "a": lambda: tutorial(files),
        "b": lambda: raw(files),
        "c1024": lambda: read_dataset(args.dir, batch_size=1024),
        "c32": lambda: read_dataset(args.dir, batch_size=32),
    }, split.num_records, args.rounds)
    labels = {"a": "(a) tutorial map(parse_single_example).batch(32)", "b": "(b) raw TFRecordDataset.batch(1024)",
              "c1024": "(c) read_dataset(batch_size=1024)", "c32": "(c) read_dataset(batch_size=32)"}
    for name, label in labels.items():
        print(f"{label:<50} {rates[name][0]:>10,.0f} records/s  {rates[name][1]:5.2f} CPU us/record")
    a, b, c1024, c32 = (rates[n][0] for n in ("a", "b", "c1024", "c32"))
    print(f"c/a = {c1024 / a:.2f} (batch 1024), {c32 / a:.2f} (batch 32)")
    print(f"c/b = {c1024 / b:.2f} (batch 1024), {c32 / b:.2f} (batch 32)")
    print(f"load average during the run: {os.getloadavg()[1]:.1f} (5 min) on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()

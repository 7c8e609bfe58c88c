"""The drop-in, measured: ``beam.io.WriteToTFRecord(prefix, num_shards=N)`` against
``WriteBalancedTFRecord(prefix, num_shards=N)`` on the same serialized Examples, DirectRunner.

    python benchmarks/dropin_benchmark.py                        # 100k records of 0.2-6 KB, 8 shards
    python benchmarks/dropin_benchmark.py --records 20000 --repeats 1   # quicker
    python benchmarks/dropin_benchmark.py --variants write_balanced,write_balanced_no_statistics
                                                                  # statistics.pb's cost (issue 50)

Both pipelines are ``Create(chunk ids) -> FlatMap(make serialized Examples) -> writer``; the
records (an id, a label and a payload of skewed size) are the same in both. Each run is its own
process (imports excluded from its time); variants run interleaved, ``--repeats`` times each
(median shown), and the table prints ratios against WriteToTFRecord measured in the same run.
Peak RSS is the whole process tree's. Shard spread is (largest - smallest) / largest shard bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import child_env, run_measured

VARIANTS = ("write_to_tfrecord", "write_balanced", "write_balanced_no_statistics")
CHUNK = 1000


def _records(chunk: int, total: int) -> list[bytes]:
    """Serialized Examples of chunk ``chunk``: payload sizes skewed (most small, a few large)."""
    import numpy as np

    from beam_tfrecord.core.proto import Example

    rng = np.random.default_rng(chunk)
    out = []
    for i in range(chunk * CHUNK, min(total, (chunk + 1) * CHUNK)):
        example = Example()
        example.features.feature["id"].int64_list.value.append(i)
        example.features.feature["label"].int64_list.value.append(i % 10)
        size = int(min(6000, 200 + rng.pareto(1.5) * 400))
        example.features.feature["payload"].bytes_list.value.append(rng.bytes(size))
        out.append(example.SerializeToString())
    return out


def run_child(variant: str, args: argparse.Namespace) -> None:
    import apache_beam as beam

    from beam_tfrecord import WriteBalancedTFRecord

    start, cpu = time.perf_counter(), _cpu()
    with beam.Pipeline() as pipeline:
        records = (pipeline
                   | beam.Create(range((args.records + CHUNK - 1) // CHUNK))
                   | beam.FlatMap(_records, args.records))
        if variant == "write_to_tfrecord":
            _ = records | beam.io.WriteToTFRecord(os.path.join(args.out, "data"), num_shards=args.shards)
        else:  # the same names
            _ = records | WriteBalancedTFRecord(os.path.join(args.out, "data"), num_shards=args.shards,
                                                  statistics=variant != "write_balanced_no_statistics")
    print(json.dumps({"seconds": time.perf_counter() - start, "cpu": _cpu() - cpu}))


def _cpu() -> float:
    """User + system seconds of this process and its children that exited (the encoding pool's)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _shard_sizes(out: str) -> list[int]:
    return [os.path.getsize(os.path.join(out, name)) for name in os.listdir(out)
            if name.startswith("data-")]  # both write PREFIX-SSSSS-of-NNNNN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default="write_to_tfrecord,write_balanced",
                        help=f"comma-separated, run interleaved: {', '.join(VARIANTS)}; the first is the base")
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        run_child(args.child, args)
        return
    variants = [v for v in args.variants.split(",") if v]
    results: dict[str, list[tuple[float, int, float, float]]] = {v: [] for v in variants}
    root = tempfile.mkdtemp(prefix="dropin-bench-")
    try:
        for _ in range(args.repeats):
            for variant in variants:
                out = os.path.join(root, variant)
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                os.sync()
                measured = run_measured([sys.executable, __file__, "--child", variant, "--out", out,
                                         "--records", str(args.records), "--shards", str(args.shards)],
                                        env=child_env(os.path.dirname(HERE)))
                child = json.loads(measured.stdout.strip().splitlines()[-1])
                seconds = child["seconds"]
                sizes = _shard_sizes(out)
                if len(sizes) != args.shards:
                    raise RuntimeError(f"{variant}: {len(sizes)} shards, expected {args.shards}")
                results[variant].append((seconds, measured.peak_rss_bytes, (max(sizes) - min(sizes)) / max(sizes),
                                         child["cpu"]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(r[0] for r in results[variants[0]])
    base_cpu = statistics.median(r[3] for r in results[variants[0]])
    print(f"{args.records} records, {args.shards} shards, DirectRunner, median of {args.repeats}; ratios against "
          f"{variants[0]}")
    print(f"{'variant':<29} {'seconds':>8} {'CPU s':>7} {'records/s':>10} {'peak RSS MB':>12} {'shard spread':>13} "
          f"{'time ratio':>11} {'CPU ratio':>10}")
    for variant, runs in results.items():
        seconds = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[3] for r in runs)
        rss = statistics.median(r[1] for r in runs) / 1e6
        spread = statistics.median(r[2] for r in runs)
        print(f"{variant:<29} {seconds:>8.2f} {cpu:>7.2f} {args.records / seconds:>10.0f} {rss:>12.0f} "
              f"{spread:>12.2%} {seconds / base:>10.2f}x {cpu / base_cpu:>9.2f}x")


if __name__ == "__main__":
    main()

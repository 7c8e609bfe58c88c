"""Write benchmark: (a) single-process tf.train.Example + TFRecordWriter, (b) naive Beam
(Create -> Map(serialize) -> WriteToTFRecord(num_shards=8)), (c) beam-tfrecord's writer on the
DirectRunner with the library's default options (every core: its encoding pool), on the same
data in one run. Prints records/s, MB/s, CPU microseconds per record, peak RSS and c/a, c/b.

    python benchmarks/write_benchmark.py                       # both workloads, full size
    python benchmarks/write_benchmark.py --records 100000 --blobs 1000   # quicker
    python benchmarks/write_benchmark.py --workloads small --variants c_beam_tfrecord --cpus 1,2
                                         # (c) pinned to 1 core, then 2 (sched_setaffinity), interleaved: speed-up
    python benchmarks/write_benchmark.py --workloads small --variants c_beam_tfrecord,c_no_statistics
                                         # statistics.pb's cost, and the same shards without it

CPU per record is the whole process tree's user + system time (workers and pool processes
included, as they exit), less the CPU the variant's child spent importing before its clock starts.

Each run is its own process, after an ``os.sync()``; its time excludes interpreter and library
imports. (b) runs once, first; then (a) and (c) run ``--repeats`` times each, interleaved (median
shown). Peak RSS is the whole process tree's (workers included), sampled every 50 ms.

The ratios (the issue's targets) use the time until each run returns. "On disk" adds an
``os.sync()`` after the run exits: (a) and (b) return with their output still in the page cache,
while (c) writes its shards with O_DIRECT, so by then they are on the device.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workloads
from measure import child_env, paired_ratios, run_measured

VARIANTS = ("a_single_process", "b_naive_beam", "c_beam_tfrecord")
# Optional, with --variants: (c) with Beam's own worker processes (one per core) instead of the
# library's default, to compare the two ways of using every core in one run.
C_BEAM_WORKERS = "c_beam_workers"
# Optional, with --variants: (c) checking exact duplicates (``duplicates="report"``, issue 48), interleaved
# with (c): the check's cost (target: at most 10% of the build's time).
C_DUPLICATES = "c_duplicates"
# Optional, with --variants: (c) without statistics.pb (``DatasetDescription(statistics=False)``), interleaved with
# (c): the statistics' cost (issue 50: at most 10%), and the same shards with and without them.
C_NO_STATISTICS = "c_no_statistics"


# ----- the variants (each runs in a child process) -----

def _tf_example(image: bytes, label: int):
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    })).SerializeToString()


def _inputs(workload: str, args: argparse.Namespace):
    """Yields (key, image bytes, label) for the workload, the same for every variant."""
    if workload == "small":
        for index in range(workloads.num_chunks(args.records)):
            keys, images, labels = workloads.small_chunk(index, args.records)
            for key, image, label in zip(keys, images, labels.tolist()):
                yield key, image.tobytes(), label
    else:
        for i, path in enumerate(workloads.make_blob_files(args.blob_dir, args.blobs, args.blob_kib * 1024)):
            with open(path, "rb") as handle:
                yield os.path.basename(path), handle.read(), i % 10


def run_a(workload: str, args: argparse.Namespace, out: str) -> None:
    import tensorflow as tf

    os.makedirs(out, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(out, "data.tfrecord")) as writer:
        for _, image, label in _inputs(workload, args):
            writer.write(_tf_example(image, label))


def _small_records(index: int, total: int):
    _keys, images, labels = workloads.small_chunk(index, total)
    return [(image.tobytes(), label) for image, label in zip(images, labels.tolist())]


def _read_blob(path: str, label: int):
    with open(path, "rb") as handle:
        return handle.read(), label


def run_b(workload: str, args: argparse.Namespace, out: str) -> None:
    import apache_beam as beam

    with beam.Pipeline(argv=["--runner=DirectRunner"]) as pipeline:
        if workload == "small":
            rows = (pipeline | beam.Create(range(workloads.num_chunks(args.records)))
                    | beam.FlatMap(_small_records, args.records))
        else:
            paths = workloads.make_blob_files(args.blob_dir, args.blobs, args.blob_kib * 1024)
            rows = pipeline | beam.Create([(p, i % 10) for i, p in enumerate(paths)]) | beam.MapTuple(_read_blob)
        _ = (rows | beam.MapTuple(_tf_example)
             | beam.io.WriteToTFRecord(os.path.join(out, "data"), num_shards=8))


def _small_samples(index: int, total: int):
    from beam_tfrecord import Sample

    keys, images, labels = workloads.small_chunk(index, total)
    return [Sample(key, {"image": image, "label": label}) for key, image, label in zip(keys, images, labels.tolist())]


BLOB_CHUNK = 100


def _blob_chunks(pattern: str, count: int):
    """Lists the first ``count`` blob files with their sizes (on the worker, as a file source
    does) and yields chunks of samples: label ``i % 10`` for the i-th path in order, as in (a)."""
    from beam_tfrecord import FileRef, Sample, storage

    samples = [Sample(os.path.basename(path), {"image": FileRef(path, size), "label": i % 10})
               for i, (path, size) in enumerate(storage.list_files(pattern)[:count])]
    for start in range(0, len(samples), BLOB_CHUNK):
        yield samples[start:start + BLOB_CHUNK]


def run_c(workload: str, args: argparse.Namespace, out: str) -> None:
    import apache_beam as beam

    from beam_tfrecord import (
        ClassLabel,
        DatasetDescription,
        DType,
        Scalar,
        Schema,
        ShardingConfig,
        Tensor,
        TensorDType,
        WriterChecks,
        WriteTFRecordDataset,
    )

    options = ["--runner=DirectRunner", *args.c_options.split()]
    statistics = args.child != C_NO_STATISTICS
    if args.child == C_BEAM_WORKERS:
        options += ["--direct_running_mode=multi_processing", f"--direct_num_workers={len(os.sched_getaffinity(0))}"]
    sharding = ShardingConfig(target_shard_bytes=args.target_shard_mib << 20)
    with beam.Pipeline(argv=options) as pipeline:
        if workload == "small":
            schema = Schema({"image": Tensor(TensorDType.UINT8, workloads.IMAGE_SHAPE),
                             "label": ClassLabel(tuple(str(i) for i in range(10)))})
            samples = (pipeline | beam.Create(range(workloads.num_chunks(args.records)))
                       | beam.Map(_small_samples, args.records))  # one element = a chunk of 1,000 samples
        else:
            schema = Schema({"image": Scalar(DType.BYTES), "label": Scalar(DType.INT64)})
            # A listing gives paths with sizes, so the writer plans each record from its size and
            # reads each file once. It is made on the worker, as a file source does (a Create of the
            # listing would be pickled and bz2-compressed into the pipeline graph).
            workloads.make_blob_files(args.blob_dir, args.blobs, args.blob_kib * 1024)
            samples = (pipeline | beam.Create([os.path.join(args.blob_dir, "*.bin")])
                       | beam.FlatMap(_blob_chunks, args.blobs))
        duplicates = "report" if args.child == C_DUPLICATES else None
        _ = samples | WriteTFRecordDataset(
            out, description=DatasetDescription(schema=schema, sharding=sharding, statistics=statistics),
            checks=WriterChecks(duplicates=duplicates))


# ----- the driver -----

def _schedule(variants: list[str], repeats: int) -> list[str]:
    """Run order: (b) once, first; then the repeats of the others interleaved, every other repeat reversed
    (a, c, c, a, a, c, ...).

    Interleaving exposes (a) and (c) to the same machine state: after (b) frees ~16 GB, or as
    the page cache fills, the next runs pay for fresh memory (~2.6 s per GB here). Reversing every other
    repeat keeps a drifting load from landing on whichever variant always runs second.
    """
    order = [v for v in variants if v == "b_naive_beam"]
    others = [v for v in variants if v != "b_naive_beam"]
    for repeat in range(repeats):
        order += others if repeat % 2 == 0 else others[::-1]
    return order


def _tree_cpu_seconds() -> float:
    """User + system CPU of every finished child process of this one (and theirs, once waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pin_to_cores(count: int) -> None:
    """Restricts this process (and what it starts) to the first ``count`` cores it may use."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:count])


def _measure(variant: str, workload: str, args: argparse.Namespace, out: str, cpus: int = 0) -> dict:
    """Runs one variant in a child process; returns its time, CPU, peak process-tree RSS and output size."""
    command = [sys.executable, __file__, "--child", variant, "--workload", workload, "--out", out,
               "--records", str(args.records), "--blobs", str(args.blobs), "--blob_kib", str(args.blob_kib),
               "--blob_dir", args.blob_dir, f"--c_options={args.c_options}",
               "--target_shard_mib", str(args.target_shard_mib), "--pin_cpus", str(cpus)]
    cpu_before = _tree_cpu_seconds()
    measured = run_measured(command, env=child_env(HERE))
    reported = json.loads(measured.stdout.strip().splitlines()[-1])
    seconds = reported["seconds"]
    cpu_seconds = _tree_cpu_seconds() - cpu_before - reported["import_cpu_seconds"]
    # What the run left in the page cache still has to reach the disk: (a) and (b) write through
    # the page cache, (c) writes its shards with O_DIRECT. Timed apart, after the child exits.
    start = time.perf_counter()
    os.sync()
    sync_seconds = time.perf_counter() - start
    written = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(out) for f in files
                  if ".tfrecord" in f or f.startswith("data-"))
    return {"variant": variant, "seconds": seconds, "on_disk_seconds": seconds + sync_seconds,
            "cpu_seconds": cpu_seconds, "peak_rss_mb": measured.peak_rss_bytes / 2**20, "bytes": written,
            "shards": _shard_checksums(out)}


def _shard_checksums(out: str) -> list[tuple[str, str, int]] | None:
    """(file, CRC32C, bytes) of each shard the manifest lists: equal lists, equal shards (None: no manifest)."""
    path = os.path.join(out, "manifest.json")
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        splits = json.load(handle)["splits"]
    return [(s["filename"], s["crc32c"], s["num_bytes"]) for split in splits for s in split["shards"]]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _report(workload: str, records: int, results: list[dict]) -> None:
    print(f"\nworkload {workload}: {records} records")
    print(f"  {'variant':<18} {'seconds':>8} {'records/s':>11} {'MB/s':>8} {'CPU us/rec':>11} {'cores busy':>10} "
          f"{'peak RSS MB':>12} {'on disk s':>10}  runs")
    for r in results:
        print(f"  {r['variant']:<18} {r['seconds']:8.2f} {records / r['seconds']:11,.0f} "
              f"{r['bytes'] / 1e6 / r['seconds']:8.1f} {r['cpu_seconds'] / records * 1e6:11,.1f} "
              f"{r['cpu_seconds'] / r['seconds']:10.2f} {r['peak_rss_mb']:12,.0f} {r['on_disk_seconds']:10.2f}  "
              f"{r['runs']} (median)")
    by = {r["variant"]: r for r in results}
    a, b, c = (by.get(v) for v in VARIANTS)
    if a and c:
        print(f"  c/a = {a['seconds'] / c['seconds']:.2f}"
              f"   (until the output is on disk, with os.sync(): {a['on_disk_seconds'] / c['on_disk_seconds']:.2f})")
    if c and by.get(C_DUPLICATES):
        d = by[C_DUPLICATES]
        print(f"  duplicates' cost: {C_DUPLICATES} / c = {d['seconds'] / c['seconds']:.3f} in time, "
              f"{d['cpu_seconds'] / c['cpu_seconds']:.3f} in CPU, "
              f"{d['peak_rss_mb'] / c['peak_rss_mb']:.3f} in peak RSS")
    if b and c:
        print(f"  c/b = {b['seconds'] / c['seconds']:.2f}"
              f"   (until the output is on disk, with os.sync(): {b['on_disk_seconds'] / c['on_disk_seconds']:.2f})")
    bare = by.get(C_NO_STATISTICS)
    if bare and c:
        same = c["shards"] == bare["shards"] and c["shards"] is not None
        print(f"  statistics.pb's cost: c / c_no_statistics = {c['seconds'] / bare['seconds']:.3f} in time, "
              f"{c['cpu_seconds'] / bare['cpu_seconds']:.3f} in CPU; shards identical: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="small,blobs")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--records", type=int, default=1_000_000, help="small records")
    parser.add_argument("--blobs", type=int, default=5_000)
    parser.add_argument("--blob_kib", type=int, default=200)
    parser.add_argument("--blob_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_bench_blobs"))
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_bench_out"))
    parser.add_argument("--c_options_small", default="",
                        help="pipeline options for variant (c) on small records (default: none, the library's "
                             "defaults)")
    parser.add_argument("--c_options_blobs", default="", help="pipeline options for variant (c) on blobs")
    parser.add_argument("--cpus", default="",
                        help="comma-separated core counts (e.g. 1,2): runs the variants pinned to each, "
                             "interleaved, and prints (c)'s speed-up over the first")
    parser.add_argument("--pin_cpus", type=int, default=0, help=argparse.SUPPRESS)  # set for the child
    parser.add_argument("--c_options", default="", help=argparse.SUPPRESS)  # set per workload for the child
    parser.add_argument("--target_shard_mib", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of (a) and (c), median reported; (b) runs once (minutes, ~16 GB RSS)")
    parser.add_argument("--child", choices=[*VARIANTS, C_BEAM_WORKERS, C_DUPLICATES, C_NO_STATISTICS])
    parser.add_argument("--workload", choices=["small", "blobs"])
    parser.add_argument("--out")
    args = parser.parse_args()

    if args.child:
        if args.pin_cpus:
            pin_to_cores(args.pin_cpus)
        runner = {"a_single_process": run_a, "b_naive_beam": run_b, "c_beam_tfrecord": run_c,
                  C_BEAM_WORKERS: run_c, C_DUPLICATES: run_c, C_NO_STATISTICS: run_c}[args.child]
        # Import time is not part of any variant's figure: load what the variant uses first.
        if args.child in ("a_single_process", "b_naive_beam"):
            import tensorflow  # noqa: F401
        if args.child != "a_single_process":
            import apache_beam  # noqa: F401
        if args.child in ("c_beam_tfrecord", C_BEAM_WORKERS, C_DUPLICATES, C_NO_STATISTICS):
            import beam_tfrecord.beam.write  # noqa: F401
        if args.workload == "blobs":
            workloads.make_blob_files(args.blob_dir, args.blobs, args.blob_kib * 1024)
        import_cpu_seconds = _own_cpu_seconds()
        start = time.perf_counter()
        runner(args.workload, args, args.out)
        print(json.dumps({"seconds": time.perf_counter() - start, "import_cpu_seconds": import_cpu_seconds}))
        return

    for workload in args.workloads.split(","):
        if workload == "blobs":
            paths = workloads.make_blob_files(args.blob_dir, args.blobs, args.blob_kib * 1024)
            subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)  # inputs in page cache for all
        variants = args.variants.split(",")
        cpu_counts = [int(c) for c in args.cpus.split(",")] if args.cpus else [0]
        runs: dict[tuple[str, int], list[dict]] = {(v, c): [] for v in variants for c in cpu_counts}
        for variant in _schedule(variants, args.repeats):
            for cpus in cpu_counts:  # interleaved: the same machine state for every core count
                out = os.path.join(args.work_dir, f"{workload}-{variant}")
                shutil.rmtree(out, ignore_errors=True)
                os.sync()  # every run starts with no dirty pages of the previous one left to write back
                args.c_options = args.c_options_small if workload == "small" else args.c_options_blobs
                measured = _measure(variant, workload, args, out, cpus)
                pinned = f" on {cpus} cores" if cpus else ""
                print(f"  {workload} {variant}{pinned}: {measured['seconds']:.2f} s "
                      f"({measured['on_disk_seconds']:.2f} s until on disk), CPU {measured['cpu_seconds']:.1f} s",
                      flush=True)
                runs[(variant, cpus)].append(measured)
                shutil.rmtree(out, ignore_errors=True)
        count = args.records if workload == "small" else args.blobs
        for cpus in cpu_counts:
            results = []
            for variant in variants:
                done = runs[(variant, cpus)]
                median = sorted(done, key=lambda r: r["seconds"])[len(done) // 2]
                results.append({**median, "on_disk_seconds": _median([r["on_disk_seconds"] for r in done]),
                                "cpu_seconds": _median([r["cpu_seconds"] for r in done]),
                                "peak_rss_mb": max(r["peak_rss_mb"] for r in done), "runs": len(done)})
            _report(workload + (f", pinned to {cpus} cores" if cpus else ""), count, results)
            a, c = runs.get(("a_single_process", cpus)), runs.get(("c_beam_tfrecord", cpus))
            if a and c:  # the schedule runs them next to each other in every repeat
                print(f"  c/a within each repeat, median: "
                      f"{paired_ratios([r['seconds'] for r in a], [r['seconds'] for r in c])}")
        if len(cpu_counts) > 1 and "c_beam_tfrecord" in variants:
            base = _median([r["seconds"] for r in runs[("c_beam_tfrecord", cpu_counts[0])]])
            for cpus in cpu_counts[1:]:
                seconds = _median([r["seconds"] for r in runs[("c_beam_tfrecord", cpus)]])
                print(f"  (c) speed-up from {cpu_counts[0]} to {cpus} cores: {base / seconds:.2f}x "
                      f"({base:.2f} s -> {seconds:.2f} s)")


if __name__ == "__main__":
    main()

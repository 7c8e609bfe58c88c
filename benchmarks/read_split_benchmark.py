"""ReadTFRecordDataset on one large shard: how many ranges (restrictions) read it, against ReadFromTFRecord's one piece.

    python benchmarks/read_split_benchmark.py                  # one shard of 1 GiB (64 KiB records)
    python benchmarks/read_split_benchmark.py --gib 0.25       # quicker

Writes one shard with ``WriteBalancedTFRecord(prefix, num_shards=1)``, then reads it on the DirectRunner
with ``ReadTFRecordDataset(prefix, output=SERIALIZED)`` (64 MiB ranges), in process and on two worker
processes, and with ``beam.io.ReadFromTFRecord(prefix + "-*")``; prints each read's seconds and records, the
ranges the splittable DoFn processed (its ``record_ranges_read`` counter) and the bundles that read them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

RECORD_BYTES = 64 << 10
CHUNK = 256  # records made per element


def _records(chunk: int) -> list[bytes]:
    return [chunk.to_bytes(4, "little") + i.to_bytes(4, "little") + os.urandom(RECORD_BYTES - 8)
            for i in range(CHUNK)]


def _bundle_counter():  # a DoFn fused after the read: its bundles are the read's
    import apache_beam as beam
    from apache_beam.metrics import Metrics

    class CountBundlesFn(beam.DoFn):
        def start_bundle(self) -> None:
            Metrics.counter("read_split_benchmark", "bundles").inc()

        def process(self, element):
            yield element

    return CountBundlesFn()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--split_bytes", type=int, default=64 << 20)
    args = parser.parse_args()

    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter

    from beam_tfrecord import ReadTFRecordDataset, RecordOutput, WriteBalancedTFRecord, load_manifest
    from beam_tfrecord.beam.read_dataset import RANGES_COUNTER

    root = tempfile.mkdtemp(prefix="read-split-bench-")
    prefix = os.path.join(root, "big")
    try:
        chunks = max(1, int(args.gib * (1 << 30) / RECORD_BYTES / CHUNK))
        start = time.perf_counter()
        with beam.Pipeline() as pipeline:
            _ = (pipeline | beam.Create(range(chunks)) | beam.FlatMap(_records)
                 | WriteBalancedTFRecord(prefix, num_shards=1))
        shard = load_manifest(prefix).shards[0]
        print(f"wrote {shard.filename}: {shard.num_bytes / (1 << 30):.2f} GiB, {shard.num_records} records, "
              f"{time.perf_counter() - start:.1f} s")

        two_processes = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
        for label, argv in (("in process", []), ("2 worker processes", two_processes)):
            start = time.perf_counter()
            pipeline = beam.Pipeline(argv=argv)
            _ = (pipeline | ReadTFRecordDataset(prefix, output=RecordOutput.SERIALIZED, split_bytes=args.split_bytes)
                 | beam.ParDo(_bundle_counter()) | beam.combiners.Count.Globally() | beam.Map(print))
            result = pipeline.run()
            result.wait_until_finish()
            counters = {name: sum(c.committed for c in result.metrics().query(
                MetricsFilter().with_name(name))["counters"]) for name in (RANGES_COUNTER, "bundles")}
            print(f"ReadTFRecordDataset, {label}: {time.perf_counter() - start:.1f} s, {counters[RANGES_COUNTER]} "
                  f"ranges of about {args.split_bytes >> 20} MiB in {counters['bundles']} bundles")

        start = time.perf_counter()
        with beam.Pipeline() as pipeline:
            _ = (pipeline | beam.io.ReadFromTFRecord(prefix + "-*") | beam.combiners.Count.Globally()
                 | beam.Map(print))
        print(f"ReadFromTFRecord: {time.perf_counter() - start:.1f} s (one piece per file)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Memory check: write a dataset several times larger than the allowed RSS and report the peak.

    python benchmarks/memory_check.py                  # 4.2 GB on the in-memory DirectRunner
    python benchmarks/memory_check.py --gib 4.2 \
        --options "--direct_running_mode=multi_processing --direct_num_workers=2"

Records are 20 KiB of incompressible bytes generated inside the pipeline (so the input is not
held in memory by construction), written with the default 128 MiB target shards. The peak RSS of
the whole process tree (runner and workers) is sampled every 50 ms; the limit is 1.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import child_env, run_measured

RECORD_BYTES = 20 * 1024
CHUNK = 100
LIMIT_BYTES = 1.5e9


def _chunk(index: int, total: int):
    import numpy as np

    from beam_tfrecord import Sample

    rng = np.random.default_rng(index)
    start = index * CHUNK
    return [Sample(f"blob/{i:09d}", {"payload": rng.bytes(RECORD_BYTES), "index": i})
            for i in range(start, min(total, start + CHUNK))]


def _child(out: str, records: int, options: list[str]) -> None:
    import apache_beam as beam

    from beam_tfrecord import DType, Scalar, Schema, WriteTFRecordDataset, verify_dataset

    schema = Schema({"payload": Scalar(DType.BYTES), "index": Scalar(DType.INT64)})
    with beam.Pipeline(argv=["--runner=DirectRunner", *options]) as pipeline:
        _ = (pipeline | beam.Create(range((records + CHUNK - 1) // CHUNK))
             | beam.Map(_chunk, records)
             | WriteTFRecordDataset(out, schema=schema))
    report = verify_dataset(out)
    print(json.dumps({"records": report.num_records, "bytes": report.num_bytes, "shards": report.num_shards}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=4.2, help="dataset size to write")
    parser.add_argument("--options", default="", help="extra pipeline options")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_memory_check"))
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--records", type=int)
    args = parser.parse_args()
    if args.child:
        _child(args.out, args.records, args.options.split())
        return
    records = int(args.gib * 2**30 / RECORD_BYTES)
    shutil.rmtree(args.out, ignore_errors=True)
    command = [sys.executable, __file__, "--child", "--out", args.out, "--records", str(records),
               "--options", args.options]
    measured = run_measured(command, env=child_env(HERE, os.path.dirname(HERE)))
    result = json.loads(measured.stdout.strip().splitlines()[-1])
    peak_gb = measured.peak_rss_bytes / 1e9
    print(f"wrote and verified {result['records']:,} records, {result['bytes'] / 1e9:.2f} GB in {result['shards']} "
          f"shards in {measured.seconds:.0f} s; peak RSS of the process tree {peak_gb:.2f} GB "
          f"(limit {LIMIT_BYTES / 1e9:.1f} GB): {'PASS' if measured.peak_rss_bytes < LIMIT_BYTES else 'FAIL'}")
    shutil.rmtree(args.out, ignore_errors=True)
    sys.exit(0 if measured.peak_rss_bytes < LIMIT_BYTES else 1)


if __name__ == "__main__":
    main()

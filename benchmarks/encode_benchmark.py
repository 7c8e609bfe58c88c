"""Encode benchmark: CPU per record of the encoding chain, sample by sample (the reference) and
chunk by chunk (the batch encoder), interleaved in one run, on the write benchmark's workloads.

    python benchmarks/encode_benchmark.py                      # 200k small records, 2,000 blobs
    python benchmarks/encode_benchmark.py --records 1000000 --blobs 5000

The chain is ``EntryEncoder``: validate, assemble the Example, hash the key, frame the record and
build its run entry (what ``EncodeToRunsFn`` does per sample before spilling). The reference calls
``EntryEncoder.encode`` per sample; the fast path ``EntryEncoder.encode_chunk`` per chunk of
1,000 (the write benchmark's chunks). Both run on the same chunks, one after the other, chunk by
chunk, so machine load hits both alike; the outputs are compared (they must be byte-identical).
CPU time is ``time.process_time()`` (this process, all threads).

Workloads:
  small: 32x32x3 uint8 Tensor + ClassLabel (the write benchmark's 3.1 KB records);
  rows: tabular rows (int64, float32 and string scalars, a VarList of 0-3 int64s), not in the write
      benchmark: what CSV and Parquet sources give;
  blobs (listed): ~200 KB files as FileRefs with listed sizes + int64 label, as the write
      benchmark's (c) gives them: planned from their sizes, spilled as references (no fast path);
  blobs (in memory): the same files' bytes as values (Scalar bytes + int64 label).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np
import workloads

from beam_tfrecord.core.samples import FileRef, Sample
from beam_tfrecord.core.schema import ClassLabel, DType, Scalar, Schema, Tensor, TensorDType, VarList
from beam_tfrecord.encoding.entries import EntryEncoder

MAX_RECORD_BYTES = 1 << 30


def _small_chunks(total: int):
    for index in range(workloads.num_chunks(total)):
        keys, images, labels = workloads.small_chunk(index, total)
        yield [Sample(key, {"image": image, "label": label})
               for key, image, label in zip(keys, images, labels.tolist())]


def _row_chunks(total: int, chunk: int = 1_000):
    """Tabular rows, as a CSV or Parquet source gives them: an int, a float, a string, a short int list."""
    rng = np.random.default_rng(0)
    for start in range(0, total, chunk):
        n = min(chunk, total - start)
        ids, scores = rng.integers(0, 1 << 40, n).tolist(), rng.random(n).tolist()
        tags = rng.integers(0, 1000, (n, 3)).tolist()
        yield [Sample(f"row/{start + i}", {"id": ids[i], "score": scores[i], "name": f"item {start + i}",
                                           "tags": tags[i][: i % 4]}) for i in range(n)]


def _blob_chunks(paths: list[str], *, in_memory: bool, chunk: int = 100):
    for start in range(0, len(paths), chunk):
        samples = []
        for i, path in enumerate(paths[start:start + chunk], start):
            if in_memory:
                with open(path, "rb") as handle:
                    value: object = handle.read()
            else:
                value = FileRef(path, os.path.getsize(path))
            samples.append(Sample(os.path.basename(path), {"image": value, "label": i % 10}))
        yield samples


def _measure(name: str, schema: Schema, chunks, *, reread_min_bytes: int) -> tuple[float, float, int]:
    """(reference us/record, fast us/record, records), interleaved chunk by chunk."""
    encoder = EntryEncoder(schema, salt="bench", max_record_bytes=MAX_RECORD_BYTES, feature_transforms={},
                           reread_min_bytes=reread_min_bytes)
    reference_s = fast_s = 0.0
    records = 0
    for number, chunk in enumerate(chunks):
        order = ("reference", "fast") if number % 2 == 0 else ("fast", "reference")
        outputs = {}
        for variant in order:
            start = time.process_time()
            if variant == "reference":
                outputs[variant] = [encoder.encode(sample) for sample in chunk]
                reference_s += time.process_time() - start
            else:
                outputs[variant] = list(encoder.encode_chunk(chunk))
                fast_s += time.process_time() - start
        if outputs["reference"] != outputs["fast"]:
            raise SystemExit(f"{name}: chunk {number} differs between the reference and the fast path")
        records += len(chunk)
    return reference_s / records * 1e6, fast_s / records * 1e6, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="small records")
    parser.add_argument("--blobs", type=int, default=2_000)
    parser.add_argument("--blob_kib", type=int, default=200)
    parser.add_argument("--blob_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_bench_blobs"))
    args = parser.parse_args()

    small = Schema({"image": Tensor(TensorDType.UINT8, workloads.IMAGE_SHAPE),
                    "label": ClassLabel(tuple(str(i) for i in range(10)))})
    rows = Schema({"id": Scalar(DType.INT64), "score": Scalar(DType.FLOAT32), "name": Scalar(DType.STRING),
                   "tags": VarList(DType.INT64)})
    blobs = Schema({"image": Scalar(DType.BYTES), "label": Scalar(DType.INT64)})
    paths = workloads.make_blob_files(args.blob_dir, args.blobs, args.blob_kib * 1024)
    table = [
        ("small", *_measure("small", small, _small_chunks(args.records), reread_min_bytes=1 << 20)),
        ("rows", *_measure("rows", rows, _row_chunks(args.records), reread_min_bytes=1 << 20)),
        ("blobs (listed)", *_measure("blobs (listed)", blobs, _blob_chunks(paths, in_memory=False),
                                     reread_min_bytes=1 << 16)),
        ("blobs (in memory)", *_measure("blobs (in memory)", blobs, _blob_chunks(paths, in_memory=True),
                                        reread_min_bytes=1 << 16)),
    ]
    print(f"CPU microseconds per record of the encoding chain (machine load applies to both alike)\n"
          f"  {'workload':<18} {'records':>9} {'reference':>10} {'fast':>8} {'fast/ref':>9}")
    for name, reference_us, fast_us, records in table:
        print(f"  {name:<18} {records:>9,} {reference_us:10.2f} {fast_us:8.2f} {fast_us / reference_us:9.2f}")


if __name__ == "__main__":
    main()

"""The default checks' CPU per record, measured in one process on a built dataset's own records: statistics.pb
(what a shard writer runs: ``beam.shard_statistics.ShardStatistics``, handed blocks of records as the writer
joins them for its file, decoded and summarized) and the
exact-duplicate digests (what an encoder runs: ``quality.content.ContentHasher``).

    python benchmarks/statistics_cost.py DATASET_DIR                 # every shard of split train, 5 rounds
    python benchmarks/statistics_cost.py DATASET_DIR --max_records 100000 --rounds 3

Process CPU time (``time.process_time``), the first round dropped (imports, first allocations), the median of
the others: a figure a shared machine moves little, unlike a whole build's CPU, whose run-to-run spread (3-5% on
2 shared cores) is larger than the checks' share. Compare two versions of the code by running this with each
on its ``PYTHONPATH``, alternately. Issue 63's target: statistics and digests at most 3% of the build's CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def framed_records(path: str, limit: int) -> list[bytes]:
    """The framed records (length, CRC, data, CRC) of an uncompressed TFRecord shard, at most ``limit``."""
    with open(path, "rb") as handle:
        data = handle.read()
    records: list[bytes] = []
    position = 0
    while position < len(data) and len(records) < limit:
        length = int.from_bytes(data[position:position + 8], "little")
        records.append(data[position:position + 16 + length])
        position += 16 + length
    return records


def _blocks(views: list[memoryview], block_bytes: int) -> list[tuple[bytes, list[int]]]:
    """The records joined in blocks, as ``ShardFileWriter._append_entries`` joins them once for the shard's file and
    its statistics (that join is the file's: not counted here)."""
    blocks, pending, pending_bytes = [], [], 0
    for view in views:
        pending.append(view)
        pending_bytes += len(view)
        if pending_bytes >= block_bytes:
            blocks.append((b"".join(pending), list(map(len, pending))))
            pending, pending_bytes = [], 0
    if pending:
        blocks.append((b"".join(pending), list(map(len, pending))))
    return blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("--split", default="train")
    parser.add_argument("--max_records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from beam_tfrecord.beam.shard_statistics import BYTES_PER_SUMMARY, ShardStatistics
    from beam_tfrecord.dataset import open_dataset
    from beam_tfrecord.quality.content import ContentHasher
    from beam_tfrecord.reader.decode.block_decode import BlockDecoder

    dataset = open_dataset(args.dataset)
    schema = dataset.manifest.schema
    records: list[bytes] = []
    for path in dataset.shard_paths(args.split):
        records += framed_records(path, args.max_records - len(records))
    views = [memoryview(record) for record in records]
    blocks = _blocks(views, BYTES_PER_SUMMARY)
    hasher = ContentHasher()
    timings: dict[str, list[float]] = {"statistics": [], "digests": []}
    for _ in range(args.rounds):
        start = time.process_time()
        summary = ShardStatistics(schema, args.split, BlockDecoder(schema, views=True, absent_lists=True), "unused")
        for block, sizes in blocks:
            summary.add_block(block, sizes)
        summary.flush()
        middle = time.process_time()
        hasher.digests(view[12:-4] for view in views)
        timings["statistics"].append(middle - start)
        timings["digests"].append(time.process_time() - middle)
    mean_bytes = float(np.mean([len(r) for r in records])) if records else 0.0
    print(f"{len(records):,} records of {args.split} ({mean_bytes:,.0f} framed bytes on average), "
          f"median of rounds 2-{args.rounds}, CPU microseconds per record:")
    for name, seconds in timings.items():
        kept = seconds[1:] or seconds
        print(f"  {name:<11} {statistics.median(kept) / max(1, len(records)) * 1e6:7.2f}")


if __name__ == "__main__":
    sys.exit(main())

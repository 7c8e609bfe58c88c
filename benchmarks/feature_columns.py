"""Feature columns, the write side: what ``add-features`` writes and how its memory grows.

    python benchmarks/feature_columns.py                         # 100,000 records, a 64-float32 embedding
    python benchmarks/feature_columns.py --records 20000 --rounds 1 --parts bytes

Parts (each prints its figures and the issue's target):
- ``bytes``: a root refreshed from a Parquet file of ``--records`` rows (id, x, label, name), then a 64-float32
  feature added from a second Parquet file by the command (its own process: wall time, peak RSS of its tree),
  ``--rounds`` times on fresh copies of the root. Written: every file the add put in the root (column files and
  the manifest), against the feature's raw bytes (records x 64 x 4); rewritten: bytes of files that were there
  before and changed (shards, the base's indexes).
- ``memory``: the add's per-shard steps in one process on synthetic shards of ``--shard_records`` records (each
  shard's keys read from its key file, its rows grouped and its column file written), for 1, 4 and 16 shards:
  peak RSS after each (it must not grow with the shards), and the bytes per key each shuffle carries (Beam's
  coder of the elements the join and the grouping send), extrapolated to 1e9 keys.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from measure import child_env, run_measured

TARGET_RATIO = 1.25
EMB_SIZE = 64
KEEP = ["--keep_versions=10", "--min_version_age=0", "--progress=none"]


def _inputs(work: str, records: int) -> tuple[str, str]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(61)
    base, emb = os.path.join(work, "base.parquet"), os.path.join(work, "emb.parquet")
    if not os.path.exists(emb):
        pq.write_table(pa.table({"id": np.arange(records), "x": rng.random(records).astype(np.float32),
                                 "label": rng.integers(0, 10, records),
                                 "name": [f"row-{i:08d}" for i in range(records)]}), base)
        vectors = rng.random((records, EMB_SIZE)).astype(np.float32)
        pq.write_table(pa.table({"id": np.arange(records), "emb": list(vectors)}), emb)
    return base, emb


def _files(root: str) -> dict[str, tuple[int, float]]:
    return {os.path.join(d, f): (os.path.getsize(os.path.join(d, f)), os.path.getmtime(os.path.join(d, f)))
            for d, _, files in os.walk(root) for f in files if f not in ("LATEST", "superseded.json")}


def bytes_part(args: argparse.Namespace, work: str) -> None:
    from beam_tfrecord.dataset import load_manifest

    base, emb = _inputs(work, args.records)
    pristine = os.path.join(work, "root")
    if not os.path.exists(pristine):
        run_measured([sys.executable, "-m", "pipelines.refresh_manifest", "--manifest", base, "--dataset_root",
                      pristine, "--key_column", "id", *KEEP], env=child_env(os.path.dirname(HERE)))
    raw = args.records * EMB_SIZE * 4
    seconds, peaks = [], []
    for _ in range(args.rounds):
        root = os.path.join(work, "added")
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(pristine, root)
        before = _files(root)
        measured = run_measured([sys.executable, "-m", "pipelines.add_features", "--dataset_root", root, "--features",
                                 emb, "--key_column", "id", *KEEP], env=child_env(os.path.dirname(HERE)))
        seconds.append(measured.seconds)
        peaks.append(measured.peak_rss_bytes)
        after = _files(root)
        written = sum(size for path, (size, _) in after.items() if path not in before)
        rewritten = sum(size for path, (size, mtime) in after.items() if path in before and before[path][1] != mtime)
    manifest = load_manifest(root)
    columns = sum(c.num_bytes for s in manifest.shards for c in s.columns)
    print(f"bytes: {args.records} records in {len(manifest.shards)} shards; feature raw {raw / 1e6:.2f} MB; written "
          f"{written / 1e6:.2f} MB = {written / raw:.3f}x raw (column files {columns / 1e6:.2f} MB, manifest and the "
          f"rest {(written - columns) / 1e3:.1f} kB; target <= {TARGET_RATIO}x); existing files rewritten: "
          f"{rewritten} bytes (target 0)")
    print(f"bytes: add-features took {statistics.median(seconds):.1f} s (median of {len(seconds)}; "
          f"{', '.join(f'{s:.1f}' for s in seconds)}), peak RSS of its process tree "
          f"{max(peaks) / 2**20:.0f} MiB")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_part(args: argparse.Namespace, work: str) -> None:
    """The per-shard steps of the add run on synthetic shards, in this process."""
    import numpy as np
    from apache_beam.coders import registry

    from beam_tfrecord.beam.add_features import _WriteColumnFn
    from beam_tfrecord.core.columns import ColumnFile
    from beam_tfrecord.core.file_format import Compression
    from beam_tfrecord.core.framing import frame
    from beam_tfrecord.core.manifest import Manifest, ShardInfo, SplitInfo
    from beam_tfrecord.core.sample_encoder import SampleEncoder
    from beam_tfrecord.core.schema import DType, FixedList, Schema
    from beam_tfrecord.versions.add_features import AddPlan, BaseShard, OnMissing, shard_keys

    records = args.shard_records
    key_path = os.path.join(work, "shard.keys")
    with open(key_path, "wb") as handle:
        handle.write(b"".join(frame(f"key-{i:012d}".encode()) for i in range(records)))
    added = Schema({"emb": FixedList(DType.FLOAT32, EMB_SIZE)})
    encoder = SampleEncoder(added)
    rng = np.random.default_rng(0)
    row = encoder.encode((f"key-{0:012d}", {"emb": rng.random(EMB_SIZE, dtype=np.float32).tolist()}))
    shard = ShardInfo("d-train.tfrecord-00000-of-00001", "train", 0, records, 16 * records, 16 * records, "00000000",
                      stored_in="20260101T000000.000Z-abcdef")
    base = BaseShard(0, shard, os.path.join(work, "unused"), key_path=key_path)
    manifest = Manifest("d", Schema({"x": FixedList(DType.FLOAT32, 1)}), (SplitInfo("train", (shard,)),),
                        Compression.NONE, "", "", (), records, 0, None, "s", {})
    plan = AddPlan(work, "20260101T000000.000Z-abcdef", "20260102T000000.000Z-abcdef", manifest, added,
                   {"emb": "emb"}, (), None, (base,), OnMissing.FAIL)
    key_coder = registry.get_coder(object)  # what the join's shuffle carries: Beam's fallback coder
    key_side = len(key_coder.encode((f"key-{0:012d}", (0, 123456))))
    value_side = len(key_coder.encode((f"key-{0:012d}", row)))  # encoded before the join
    row_side = len(key_coder.encode((0, (123456, row))))
    start = _peak_mib()
    done = 0
    for shards in (1, 4, 16):
        while done < shards:
            keys = [position for _, (_, position) in shard_keys(base, plan)]
            rows = [(position, row) for position in keys]
            for _, (_, column, _) in _WriteColumnFn(plan).process((0, rows)):
                assert isinstance(column, ColumnFile) and column.num_records == records
            done += 1
        print(f"memory: {shards:2d} shards of {records} records each: peak RSS {_peak_mib():.0f} MiB "
              f"(before: {start:.0f} MiB)")
    per_key = key_side + value_side + row_side
    print(f"memory: shuffle bytes per key: dataset side {key_side}, values side {value_side} (the encoded row), "
          f"rows by shard {row_side}; at 1e9 keys ~{per_key:.0f} GB through the shuffles; the "
          "per-shard step holds one shard's rows (~"
          f"{records * (len(row) + 100) / 2**20:.0f} MiB for {records} records), whatever the number of shards")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shard_records", type=int, default=100_000)
    parser.add_argument("--parts", default="bytes,memory")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "bt-feature-columns"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    work = os.path.join(args.work, str(args.records))
    os.makedirs(work, exist_ok=True)
    for part in args.parts.split(","):
        {"bytes": bytes_part, "memory": memory_part}[part](args, work)


if __name__ == "__main__":
    main()

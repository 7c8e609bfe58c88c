"""The shard phase of a dataset of one large shard, written whole by one worker or in pieces by every worker.

    python benchmarks/shard_phase.py                      # 400 MB of 100 KB records, one shard, 2 workers
    python benchmarks/shard_phase.py --workload small --record_kb 3   # 400 MB of 3 KB rows of a .npy

``blobs`` (default): files of seeded random bytes (``FileRef``s of 100 KB: over ``reread_min_bytes``, so
the shard writer reads each file again and builds its record, as an image folder's build does).
``small``: the rows of one ``.npy`` of random bytes (``ReadNumpyFiles``), spilled whole: the shard
writer merges them from the runs, a Python loop per record (where the shard phase costs CPU). Each round
builds the dataset twice on the DirectRunner's worker processes, interleaved: ``whole`` (``shard_writers=1``:
one writer for the shard, the default) and ``pieces`` (``shard_writers`` = the workers: one piece each,
then a join). The shard phase is timed from the outside: from the moment the plan step writes the runs'
catalog (``<temp>/runs/catalog-*.json``: the shard tasks start) to the moment the shard is complete (its
finished record, ``<temp>/shards/*.finished.json``, written once the shard is whole), both seen by a thread
polling the temp folder every 5 ms. The build's wall time is printed too. Both builds' shards must be byte-identical
(CRC32C and size compared; the run fails otherwise).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def _write_files(root: str, *, total_mb: int, record_kb: int) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(0)
    paths = []
    os.makedirs(root, exist_ok=True)
    for i in range(total_mb * 1024 // record_kb):
        path = os.path.join(root, f"r-{i:06d}.bin")
        if not os.path.exists(path):
            with open(path, "wb") as handle:
                handle.write(rng.bytes(record_kb * 1024))
        paths.append(path)
    return paths


class _PhaseWatch:
    """Polls ``out``'s temp folder: when the runs' catalog appears, and when the last finished record does."""

    def __init__(self, out: str) -> None:
        self._out = out
        self.start: float | None = None
        self.end: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            now = time.perf_counter()
            if self.start is None and glob.glob(f"{self._out}/.tmp-beam-tfrecord-*/runs/catalog-*.json"):
                self.start = now
            done = f"{self._out}/.tmp-beam-tfrecord-*/shards/*.finished.json"
            if self.start is not None and self.end is None and glob.glob(done):
                self.end = now
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _write_rows(path: str, *, total_mb: int, record_kb: int) -> str:
    import numpy as np

    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        rows = total_mb * 1024 // record_kb
        np.save(path, np.random.default_rng(0).integers(0, 256, size=(rows, record_kb * 1024), dtype=np.uint8))
    return path


def _build(out: str, inputs: list[str] | str, *, workers: int, shard_writers: int) -> tuple[float, float, list]:
    """(shard phase s, wall s, [(shard, crc32c, bytes)]) of one build (``inputs``: blob files, or one .npy)."""
    import apache_beam as beam

    from beam_tfrecord import DType, FileRef, Sample, Scalar, Schema, ShardingConfig, WriterTuning, WriteTFRecordDataset
    from beam_tfrecord import load_manifest as read_manifest
    from beam_tfrecord.core.infer import infer_array_schema
    from beam_tfrecord.sources.arrays import ReadNumpyFiles, peek_arrays

    shutil.rmtree(out, ignore_errors=True)
    watch = _PhaseWatch(out)
    began = time.perf_counter()
    with beam.Pipeline(argv=["--runner=DirectRunner"]) as pipeline:
        if isinstance(inputs, str):
            schema = infer_array_schema(peek_arrays(inputs))
            samples = pipeline | ReadNumpyFiles(inputs)
        else:
            schema = Schema({"blob": Scalar(DType.BYTES), "index": Scalar(DType.INT64)})
            samples = pipeline | beam.Create([[Sample(os.path.basename(p), {"blob": FileRef(p), "index": i})
                                               for i, p in enumerate(inputs)][j::64] for j in range(64)])
        _ = (samples
             | WriteTFRecordDataset(out, schema=schema, sharding=ShardingConfig(target_shard_bytes=1 << 40),
                                    tuning=WriterTuning(local_workers=workers, shard_writers=shard_writers)))
    wall = time.perf_counter() - began
    watch.stop()
    if watch.start is None or watch.end is None:
        raise RuntimeError("the shard phase was not seen (the temp folder's catalog or finished record)")
    shards = [(s.filename, s.crc32c, s.num_bytes) for s in read_manifest(out).shards]
    return watch.end - watch.start, wall, shards


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("blobs", "small"), default="blobs")
    parser.add_argument("--mb", type=int, default=400, help="dataset size, MB (one shard)")
    parser.add_argument("--record_kb", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_shard_phase"))
    args = parser.parse_args(argv)
    name = f"inputs-{args.mb}mb-{args.record_kb}kb"
    inputs: list[str] | str = (
        _write_files(os.path.join(args.dir, name), total_mb=args.mb, record_kb=args.record_kb)
        if args.workload == "blobs" else
        _write_rows(os.path.join(args.dir, f"{name}.npy"), total_mb=args.mb, record_kb=args.record_kb))
    print(f"{args.workload}: {args.mb * 1024 // args.record_kb} records of {args.record_kb} KB ({args.mb} MB) in "
          f"one shard, {args.workers} workers")
    print("round  variant  shard phase s  build wall s")
    results: dict[str, list[tuple[float, float]]] = {"whole": [], "pieces": []}
    for round_number in range(args.rounds):
        reference = None
        for variant in ("whole", "pieces") if round_number % 2 == 0 else ("pieces", "whole"):
            phase, wall, shards = _build(os.path.join(args.dir, f"out-{variant}"), inputs, workers=args.workers,
                                         shard_writers=1 if variant == "whole" else args.workers)
            if reference is not None and shards != reference:
                raise RuntimeError(f"the {variant} build's shards differ: {shards} != {reference}")
            reference = shards
            results[variant].append((phase, wall))
            print(f"{round_number:5d}  {variant:7s}  {phase:13.2f}  {wall:12.2f}", flush=True)
    for variant, found in results.items():
        phases, walls = sorted(p for p, _ in found), sorted(w for _, w in found)
        print(f"{variant}: shard phase median {phases[len(phases) // 2]:.2f} s (min {phases[0]:.2f}), "
              f"build median {walls[len(walls) // 2]:.2f} s")
    print("shards identical in every build:", reference)


if __name__ == "__main__":
    main()

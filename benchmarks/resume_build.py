"""A killed build resumed against a full build: ``beam-tfrecord build-arrays`` with default options on a .npy of
incompressible rows, killed (SIGKILL, its whole process group) once half its samples are in finished spill
runs, then re-run with ``--resume``; the resumed run's time against a clean full build's, interleaved.

    python benchmarks/resume_build.py                      # ~2 GB: 20,000 rows of 100 KB, 2 rounds
    python benchmarks/resume_build.py --rows 4000 --rounds 1

Prints each round's full-build and resumed-run seconds, the ratio (target <= 0.6), the records the resumed
run reused and whether its shards equal the clean build's.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from beam_tfrecord import load_manifest
from beam_tfrecord.core.runs import INDEX_SUFFIX, RunIndex
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.spill_resume import TEMP_PREFIX


def _command(arrays: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.build_from_arrays", "--arrays", arrays, "--output", out,
            "--progress=none", *extra]


def _finished_records(out: str) -> int:
    total = 0
    for index_path in glob.glob(f"{out}/{TEMP_PREFIX}*/runs/*.run{INDEX_SUFFIX}"):
        run = index_path[:-len(INDEX_SUFFIX)]
        try:
            index = RunIndex.from_bytes(run, Path(index_path).read_bytes())
            if index.num_bytes == os.path.getsize(run):
                total += len(index.hashes)
        except (CorruptShardError, OSError):  # an index being written, a run being renamed: not finished
            continue
    return total


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def _kill_at(command: list[str], out: str, records: int) -> float:
    """Runs ``command`` and SIGKILLs its process group once ``records`` are in finished runs; its seconds."""
    start = time.perf_counter()
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while _finished_records(out) < records:
        if job.poll() is not None:
            raise RuntimeError("the build ended before it could be killed; use more --rows")
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    return time.perf_counter() - start


def _digest(out: str) -> str:
    digest = hashlib.sha256()
    for shard in load_manifest(out).shards:
        digest.update(Path(out, shard.filename).read_bytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--row_bytes", type=int, default=100_000)
    parser.add_argument("--kill_fraction", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="resume_build-")
    try:
        arrays = os.path.join(root, "rows.npy")
        rng = np.random.default_rng(0)
        data = np.lib.format.open_memmap(arrays, mode="w+", dtype=np.uint8, shape=(args.rows, args.row_bytes))
        for start in range(0, args.rows, 1000):
            stop = min(start + 1000, args.rows)
            data[start:stop] = rng.integers(0, 256, size=(stop - start, args.row_bytes), dtype=np.uint8)
        data.flush()
        del data
        print(f"{args.rows} rows of {args.row_bytes} bytes ({args.rows * args.row_bytes / 1e9:.2f} GB), "
              f"killed at {args.kill_fraction:.0%} of samples in finished runs; default options")
        ratios = []
        for round_ in range(args.rounds):
            full, resumed = os.path.join(root, "full"), os.path.join(root, "resumed")
            full_s = _timed(_command(arrays, full))
            killed_s = _kill_at(_command(arrays, resumed), resumed, int(args.rows * args.kill_fraction))
            resume_s = _timed(_command(arrays, resumed, "--resume"))
            reused = load_manifest(resumed).metadata["resumed"]
            same = _digest(full) == _digest(resumed)
            ratios.append(resume_s / full_s)
            print(f"  round {round_ + 1}: full build {full_s:6.1f} s | killed after {killed_s:5.1f} s | resumed "
                  f"{resume_s:6.1f} s ({reused['reused_records']} records reused from {reused['reused_runs']} runs)"
                  f" | resumed/full {resume_s / full_s:.2f} | shards identical: {same}")
            shutil.rmtree(full)
            shutil.rmtree(resumed)
        print(f"resumed/full, median of {len(ratios)}: {sorted(ratios)[len(ratios) // 2]:.2f} (target <= 0.60)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A killed build resumed against a full build, interleaved: the job with default options, killed (SIGKILL, its
whole process group) once a fraction of its samples are in finished spill runs, then re-run with ``--resume``.

    python benchmarks/resume_build.py                                  # arrays: 20,000 rows of 100 KB (~2 GB)
    python benchmarks/resume_build.py --workload images --rows 12000   # ~150 KB JPEGs, --resize 224x224
    python benchmarks/resume_build.py --rows 3000 --rounds 1

Workloads: ``arrays`` (``build-arrays`` on a .npy of incompressible rows: encoding is a copy, the run is
I/O) and ``images`` (``build`` on a folder of noise JPEGs with ``--resize``: encoding is decode, resize,
re-encode). Prints each round's full-build and resumed-run seconds, with when each reached its first finished
spill run and its shard phase (a profile seen from the temp folder), their ratio (target <= 0.6), the records
the resumed run reused and whether its shards equal the clean build's. ``--baseline DIR`` runs another
checkout's rounds interleaved with this one's (before/after figures under the same machine load).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import math
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
from beam_tfrecord.core.runs import INDEX_SUFFIX
from beam_tfrecord.spill.resume import TEMP_PREFIX, finished_runs


def _command(workload: str, inputs: str, out: str, *extra: str) -> list[str]:
    if workload == "arrays":
        return [sys.executable, "-m", "pipelines.build_from_arrays", "--arrays", inputs, "--output", out,
                "--progress=none", *extra]
    return [sys.executable, "-m", "pipelines.build_image_dataset", "--input", inputs, "--output", out,
            "--resize", "224x224", "--progress=none", *extra]


def _make_arrays(root: str, rows: int, row_bytes: int) -> str:
    arrays = os.path.join(root, "rows.npy")
    rng = np.random.default_rng(0)
    data = np.lib.format.open_memmap(arrays, mode="w+", dtype=np.uint8, shape=(rows, row_bytes))
    for start in range(0, rows, 1000):
        stop = min(start + 1000, rows)
        data[start:stop] = rng.integers(0, 256, size=(stop - start, row_bytes), dtype=np.uint8)
    data.flush()
    return arrays


def _make_images(root: str, rows: int) -> str:
    """``rows`` 400x400 JPEGs of smoothed noise (~150 KB each) in 4 class folders."""
    from PIL import Image

    folder = os.path.join(root, "images")
    rng = np.random.default_rng(0)
    for i in range(rows):
        label = os.path.join(folder, f"class{i % 4}")
        os.makedirs(label, exist_ok=True)
        pixels = rng.integers(0, 256, size=(160, 160, 3), dtype=np.uint8)
        Image.fromarray(pixels).resize((400, 400), Image.BILINEAR).save(os.path.join(label, f"{i:06d}.jpg"),
                                                                         quality=95)
    return folder


def _finished_records(out: str) -> int:
    try:
        return sum(len(index.hashes) for index in finished_runs(out))
    except OSError:  # a file listed while the build renames it: counted at the next poll
        return 0


@dataclasses.dataclass
class Phases:
    """When a build reached each phase, in seconds from its start (seen from its temp folder, polled)."""

    first_run: float = math.nan  # the first finished spill run: the fixed start, then the first run's encoding
    first_shard: float = math.nan  # the first file of the shard phase (encoding has ended)
    total: float = math.nan

    def __str__(self) -> str:
        return (f"{self.total:5.1f} s (first run {self.first_run:4.1f}, shards from {self.first_shard:4.1f}, "
                f"shard phase {self.total - self.first_shard:4.1f})")


def _runs(out: str) -> set[str]:
    return set(glob.glob(f"{out}/{TEMP_PREFIX}*/runs/*{INDEX_SUFFIX}"))


def _observe(out: str, start: float, phases: Phases, before: set[str]) -> None:
    if math.isnan(phases.first_run) and _runs(out) - before:  # a resumed build's first run of its own
        phases.first_run = time.perf_counter() - start
    if math.isnan(phases.first_shard) and glob.glob(f"{out}/{TEMP_PREFIX}*/shards/*"):
        phases.first_shard = time.perf_counter() - start


def _env(code: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": code}


def _timed(command: list[str], out: str, code: str) -> Phases:
    """Runs ``command`` with the package of ``code`` to its end; when it reached each phase."""
    phases = Phases()
    before = _runs(out)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, env=_env(code), cwd=code)
        while job.poll() is None:
            _observe(out, start, phases, before)
            time.sleep(0.05)
        phases.total = time.perf_counter() - start
        if job.returncode:
            errors.seek(0)
            raise RuntimeError(f"{' '.join(command)} failed:\n{errors.read().decode(errors='replace')[-3000:]}")
    return phases


def _kill_at(command: list[str], out: str, records: int, code: str) -> float:
    """Runs ``command`` and SIGKILLs its process group once ``records`` are in finished runs; its seconds."""
    start = time.perf_counter()
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                           env=_env(code), cwd=code)
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
    parser.add_argument("--workload", choices=["arrays", "images"], default="arrays")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--row_bytes", type=int, default=100_000)
    parser.add_argument("--kill_fraction", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", help="another checkout of the project (e.g. `git worktree add` of an older "
                                           "commit): its rounds run interleaved with this one's")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="resume_build-")
    try:
        if args.workload == "arrays":
            inputs = _make_arrays(root, args.rows, args.row_bytes)
        else:
            inputs = _make_images(root, args.rows)
        files = [Path(inputs)] if Path(inputs).is_file() else [f for f in Path(inputs).rglob("*") if f.is_file()]
        size = sum(f.stat().st_size for f in files)
        print(f"{args.workload}: {args.rows} samples ({size / 1e9:.2f} GB of input), killed at "
              f"{args.kill_fraction:.0%} of samples in finished runs; default options")
        codes = {"this": str(Path(__file__).resolve().parent.parent)}
        if args.baseline:
            codes = {"baseline": str(Path(args.baseline).resolve()), **codes}
        ratios: dict[str, list[float]] = {name: [] for name in codes}
        for round_ in range(args.rounds):
            for name, code in codes.items():  # interleaved: the same machine load for both
                full, resumed = os.path.join(root, "full"), os.path.join(root, "resumed")
                full_s = _timed(_command(args.workload, inputs, full), full, code)
                killed_s = _kill_at(_command(args.workload, inputs, resumed), resumed,
                                    int(args.rows * args.kill_fraction), code)
                resume_s = _timed(_command(args.workload, inputs, resumed, "--resume"), resumed, code)
                reused = load_manifest(resumed).metadata["resumed"]
                same = _digest(full) == _digest(resumed)
                ratios[name].append(resume_s.total / full_s.total)
                print(f"  round {round_ + 1} [{name}]: full build {full_s} | killed after {killed_s:5.1f} s | "
                      f"resumed {resume_s} | {reused['reused_records']} records reused from "
                      f"{reused['reused_runs']} runs | resumed/full {resume_s.total / full_s.total:.2f} | "
                      f"shards identical: {same}", flush=True)
                shutil.rmtree(full)
                shutil.rmtree(resumed)
        for name, values in ratios.items():
            print(f"[{name}] resumed/full, median of {len(values)}: {sorted(values)[len(values) // 2]:.2f} "
                  f"(target <= 0.60)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

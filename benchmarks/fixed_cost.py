"""Fixed cost of a build: what a small job pays before its data counts, interleaved in one run.

Two kinds of variants:

- ``library``: ``WriteTFRecordDataset`` on the DirectRunner with ``--samples`` tiny samples in this
  process (after its imports), in one in-memory worker (``local_workers=1``) and with the library's
  default (one worker process per core: a pipeline of the user's own does not say how big it is);
- ``jobs``: whole commands as a user runs them (interpreter start and imports included), each with
  its defaults (a job knows its input before building and runs a small one in one in-memory worker:
  ``beam_tfrecord.engine.local_workers.InputSize``) and with ``--direct_num_workers=1``: the
  demo's build (``scripts/demo.sh``: 300 64-px JPEGs, three splits) and a ``--samples``-row CSV.

    python benchmarks/fixed_cost.py                 # 3 rounds, both kinds
    python benchmarks/fixed_cost.py --rounds 5 --samples 1000 --kinds library

Target (issue 31): the jobs' defaults within 1.2x of one in-memory worker.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time

import apache_beam as beam

from beam_tfrecord import DType, Sample, Scalar, Schema, WriterTuning, WriteTFRecordDataset
from beam_tfrecord.engine.local_workers import LOCAL_WORKERS_ENV, available_cores

SCHEMA = Schema({"id": Scalar(DType.INT64)})
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_seconds(out: str, samples: int, local_workers: int | None) -> float:
    """Seconds to build and publish ``samples`` one-feature samples into ``out``."""
    start = time.perf_counter()
    with beam.Pipeline() as pipeline:  # Beam's default options, as a user's own pipeline
        _ = (pipeline | beam.Create([[Sample(f"k{i}", {"id": i}) for i in range(samples)]])
             | WriteTFRecordDataset(out, schema=SCHEMA, tuning=WriterTuning(local_workers=local_workers)))
    return time.perf_counter() - start


def command_seconds(command: list[str], out: str) -> tuple[float, str]:
    """Seconds a job's command takes, and its summary's line on how it ran."""
    env = {k: v for k, v in os.environ.items() if k != LOCAL_WORKERS_ENV}  # a user who set nothing
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", *command, "--output", out, "--progress", "none"],
                          env=env, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    ran = next((line.strip() for line in done.stdout.splitlines() if line.startswith("  ran in")), "")
    return seconds, ran


def _inputs(root: str, samples: int) -> dict[str, list[str]]:
    """The jobs' inputs, made once: the demo's image folder and a CSV of ``samples`` rows."""
    sys.path.insert(0, REPO)
    from pipelines.make_sample_images import write_sample_images

    images = os.path.join(root, "images")
    write_sample_images(images)  # the demo's folder: 100 per class, 64 px
    rows = os.path.join(root, "rows.csv")
    with open(rows, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["x", "label"])
        writer.writerows([i, i % 3] for i in range(samples))
    return {"demo build": ["build", "--input", images, "--splits", "train=0.8,validation=0.1,test=0.1",
                           "--target_shard_bytes", "200000"],
            f"{samples}-row CSV": ["build-manifest", "--manifest", rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--kinds", default="library,jobs")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    root = tempfile.mkdtemp(prefix="fixed_cost-")
    seconds: dict[str, list[float]] = {}
    ran: dict[str, str] = {}
    try:
        jobs = _inputs(root, args.samples) if "jobs" in kinds else {}
        for _ in range(args.rounds):  # interleaved: every variant sees the same machine state
            if "library" in kinds:
                for name, workers in (("library: 1 in-memory worker", 1),
                                      (f"library: default ({available_cores()} worker processes)", None)):
                    out = os.path.join(root, "dataset")
                    seconds.setdefault(name, []).append(build_seconds(out, args.samples, workers))
                    shutil.rmtree(out)
            for job, command in jobs.items():
                for variant, extra in (("default", []), ("--direct_num_workers=1", ["--direct_num_workers=1"])):
                    name = f"{job}: {variant}"
                    out = os.path.join(root, "dataset")
                    taken, ran[name] = command_seconds([*command, *extra], out)
                    seconds.setdefault(name, []).append(taken)
                    shutil.rmtree(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {name: sorted(values)[len(values) // 2] for name, values in seconds.items()}
    print(f"median of {args.rounds} rounds; load average at the end {os.getloadavg()[0]:.2f} (shared machine)")
    for name, value in median.items():
        print(f"  {name:<50} {value:6.2f} s  {ran.get(name, '')}")
    for job in jobs:
        default, one = median[f"{job}: default"], median[f"{job}: --direct_num_workers=1"]
        print(f"  {job}: default / one in-memory worker = {default / one:.2f} (target <= 1.2)")


if __name__ == "__main__":
    main()

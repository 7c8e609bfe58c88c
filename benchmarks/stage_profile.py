"""The cost of a record, stage by stage: a build in one in-memory worker under ``cProfile``, its
time split by the functions that do each stage (read, decode and resize, encode, spill write, plan,
shard write, publish), the rest being Beam's and the job's own (start-up, pipeline construction,
moving elements between stages).

    python benchmarks/stage_profile.py --workload images --images_dir /tmp/beam_tfrecord_images_15000_256
    python benchmarks/stage_profile.py --workload small --records 200000

One in-memory worker, so every stage runs in this process where the profiler sees it (with worker
processes the same stages run in two processes at once; the per-record costs are the same). Times
are CPU seconds of the main thread (``time.thread_time``), so a machine shared with other jobs
changes them little; the spill runs are sorted and written by a thread the profiler does not
follow, shown apart as "spill thread" (the process's CPU less the main thread's). Imports happen
before the profile starts. cProfile slows Python-heavy code more than C (a factor ~1.3-2 on
per-record Python calls), so read the shares more than the absolute times.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

# stage -> the functions (path suffix, name) whose cumulative time is that stage's; a stage's own time
# is its cumulative time less the stages listed before it that it calls (read and resize inside encode).
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "read (source files)": (("encoding/records.py", "load_file_refs"),),
    "decode + resize + re-encode": (("core/image_ops.py", "__call__"),),
    "encode (validate, proto, hash, frame)": (("encoding/entries.py", "encode"), ("encoding/entries.py",
                                                                                  "encode_chunk")),
    "spill write (hand-over, sort, wait)": (("spill.py", "add"), ("spill.py", "add_many"), ("spill.py", "finish")),
    "plan (summaries, cuts)": (("beam/spill_path.py", "_plan_gathered"),
                               ("beam/plan_dataset.py", "add_input"), ("beam/plan_dataset.py", "merge_accumulators"),
                               ("beam/plan_dataset.py", "extract_output"), ("beam/plan_dataset.py", "_round_and_cuts"),
                               ("beam/plan_dataset.py", "_joined_step"), ("beam/plan_dataset.py", "refine"),
                               ("beam/plan_dataset.py", "_cut_joined")),
    "shard write (merge runs, copy, CRC)": (("beam/spill_path.py", "write_from_runs"),),
    "publish (rename, manifest)": (("beam/publish.py", "publish"),),
}
NESTED = {"encode (validate, proto, hash, frame)": ("read (source files)", "decode + resize + re-encode")}


def _cumulative(stats: pstats.Stats, functions: tuple[tuple[str, str], ...]) -> float:
    total = 0.0
    for (path, _, name), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if any(path.endswith(suffix) and name == wanted for suffix, wanted in functions):
            total += cumulative
    return total


def _images(args: argparse.Namespace, out: str) -> int:
    from pipelines import build_image_dataset

    build_image_dataset.run(["--input", args.images_dir, "--output", out, "--resize", "128x128",
                             "--progress", "none", "--direct_num_workers=1"])
    return sum(len(files) for _, _, files in os.walk(args.images_dir))


def _small(args: argparse.Namespace, out: str) -> int:
    import apache_beam as beam
    import workloads
    from write_benchmark import _small_samples

    from beam_tfrecord import ClassLabel, Schema, Tensor, TensorDType, WriterTuning, WriteTFRecordDataset

    schema = Schema({"image": Tensor(TensorDType.UINT8, workloads.IMAGE_SHAPE),
                     "label": ClassLabel(tuple(str(i) for i in range(10)))})
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create(range(workloads.num_chunks(args.records)))
             | beam.Map(_small_samples, args.records)
             | WriteTFRecordDataset(out, schema=schema, tuning=WriterTuning(local_workers=1)))
    return args.records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=["images", "small"], default="images")
    parser.add_argument("--images_dir", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_images_15000_256"))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--top", type=int, default=0, help="also print the N functions of most own time")
    args = parser.parse_args()
    import apache_beam  # noqa: F401  (imports before the profile)
    import write_benchmark  # noqa: F401

    import pipelines.build_image_dataset  # noqa: F401
    from beam_tfrecord.core import image_ops

    image_ops._pil()
    out = tempfile.mkdtemp(prefix="stage_profile-")
    profiler = cProfile.Profile(time.thread_time)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        profiler.enable()
        records = (_images if args.workload == "images" else _small)(args, os.path.join(out, "dataset"))
        profiler.disable()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    stats = pstats.Stats(profiler)
    main_thread = stats.total_tt  # type: ignore[attr-defined]
    cumulative = {stage: _cumulative(stats, functions) for stage, functions in STAGES.items()}
    own = {stage: seconds - sum(cumulative[inner] for inner in NESTED.get(stage, ())) for stage, seconds in
           cumulative.items()}
    print(f"{args.workload}: {records:,} records, one in-memory worker under cProfile: {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU; load average {os.getloadavg()[0]:.2f}")
    print(f"  {'stage (CPU of the main thread)':<40} {'seconds':>8} {'share':>6} {'µs/record':>10}")
    rows = [*own.items(), ("the rest: Beam, pipeline, job", main_thread - sum(own.values())),
            ("spill thread (sort, write runs)", cpu - main_thread)]
    for stage, seconds in rows:
        print(f"  {stage:<40} {seconds:8.2f} {seconds / cpu:6.1%} {seconds / records * 1e6:10.1f}")
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()

"""Versions that share shards: what a 1% refresh writes and reads, what ten cost, how fast a big manifest opens.

    python benchmarks/shared_shards.py                        # ~1.5 GB of 512-px JPEGs (11,600), every part
    python benchmarks/shared_shards.py --images 3000 --parts refresh,chain   # quicker
    python benchmarks/shared_shards.py --parts manifest --shards 100000

Parts (each prints its figures and the issue's target):
- ``refresh``: a root built from the folder; then 1% of the inputs added, 0.5% changed, 0.5% removed, and three
  jobs run on it, interleaved over ``--rounds`` rounds, each from the same base version: the append refresh (the
  default), the refresh that copies kept records (``--append=false``, the refresh before shared shards) and a full
  build of the changed folder. Bytes written: every file the append's version added, manifest and indexes
  included, against the base's shard bytes. Unchanged shards read: every shard of the base is renamed out of reach
  while the append runs, so any read fails it (0 bytes when it succeeds). Times: wall time of each job process.
- ``chain``: ten such refreshes in a row with ``--keep_versions 10 --min_version_age 0``: the root's bytes on
  storage against one full version's.
- ``plan``: the append plan over 1e5 and 1e6 synthetic records (the launching process holds the base's index
  and record locations and the current index): peak RSS, seconds, and bytes per record extrapolated to 1e9.
- ``manifest``: a synthetic version of ``--shards`` shards (nine tenths listed from nine earlier versions, one in
  ten with a deletion vector): its manifest's size, and the time ``open_dataset`` takes (read, parse, every check).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from measure import child_env, run_measured
from refresh_benchmark import _make_additions, _make_images

TARGET_WRITTEN_FRACTION = 0.05
TARGET_CHAIN_RATIO = 1.3
TARGET_OPEN_SECONDS = 1.0
LAYOUT = ["--splits=train=0.9,validation=0.1", "--min_version_age=0", "--keep_versions=10"]
# The exact-duplicates check is left out by default (--duplicates_check=on measures it), in all three jobs alike.
DUPLICATES_OFF = ["--duplicates=off"]
_CHECKS: list[str] = []


def _tree_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def _job(module: str, *args: str) -> float:
    """Runs a job in its own process; its wall seconds."""
    return run_measured([sys.executable, "-m", module, *args], env=child_env(os.path.dirname(HERE))).seconds


def _refresh(images: str, root: str, *extra: str) -> float:
    return _job("pipelines.refresh_image_dataset", "--input", images, "--dataset_root", root, *LAYOUT, *_CHECKS,
                *extra)


def _change(images: str, additions: list[tuple[str, str]], *, changed: int, removed: int, seed: int) -> None:
    """Adds the files of ``additions``, rewrites ``changed`` files with another image's bytes, moves ``removed``
    files aside (into ``images + '-removed'``)."""
    for source, target in additions:
        shutil.copyfile(source, target)
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(images) for f in names
                   if f.endswith(".jpg") and "added-" not in f)
    rng = random.Random(seed)
    picked = rng.sample(files, changed + removed)
    for target in picked[:changed]:
        shutil.copyfile(rng.choice(files), target + ".tmp")
        os.replace(target + ".tmp", target)
    aside = images + "-removed"
    for path in picked[changed:]:
        os.makedirs(os.path.join(aside, os.path.basename(os.path.dirname(path))), exist_ok=True)
        os.replace(path, os.path.join(aside, os.path.basename(os.path.dirname(path)), os.path.basename(path)))


def _latest_dir(root: str) -> str:
    with open(os.path.join(root, "LATEST")) as handle:
        return os.path.join(root, "versions", handle.read().strip())


def _append_out_of_reach(images: str, root: str) -> float:
    """The append refresh with every shard file of LATEST's version renamed aside; its seconds."""
    from beam_tfrecord.dataset import open_dataset

    dataset = open_dataset(root)
    paths = [dataset.shard_path(shard) for shard in dataset.manifest.shards]
    for path in paths:
        os.replace(path, path + ".aside")
    try:
        return _refresh(images, root)
    finally:
        for path in paths:
            os.replace(path + ".aside", path)


def refresh_part(args: argparse.Namespace, work: str, images: str) -> None:
    from beam_tfrecord.dataset import open_dataset

    count = len([f for _, _, names in os.walk(images) for f in names if f.endswith(".jpg")])
    added, changed, removed = round(count * 0.01), round(count * 0.005), round(count * 0.005)
    base_root = os.path.join(work, "base")
    if not os.path.exists(os.path.join(base_root, "LATEST")):
        _refresh(images, base_root)
    base = open_dataset(base_root)
    dataset_bytes = sum(s.num_bytes for s in base.manifest.shards)
    print(f"base: {count} images, {base.manifest.num_written} records, {dataset_bytes / 1e9:.2f} GB of shards; "
          f"change: {added} added, {changed} changed, {removed} removed")
    times: dict[str, list[float]] = {"append": [], "copy (--append=false)": [], "full build": []}
    written: list[int] = []
    failures: list[str] = []
    for round_number in range(args.rounds):
        for job in times:
            root = os.path.join(work, "round")
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(base_root, root)
            scratch = images + "-round"
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.rmtree(scratch + "-removed", ignore_errors=True)
            shutil.copytree(images, scratch, copy_function=os.link)  # hard links: the change never reaches images
            additions = [(source, target.replace(images, scratch, 1))
                         for source, target in _make_additions(images, added, args.size)]
            _change(scratch, additions, changed=changed, removed=removed, seed=round_number)
            before = set(os.listdir(os.path.join(root, "versions")))
            if job == "append":
                times[job].append(_append_out_of_reach(scratch, root))
                [new] = set(os.listdir(os.path.join(root, "versions"))) - before
                written.append(_tree_bytes(os.path.join(root, "versions", new)))
            elif job == "full build":
                shutil.rmtree(root)
                times[job].append(_refresh(scratch, root))
            else:
                try:
                    times[job].append(_refresh(scratch, root, "--append=false"))
                except RuntimeError as err:  # the copying refresh's known loss of records at this scale
                    print(f"round {round_number + 1}: {job} failed: {str(err).strip().splitlines()[-1][:300]}")
                    failures.append(job)
        print(f"round {round_number + 1}: " + ", ".join(f"{job} {t[-1]:.1f} s" for job, t in times.items() if t))
    fraction = statistics.median(written) / dataset_bytes
    print(f"append wrote {statistics.median(written) / 1e6:.1f} MB = {fraction:.2%} of the dataset's bytes "
          f"(target <= {TARGET_WRITTEN_FRACTION:.0%}: {'met' if fraction <= TARGET_WRITTEN_FRACTION else 'NOT met'})")
    print("unchanged shards read by the append: 0 bytes (every shard of the base was out of reach while it ran)")
    append = statistics.median(times["append"])
    for job in ("copy (--append=false)", "full build"):
        if not times[job]:
            print(f"{job}: no run finished ({failures.count(job)} failed)")
            continue
        print(f"append {append:.1f} s vs {job} {statistics.median(times[job]):.1f} s: "
              f"{statistics.median(times[job]) / append:.2f}x faster (medians of {args.rounds})")


def chain_part(args: argparse.Namespace, work: str, images: str) -> None:
    root = os.path.join(work, "chain")
    shutil.rmtree(root, ignore_errors=True)
    scratch = images + "-chain"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(scratch + "-removed", ignore_errors=True)
    shutil.copytree(images, scratch, copy_function=os.link)
    _refresh(scratch, root)
    one_version = _tree_bytes(_latest_dir(root))
    count = len([f for _, _, names in os.walk(scratch) for f in names if f.endswith(".jpg")])
    spare = _make_additions(images, round(count * 0.01) * 10, args.size)
    per = len(spare) // 10
    for number in range(10):
        additions = [(source, target.replace(images, scratch, 1).replace("added-", f"added{number}-"))
                     for source, target in spare[number * per:(number + 1) * per]]
        _change(scratch, additions, changed=round(count * 0.005), removed=round(count * 0.005), seed=100 + number)
        _refresh(scratch, root)
    total = _tree_bytes(root)
    ratio = total / one_version
    versions = len(os.listdir(os.path.join(root, "versions")))
    print(f"ten 1% refreshes, --keep_versions 10: {total / 1e9:.3f} GB on storage ({versions} version folders) = "
          f"{ratio:.2f}x one version's {one_version / 1e9:.3f} GB (target <= {TARGET_CHAIN_RATIO}x: "
          f"{'met' if ratio <= TARGET_CHAIN_RATIO else 'NOT met'})")


def manifest_part(args: argparse.Namespace, work: str) -> None:
    import dataclasses

    from beam_tfrecord import storage
    from beam_tfrecord.core.deletions import DeletionVector
    from beam_tfrecord.core.file_format import Compression
    from beam_tfrecord.core.manifest import Manifest, ShardInfo, SplitInfo
    from beam_tfrecord.core.naming import ShardName
    from beam_tfrecord.core.schema import DType, Scalar, Schema
    from beam_tfrecord.dataset import open_dataset

    rng = random.Random(0)
    versions = [f"20261128T0000{number:02d}.000Z-abcdef" for number in range(10)]
    per_version = args.shards // len(versions)
    shards = []
    for number, version_id in enumerate(versions):
        for index in range(per_version):
            deleted = DeletionVector.of(rng.sample(range(1000), 5)) if rng.random() < 0.1 else None
            shards.append(ShardInfo(str(ShardName("data", "train", index, per_version)), "train", len(shards), 1000,
                                    3_000_000, 3_000_000, f"{rng.getrandbits(32):08x}",
                                    stored_in=version_id if number < len(versions) - 1 else None, deletions=deleted))
    live = sum(shard.num_live for shard in shards)
    manifest = Manifest(dataset_name="data", schema=Schema({"label": Scalar(DType.INT64)}),
                        splits=(SplitInfo("train", tuple(shards)),), compression=Compression.NONE, created_at="x",
                        tool_version="x", command=(), num_inputs=live, num_rejected=0, dead_letters=None, salt="s",
                        sharding={"target_shard_bytes": 3_000_000})
    directory = os.path.join(work, "manifest", "versions", "20261128T010000.000Z-abcdef")
    os.makedirs(directory, exist_ok=True)
    storage.write_bytes_atomic(os.path.join(directory, "manifest.json"), manifest.dumps().encode())
    size = os.path.getsize(os.path.join(directory, "manifest.json"))
    seconds, cpu_seconds = [], []
    for _ in range(args.rounds):
        start, cpu_start = time.perf_counter(), time.process_time()
        opened = open_dataset(directory)
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu_start)
    assert dataclasses.replace(opened.manifest, created_at="x") == manifest
    best = min(seconds)
    print(f"manifest of {len(shards)} shards ({sum(1 for s in shards if s.deletions)} with deletion vectors): "
          f"{size / 1e6:.1f} MB; open_dataset {best:.2f} s (best of {args.rounds}; median "
          f"{statistics.median(seconds):.2f} s; CPU {min(cpu_seconds):.2f} s; target <= {TARGET_OPEN_SECONDS} s: "
          f"{'met' if best <= TARGET_OPEN_SECONDS else 'NOT met'})")


def plan_child(count: int) -> None:
    """Plans an append of 1% new, 0.5% changed and 0.5% removed inputs over ``count`` synthetic records (shards of
    1,000), in this process; prints the peak RSS and the plan's seconds as one JSON line."""
    import json
    import resource

    from beam_tfrecord.core.file_format import Compression
    from beam_tfrecord.core.manifest import Manifest, ShardInfo, SplitInfo
    from beam_tfrecord.core.naming import ShardName
    from beam_tfrecord.core.schema import DType, Scalar, Schema
    from beam_tfrecord.versions.append import CompactionPolicy, plan_append
    from beam_tfrecord.versions.input_index import IndexedInput, InputIndex
    from beam_tfrecord.versions.locations import RecordLocation, RecordLocations

    version = "20261128T000000.000Z-abcdef"
    per_shard = 1000
    shards = count // per_shard
    names = [str(ShardName("data", "train", i, shards)) for i in range(shards)]
    manifest = Manifest(dataset_name="data", schema=Schema({"label": Scalar(DType.INT64)}),
                        splits=(SplitInfo("train", tuple(ShardInfo(name, "train", i, per_shard, 3_000_000, 3_000_000,
                                                                   "00000000") for i, name in enumerate(names))),),
                        compression=Compression.NONE, created_at="x", tool_version="x", command=(), num_inputs=count,
                        num_rejected=0, dead_letters=None, salt="s", sharding={"target_shard_bytes": 3_000_000})
    keys = [f"class{i % 100}/image-{i:010d}.jpg" for i in range(count)]
    base = InputIndex("e", tuple(IndexedInput(key, f"gs://bucket/raw/{key}", f"{i}:1") for i, key in enumerate(keys)))
    locations = RecordLocations({key: RecordLocation(version, names[i // per_shard], i % per_shard)
                                 for i, key in enumerate(keys)})
    rng = random.Random(0)
    changed = set(rng.sample(range(count), count // 100))
    now = [IndexedInput(i.key, i.path, i.token + ("x" if n in changed else "")) for n, i in enumerate(base.inputs)
           if n % 200 != 0]
    now += [IndexedInput(f"new/{n:010d}.jpg", f"gs://bucket/raw/new/{n}", "1:1") for n in range(count // 100)]
    current = InputIndex("e", tuple(sorted(now, key=lambda i: i.key)))
    start = time.perf_counter()
    plan = plan_append(base_version=version, base_dir=f"/root/versions/{version}", manifest=manifest,
                       base_index=base, locations=locations, current=current, policy=CompactionPolicy())
    seconds = time.perf_counter() - start
    print(json.dumps({"records": count, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "plan_seconds": seconds, "fresh": len(plan.fresh)}))


def plan_part(args: argparse.Namespace) -> None:
    import json
    import subprocess

    rows = []
    for count in (100_000, 1_000_000):
        out = subprocess.run([sys.executable, __file__, "--plan_child", str(count)], check=True, capture_output=True,
                             text=True, env=child_env(os.path.dirname(HERE))).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"append plan over {count:,} records: peak RSS {rows[-1]['peak_rss_bytes'] / 2**20:.0f} MiB, "
              f"{rows[-1]['plan_seconds']:.1f} s")
    per_record = (rows[1]["peak_rss_bytes"] - rows[0]["peak_rss_bytes"]) / (rows[1]["records"] - rows[0]["records"])
    print(f"the plan is made in one process: {per_record:.0f} bytes per record -> ~{per_record * 1e9 / 2**40:.1f} TiB "
          "at 1e9 records (NOT a distributed join: the issue's 1e9-key target is not met)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=11_600, help="JPEGs in the folder (~130 KB each at 512 px)")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--parts", default="manifest,plan,refresh,chain")
    parser.add_argument("--work", default="/tmp/beam-tfrecord-shared-shards")
    parser.add_argument("--plan_child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--duplicates_check", choices=["on", "off"], default="off")
    args = parser.parse_args()
    _CHECKS[:] = [] if args.duplicates_check == "on" else DUPLICATES_OFF
    if args.plan_child is not None:
        plan_child(args.plan_child)
        return
    parts = args.parts.split(",")
    os.makedirs(args.work, exist_ok=True)
    images = os.path.join(args.work, "images")
    if "manifest" in parts:
        manifest_part(args, args.work)
    if "plan" in parts:
        plan_part(args)
    if {"refresh", "chain"} & set(parts):
        _make_images(images, args.images, args.size)
    if "refresh" in parts:
        refresh_part(args, args.work, images)
    if "chain" in parts:
        chain_part(args, args.work, images)


if __name__ == "__main__":
    main()

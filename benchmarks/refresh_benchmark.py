"""Incremental refresh vs full build: a folder of JPEGs, then some added and some removed.

    python benchmarks/refresh_benchmark.py                          # 50,000 256-px JPEGs, the issue's size
    python benchmarks/refresh_benchmark.py --images 6000 --added 60 --removed 12   # quicker

Each round, interleaved, as separate processes of the refresh job (``pipelines.refresh_image_dataset``,
DirectRunner, ``--resize 128x128``):
  1. full build of the original folder into a fresh root (``--incremental=false``): the base version;
  2. ``--added`` images are added and ``--removed`` removed;
  3. incremental refresh of that root (``--incremental``, the default);
  4. full build of the changed folder into another fresh root (``--incremental=false``);
  5. the change is undone (removed files are moved aside, then back: same mtimes).
The refresh is compared with the mean of the round's two full builds (same machine state), and
its records with step 4's: the same records per split as a multiset (checked by reading every
record), and the same shard bytes (the writer plans both alike). Times are wall times of the
whole job process, interpreter start-up included. Images are made once and kept in ``--work``.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from measure import child_env, run_measured

TARGET_RATIO = 0.25


def _make_images(folder: str, count: int, size: int) -> None:
    from pipelines.make_sample_images import CLASSES, write_sample_images

    per_class = -(-count // len(CLASSES))
    marker = os.path.join(folder, f".made-{per_class}x{size}")
    if os.path.exists(marker):
        return
    shutil.rmtree(folder, ignore_errors=True)
    write_sample_images(folder, per_class=per_class, size=size, seed=0)
    open(marker, "w").close()


def _make_additions(folder: str, count: int, size: int) -> list[tuple[str, str]]:
    """(file in the spare folder, where it goes in the image folder) of ``count`` new images."""
    from pipelines.make_sample_images import CLASSES

    spare = folder + "-additions"
    _make_images(spare, count, size)
    found = sorted((os.path.join(spare, kind, name), os.path.join(folder, kind, f"added-{name}"))
                   for kind in CLASSES for name in os.listdir(os.path.join(spare, kind)))
    return found[:count]


def _job(images: str, root: str, resize: str, *extra: str) -> float:
    command = [sys.executable, "-m", "pipelines.refresh_image_dataset", "--input", images, "--dataset_root", root,
               f"--resize={resize}", "--runner=DirectRunner", *extra]
    measured = run_measured(command, env=child_env(os.path.dirname(HERE)))
    return measured.seconds


def _records_digest(root: str) -> dict[str, collections.Counter]:
    """Per split, a multiset of SHA-1 digests of the serialized records of the root's LATEST."""
    from beam_tfrecord import storage
    from beam_tfrecord.dataset import load_manifest, resolve_dataset_dir
    from beam_tfrecord.formats import shard_format

    directory = resolve_dataset_dir(root)
    manifest = load_manifest(root)
    found: dict[str, collections.Counter] = {}
    for split in manifest.splits:
        counter = found.setdefault(split.name, collections.Counter())
        for shard in split.shards:
            with shard_format(manifest.file_format).open_reader(storage.join(directory, shard.filename), shard,
                                                                compression=manifest.compression) as reader:
                counter.update(hashlib.sha1(r).digest() for r, _ in reader.iter_records(0, shard.num_records))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--added", type=int, default=500)
    parser.add_argument("--removed", type=int, default=100)
    parser.add_argument("--size", type=int, default=256, help="side of the JPEGs made, in pixels")
    parser.add_argument("--resize", default="128x128")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--work", default="/tmp/refresh-benchmark", help="images and roots go here")
    args = parser.parse_args()

    from beam_tfrecord.dataset import load_manifest

    images = os.path.join(args.work, f"images-{args.images}-{args.size}")
    _make_images(images, args.images, args.size)
    additions = _make_additions(images, args.added, args.size)
    inputs = sorted(os.path.join(d, n) for d, _, names in os.walk(images) for n in names if not n.startswith("."))
    removals = inputs[:: max(1, len(inputs) // args.removed)][:args.removed]
    aside = os.path.join(args.work, "removed")
    os.makedirs(aside, exist_ok=True)
    print(f"{len(inputs)} images of {args.size} px, --resize {args.resize}; change: +{len(additions)} "
          f"-{len(removals)}; {args.rounds} round(s), interleaved; machine shared")
    rows = []
    for number in range(args.rounds):
        base_root, full_root = (os.path.join(args.work, f"{name}-{number}") for name in ("incremental", "full"))
        shutil.rmtree(base_root, ignore_errors=True)
        shutil.rmtree(full_root, ignore_errors=True)
        before = _job(images, base_root, args.resize, "--incremental=false")
        for source, target in additions:
            shutil.copyfile(source, target)
        for number_removed, path in enumerate(removals):
            os.rename(path, os.path.join(aside, str(number_removed)))
        try:
            refresh = _job(images, base_root, args.resize)
            after = _job(images, full_root, args.resize, "--incremental=false")
        finally:
            for target in (t for _, t in additions):
                os.remove(target)
            for number_removed, path in enumerate(removals):
                os.rename(os.path.join(aside, str(number_removed)), path)
        manifest, full = load_manifest(base_root), load_manifest(full_root)
        same_records = _records_digest(base_root) == _records_digest(full_root)
        same_shards = [(s.filename, s.crc32c) for s in manifest.shards] == [(s.filename, s.crc32c)
                                                                              for s in full.shards]
        full_seconds = statistics.mean([before, after])
        rows.append({"round": number, "full_before_s": round(before, 1), "refresh_s": round(refresh, 1),
                     "full_after_s": round(after, 1), "ratio": round(refresh / full_seconds, 3),
                     "same_records": same_records, "same_shards": same_shards,
                     "refresh": manifest.metadata.get("refresh"), "records": manifest.num_written})
        print(json.dumps(rows[-1]))
    ratio = statistics.median(r["ratio"] for r in rows)
    print("\n| round | full build (before) s | incremental refresh s | full build (after) s | refresh / full |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['round']} | {r['full_before_s']} | {r['refresh_s']} | {r['full_after_s']} | {r['ratio']:.3f} |")
    met = ratio <= TARGET_RATIO and all(r["same_records"] for r in rows)
    print(f"\nmedian refresh / full build: {ratio:.3f} (target <= {TARGET_RATIO}); records equal a full build's: "
          f"{all(r['same_records'] for r in rows)}; target {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()

"""Storage of ten refreshes that share shards, kept with --keep_versions 10, against one full version.

    python benchmarks/shared_retention.py                       # 4,000 records of ~1 KB in 40 shards
    python benchmarks/shared_retention.py --records 20000 --keep_versions 3

Version 1 is a full build (the library's writer). Each later version lists every live shard of the one before
(``stored_in`` where the file lies, never copied), deletes ``--delete_fraction`` of the live records (deletion
vectors) and adds one new shard of ``--new_fraction`` of the base's records, as the append refresh does; each is made
LATEST (``commit_version``) and retention runs (``apply_retention``, minimum age 0). The new shards come from a second
writer run, one per refresh. Prints the bytes under ``ROOT/versions/`` against version 1's directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import random
import tempfile

import apache_beam as beam

from beam_tfrecord import DatasetDescription, DType, Scalar, Schema, ShardingConfig, WriteTFRecordDataset, storage
from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, ShardInfo, SplitInfo
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.dataset import load_manifest, version_dir
from beam_tfrecord.versions.refresh import apply_retention, commit_version, list_versions

SCHEMA = Schema({"blob": Scalar(DType.BYTES)})
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def _write(pipeline: beam.Pipeline, name: str, out: str, count: int, num_shards: int, seed: int) -> None:
    rng = random.Random(seed)
    samples = [Sample(f"{name}{n}", {"blob": rng.randbytes(1000)}) for n in range(count)]
    description = DatasetDescription(schema=SCHEMA, statistics=False, sharding=ShardingConfig(num_shards=num_shards))
    _ = (pipeline | f"Create{name}" >> beam.Create(samples)
         | f"Write{name}" >> WriteTFRecordDataset(out, description=description))


def _tree_bytes(path: str) -> int:
    return sum(size for _, size in storage.list_files(storage.join(path, "**")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--shards", type=int, default=40)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--keep_versions", type=int, default=10)
    parser.add_argument("--new_fraction", type=float, default=0.015)
    parser.add_argument("--delete_fraction", type=float, default=0.01)
    parser.add_argument("--work_dir", default=None, help="kept afterwards (default: a temporary one, deleted)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shared_retention-") as temporary:
        _measure(args, args.work_dir or temporary)


def _measure(args: argparse.Namespace, work_dir: str) -> None:
    base_dir, new_dir = os.path.join(work_dir, "base"), os.path.join(work_dir, "new")
    new_per_version = max(1, round(args.records * args.new_fraction))
    with beam.Pipeline() as pipeline:
        _write(pipeline, "base", base_dir, args.records, args.shards, seed=0)
        _write(pipeline, "new", new_dir, new_per_version * (args.versions - 1), args.versions - 1, seed=1)
    root = os.path.join(work_dir, "root")
    ids = [f"{T0 + datetime.timedelta(days=n):%Y%m%dT%H%M%S}.000Z-{n:06x}" for n in range(args.versions)]
    rng = random.Random(2)
    listed: list[ShardInfo] = []
    new_shards, base = load_manifest(new_dir).shards, load_manifest(base_dir)
    for number, version_id in enumerate(ids):
        directory = version_dir(root, version_id)
        if number == 0:  # the full build: its files and manifest as written
            for name, _ in storage.list_files(os.path.join(base_dir, "*")):
                storage.copy_file(name, storage.join(directory, os.path.basename(name)))
            listed = [dataclasses.replace(s, stored_in=version_id) for s in base.shards]
        else:
            live = [(i, p) for i, s in enumerate(listed) for p in range(s.num_records)
                    if s.deletions is None or p not in s.deletions.positions]
            doomed = rng.sample(live, round(len(live) * args.delete_fraction))
            for i, _ in doomed:
                positions = [p for j, p in doomed if j == i]
                old = listed[i].deletions
                listed[i] = dataclasses.replace(listed[i], deletions=old.union(positions) if old else
                                                DeletionVector.of(positions))
            fresh = new_shards[number - 1]
            storage.copy_file(os.path.join(new_dir, fresh.filename), storage.join(directory, fresh.filename))
            listed.append(dataclasses.replace(fresh, stored_in=version_id))
            shards = tuple(dataclasses.replace(s, index=k, stored_in=None if s.stored_in == version_id else s.stored_in)
                           for k, s in enumerate(listed))
            split = SplitInfo("train", shards)
            manifest = dataclasses.replace(base, splits=(split,),
                                           num_inputs=split.num_records, num_rejected=0, dead_letters=None)
            storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode())
        commit_version(root, version_id, now=T0 + datetime.timedelta(days=number))
        apply_retention(root, args.keep_versions, min_version_age=datetime.timedelta(0),
                        now=T0 + datetime.timedelta(days=number))
    one = _tree_bytes(base_dir)  # what version 1's directory held: the full build's files
    total = _tree_bytes(storage.join(root, "versions"))
    listing = list_versions(root)
    print(f"{args.versions} versions, {args.records} records of ~1 KB in {args.shards} shards, each refresh "
          f"+{new_per_version} records ({args.new_fraction:.1%}), -{args.delete_fraction:.1%} live records")
    print(f"kept {len(listing.complete)} complete, {len(listing.retired)} retired directories")
    print(f"one full version: {one} bytes; root (keep {args.keep_versions}): {total} bytes; ratio {total / one:.3f}x")


if __name__ == "__main__":
    main()

"""Reading a version with deletion vectors against its compacted twin: tf.data, NumPy and PyTorch, interleaved.

Builds (once) read_benchmark's ~3 KB records (CIFAR-like, 16 shards) as the first version of a root; a second
version that lists those shards where they are with ``--deleted`` (default 1%) of each shard's records deleted at
random positions (tests/deleted_records.py); and the compacted twin: the same live records in the same order and
shards, written without deletions. Then times full passes of each reader over both, variant after variant in each
round (read_benchmark.measure: best of ``--rounds`` after a warm-up; NumPy and PyTorch in a child process without
TensorFlow), and prints each ratio deletions / twin (the target: at least 0.95). ``--before`` also times, once,
tf.data reading the version as it did before shard passes: a ``skip``/``take`` per live run of each shard
(one round after a warm-up).

Run: python benchmarks/read_deletions.py [--records 60000] [--dir /tmp/bt_read_deletions] [--rounds 5] [--before]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import numpy as np
from deleted_records import compacted_twin, shared_version
from measure import already_built
from read_benchmark import build, measure

from beam_tfrecord.dataset import load_manifest, read_latest, version_dir
from beam_tfrecord.versions.refresh import commit_version

FIRST, SECOND = "20260101T000000.000Z-0a0a0a", "20260102T000000.000Z-0b0b0b"
BATCH = 256
Modes = dict[str, Callable[[], Iterable[Any]]]


def build_twins(directory: str, num_records: int, deleted_fraction: float) -> tuple[str, str]:
    """The root whose LATEST deletes ``deleted_fraction`` of each shard's records, and its compacted twin (each
    made once; the root's first version is ``read_benchmark.build``'s dataset)."""
    root, twin = os.path.join(directory, "root"), os.path.join(directory, "compacted")
    first = version_dir(root, FIRST)
    if read_latest(root) != SECOND:
        build(first, num_records)
        commit_version(root, FIRST)
        rng = np.random.default_rng(0)
        deleted = {shard.filename: rng.choice(shard.num_records, round(shard.num_records * deleted_fraction),
                                              replace=False).tolist() for shard in load_manifest(first).shards}
        manifest = shared_version(root, FIRST, SECOND, deleted=deleted)
        print(f"version {SECOND}: {manifest.num_deleted} of {num_records} records deleted, in "
              f"{sum(s.deletions is not None for s in manifest.shards)} shards")
    live = load_manifest(root).num_written
    if not already_built(twin, live):
        started = time.perf_counter()
        compacted_twin(version_dir(root, SECOND), load_manifest(root), twin)
        print(f"compacted twin: {live} records in {time.perf_counter() - started:.1f} s")
    return root, twin


def tf_modes(root: str, twin: str) -> Modes:
    from beam_tfrecord.reader.tf_data import read_dataset

    modes: Modes = {}
    for variant, path in (("deleted", root), ("twin", twin)):
        modes[f"tf.data {variant}"] = lambda path=path: read_dataset(path, batch_size=BATCH)
        modes[f"tf.data shuffled {variant}"] = lambda path=path: read_dataset(path, batch_size=BATCH, shuffle=True,
                                                                              seed=0)
    return modes


def runs_one_by_one(root: str) -> Any:
    """tf.data over the version as read before shard passes: each live run its own ``skip``/``take`` of its shard."""
    import tensorflow as tf

    from beam_tfrecord.reader.order.read_plan import plan_read
    from beam_tfrecord.reader.tf_spec import make_batch_parser

    plan = plan_read(root)
    pieces = [tf.data.TFRecordDataset(plan.path(s)).skip(s.skip).take(s.take) for s in plan.segments]
    records = pieces[0]
    for piece in pieces[1:]:
        records = records.concatenate(piece)
    return records.batch(BATCH).map(make_batch_parser(plan.manifest.schema, image_decoding=None, verbatim=False))


def child_modes(root: str, twin: str) -> Modes:
    import torch.utils.data

    from beam_tfrecord.reader.numpy_reader import read_numpy
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    modes: Modes = {}
    for variant, path in (("deleted", root), ("twin", twin)):
        modes[f"numpy batches {variant}"] = lambda path=path: read_numpy(path, batch_size=BATCH)
        modes[f"numpy examples {variant}"] = lambda path=path: read_numpy(path)
        for workers in (0, 2):
            modes[f"torch {workers} workers {variant}"] = lambda path=path, workers=workers: (
                torch.utils.data.DataLoader(TFRecordIterableDataset(path, batch_size=BATCH), batch_size=None,
                                            num_workers=workers))
    return modes


def ratios(rates: dict[str, tuple[float, float]]) -> None:
    """Prints each mode's rates and deletions / twin."""
    for name in [name for name in rates if name.endswith(" deleted")]:
        mode = name.removesuffix(" deleted")
        (deleted, deleted_cpu), (twin, twin_cpu) = rates[name], rates[f"{mode} twin"]
        print(f"{mode:24s} deleted {deleted:9,.0f} rec/s ({deleted_cpu:5.1f} CPU us/rec)   twin {twin:9,.0f} rec/s "
              f"({twin_cpu:5.1f})   deleted/twin {deleted / twin:.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--deleted", type=float, default=0.01, help="fraction of each shard's records deleted")
    parser.add_argument("--dir", default="/tmp/bt_read_deletions")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", action="store_true", help="also time tf.data's read before shard passes, once")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # NumPy and PyTorch, without TensorFlow in the process (DataLoader workers fork it)
        request = json.loads(args.child)
        print(json.dumps(measure(child_modes(request["root"], request["twin"]), request["live"], request["rounds"])))
        return
    root, twin = build_twins(args.dir, args.records, args.deleted)
    live = load_manifest(root).num_written
    print(f"{live} live records of {args.records}; best of {args.rounds} rounds, variants interleaved")
    request = json.dumps({"root": root, "twin": twin, "live": live, "rounds": args.rounds})
    output = subprocess.run([sys.executable, __file__, "--child", request], check=True, capture_output=True,
                            text=True).stdout
    rates = {name: (rate, cpu) for name, (rate, cpu) in json.loads(output.splitlines()[-1]).items()}
    rates.update(measure(tf_modes(root, twin), live, args.rounds))
    ratios(rates)
    if args.before:
        before = measure({"before": lambda: runs_one_by_one(root)}, live, 1)["before"][0]
        print(f"tf.data, a skip/take per live run (before shard passes): {before:,.0f} rec/s, "
              f"{before / rates['tf.data twin'][0]:.3f} of the twin")


if __name__ == "__main__":
    main()

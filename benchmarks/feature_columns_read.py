"""Reading a version with a feature added as column files against a build with the feature from the start.

Builds (once) 100,000 Parquet-like rows (id, label, score, a 20-60 byte text) as the first version of a root, a
second version that adds a 64-float32 ``embedding`` to them as one column file per shard
(tests/columns/read_fixtures.py: the project's encoder and shard writer), and a native build of the same rows with
the embedding. Times full passes of tf.data, NumPy (batches and examples) and PyTorch (0 and 2 workers) over both,
interleaved (read_benchmark.measure: best of ``--rounds`` after a warm-up; NumPy and PyTorch in a child process
without TensorFlow), and prints joined / native for each (the target: at least 0.9).

With ``--paired N``, also tf.data's joined/native as the median of N rounds' ratios (``paired``), for a loaded machine.

Run: python benchmarks/feature_columns_read.py [--records 100000] [--dir /tmp/bt_columns_read] [--rounds 5]
     [--paired 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(HERE), "tests", name) for name in ("columns", "")]

import numpy as np
from read_benchmark import measure
from read_fixtures import add_columns, first_version, write_build

from beam_tfrecord import Sample
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.schema import DType, FixedList, Scalar, Schema
from beam_tfrecord.dataset import read_latest

FIRST, SECOND = "20260101T000000.000Z-0c0c0c", "20260102T000000.000Z-0d0d0d"
BATCH = 256
BASE = {"id": Scalar(DType.STRING), "label": Scalar(DType.INT64), "score": Scalar(DType.FLOAT32),
        "text": Scalar(DType.STRING)}
EMBEDDING = {"embedding": FixedList(DType.FLOAT32, 64)}
Modes = dict[str, Callable[[], Iterable[Any]]]


def _row(i: int) -> dict[str, Any]:
    return {"id": f"r{i:07d}", "label": i % 10, "score": i / 7, "text": "x" * (20 + i % 41)}


def _embedding(key: str) -> dict[str, Any]:
    return {"embedding": np.random.default_rng(int(key[1:])).random(64, dtype=np.float32)}


def build_pair(directory: str, num_records: int) -> tuple[str, str]:
    """The root whose LATEST adds the embedding as column files, and the native build (each made once)."""
    root, native = os.path.join(directory, "root"), os.path.join(directory, "native")
    rows = [Sample(f"r{i:07d}", _row(i)) for i in range(num_records)]
    if read_latest(root) != SECOND:
        first_version(root, FIRST, rows, Schema(features=BASE), file_format=FileFormat.TFRECORD)
        add_columns(root, FIRST, SECOND, adds=[(EMBEDDING, _embedding)], key_feature="id")
    if not os.path.exists(os.path.join(native, "manifest.json")):
        write_build(native, [Sample(s.key, {**s.values, **_embedding(s.key)}) for s in rows],
                    Schema(features={**BASE, **EMBEDDING}), file_format=FileFormat.TFRECORD)
    return root, native


def tf_modes(root: str, native: str) -> Modes:
    from beam_tfrecord.reader.tf_data import read_dataset

    return {f"tf.data {variant}": (lambda path=path: read_dataset(path, batch_size=BATCH))
            for variant, path in (("joined", root), ("native", native))}


def paired(modes: Modes, rounds: int) -> tuple[float, float]:
    """(joined/native wall, native/joined CPU) of two modes, the median over ``rounds`` rounds (after a warm-up) of
    each round's ratio, one pass of each in turn: steadier than the best of each on a loaded machine, where a busy
    moment hits one mode's best and not the other's."""
    ratios = []
    for round_index in range(rounds + 1):
        spent = []
        for make in modes.values():
            dataset = make()
            started, cpu_started = time.perf_counter(), time.process_time()
            for _ in dataset:
                pass
            spent.append((time.perf_counter() - started, time.process_time() - cpu_started))
        if round_index:
            (joined_wall, joined_cpu), (native_wall, native_cpu) = spent
            ratios.append((native_wall / joined_wall, native_cpu / joined_cpu))
    return statistics.median(r[0] for r in ratios), statistics.median(r[1] for r in ratios)


def child_modes(root: str, native: str) -> Modes:
    """read_deletions' NumPy and PyTorch modes (batches, examples, 0 and 2 workers) over the joined and native."""
    from read_deletions import child_modes as reader_modes

    names = {" deleted": " joined", " twin": " native"}
    return {name.replace(suffix, names[suffix]): make for name, make in reader_modes(root, native).items()
            for suffix in names if name.endswith(suffix)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--dir", default="/tmp/bt_columns_read")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paired", type=int, default=0, help="also tf.data's paired rounds (median ratio)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # NumPy and PyTorch, without TensorFlow in the process (DataLoader workers fork it)
        request = json.loads(args.child)
        print(json.dumps(measure(child_modes(request["root"], request["native"]), request["records"],
                                 request["rounds"])))
        return
    root, native = build_pair(args.dir, args.records)
    print(f"{args.records} records; best of {args.rounds} rounds, variants interleaved")
    request = json.dumps({"root": root, "native": native, "records": args.records, "rounds": args.rounds})
    output = subprocess.run([sys.executable, __file__, "--child", request], check=True, capture_output=True,
                            text=True).stdout
    rates = {name: (rate, cpu) for name, (rate, cpu) in json.loads(output.splitlines()[-1]).items()}
    rates.update(measure(tf_modes(root, native), args.records, args.rounds))
    for name in [name for name in rates if name.endswith(" joined")]:
        mode = name.removesuffix(" joined")
        (joined, joined_cpu), (built, built_cpu) = rates[name], rates[f"{mode} native"]
        print(f"{mode:22s} joined {joined:9,.0f} rec/s ({joined_cpu:5.1f} CPU us/rec)   native {built:9,.0f} rec/s "
              f"({built_cpu:5.1f})   joined/native {joined / built:.3f}")
    if args.paired:
        wall, cpu = paired(tf_modes(root, native), args.paired)
        print(f"tf.data paired, median of {args.paired} rounds: joined/native {wall:.3f} wall, "
              f"native/joined CPU {cpu:.3f}")


if __name__ == "__main__":
    main()

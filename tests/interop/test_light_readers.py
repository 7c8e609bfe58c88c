"""The NumPy reader and the PyTorch dataset run where apache_beam and tensorflow cannot be imported.

One fresh interpreter whose import system refuses ``apache_beam``, ``tensorflow`` and
``tensorflow_datasets`` (a meta-path finder installed before anything else) reads, in turn, a local
dataset and one copied to a real GCS emulator, in both file formats (module fixture: one interpreter
start and one torch import for the four cases).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from fixtures_gcs import fake_gcs  # noqa: F401  (pytest fixture)

from beam_tfrecord import load_manifest, read_numpy

_BLOCKED = ("apache_beam", "tensorflow", "tensorflow_datasets")
_SCRIPT = '''
import importlib.abc, json, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is made unimportable for this test")
        return None

sys.meta_path.insert(0, Refuse())
for name in BLOCKED:
    try:
        __import__(name)
        raise SystemExit(f"{name} could still be imported")
    except ImportError:
        pass

import torch.utils.data
from beam_tfrecord import read_numpy, TFRecordIterableDataset, load_manifest, num_examples, verify_dataset

for path in sys.argv[1:]:
    examples = list(read_numpy(path, split="train[:50%]"))
    shuffled = list(read_numpy(path, split="train", shuffle=True, seed=1, num_workers=2, worker_index=1))
    loader = torch.utils.data.DataLoader(TFRecordIterableDataset(path, split="train", rank=0, world_size=2),
                                         batch_size=None, num_workers=0)
    torch_counts = [int(e["count"]) for e in loader]
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps({"path": path, "counts": [int(e["count"]) for e in examples], "shuffled": len(shuffled),
                      "torch": torch_counts, "num_examples": num_examples(path, split="train"),
                      "verified": verify_dataset(path).num_records, "leaked": leaked}))
'''


@pytest.fixture(scope="module")
def read_without_beam_and_tf(fake_gcs, tfrecord_dataset, array_record_dataset) -> dict[str, dict]:
    """What the script read from each of the four datasets, by "local-FORMAT" and "gcs-FORMAT"."""
    bucket = fake_gcs.create_bucket(f"bt-light-readers-{time.monotonic_ns() % 10**6}")
    paths = {}
    for fmt, local in (("tfrecord", tfrecord_dataset), ("array_record", array_record_dataset)):
        fake_gcs.upload_tree(local, f"{bucket}/{fmt}")
        paths[f"local-{fmt}"], paths[f"gcs-{fmt}"] = local, f"{bucket}/{fmt}"
    script = f"BLOCKED = {_BLOCKED!r}\n" + _SCRIPT
    done = subprocess.run([sys.executable, "-c", script, *paths.values()], capture_output=True, text=True,
                          timeout=300, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    read = {line["path"]: line for line in map(json.loads, done.stdout.strip().splitlines()[-len(paths):])}
    return {case: read[path] for case, path in paths.items()}


def _expected(path: str) -> dict:
    return {"counts": [int(e["count"]) for e in read_numpy(path, split="train[:50%]")],
            "num_examples": load_manifest(path).split("train").num_records}


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_local_dataset_reads_without_beam_or_tensorflow(fmt, tfrecord_dataset, array_record_dataset,
                                                       read_without_beam_and_tf):
    path = tfrecord_dataset if fmt == "tfrecord" else array_record_dataset
    got, expected = read_without_beam_and_tf[f"local-{fmt}"], _expected(path)
    assert got["leaked"] == []
    assert got["counts"] == expected["counts"] and got["num_examples"] == expected["num_examples"]
    assert got["shuffled"] == expected["num_examples"] // 2 and len(got["torch"]) == expected["num_examples"] // 2
    assert got["verified"] == load_manifest(path).num_written


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_gcs_dataset_reads_without_beam_or_tensorflow(fmt, tfrecord_dataset, array_record_dataset,
                                                      read_without_beam_and_tf):
    local = tfrecord_dataset if fmt == "tfrecord" else array_record_dataset
    got, expected = read_without_beam_and_tf[f"gcs-{fmt}"], _expected(local)
    assert got["leaked"] == []
    assert got["counts"] == expected["counts"] and got["verified"] == load_manifest(local).num_written

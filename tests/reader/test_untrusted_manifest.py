"""A manifest is untrusted input: a tampered one is a ManifestError naming the field and value, raised by
verify, inspect, every reader and refresh before any shard is opened."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.errors import ManifestError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.refresh import InputFingerprint, plan_refresh


def _tamper(data: dict, change) -> dict:
    data = json.loads(json.dumps(data))
    change(data)
    return data


def _set(path: str, value):
    def change(data):
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return change


VERSION = "20261122T030000.000Z-1a2b3c"
SHARD = "splits.2.shards.0"  # the counted dataset's first test shard
CASES = {
    "traversal": (_set(f"{SHARD}.filename", "../ds/t-test.tfrecord-00000-of-00001"), "splits[2].shards[0].filename",
                  "a plain file name in the dataset directory"),
    "absolute": (_set(f"{SHARD}.filename", "/etc/passwd"), "splits[2].shards[0].filename", "a plain file name"),
    "url": (_set(f"{SHARD}.filename", "gs://elsewhere/t-test.tfrecord-00000-of-00001"),
            "splits[2].shards[0].filename", "a plain file name"),
    "backslash": (_set(f"{SHARD}.filename", "..\\t-test.tfrecord-00000-of-00001"), "splits[2].shards[0].filename",
                  "a plain file name"),
    "another-dataset's-name": (_set(f"{SHARD}.filename", "other-test.tfrecord-00000-of-00001"),
                               "splits[2].shards[0].filename", "'t-test.tfrecord-00000-of-00001'"),
    "negative-count": (_set(f"{SHARD}.num_records", -1), "splits[2].shards[0].num_records", "an integer >= 0"),
    "bool-count": (_set(f"{SHARD}.num_records", True), "splits[2].shards[0].num_records", "an integer >= 0"),
    "float-size": (_set(f"{SHARD}.num_bytes", 1.5), "splits[2].shards[0].num_bytes", "an integer >= 0"),
    "bad-crc": (_set(f"{SHARD}.crc32c", "zz"), "splits[2].shards[0].crc32c", "8 lowercase hex digits"),
    "wrong-index": (_set(f"{SHARD}.index", 3), "splits[2].shards[0].index", "0"),
    "extra-field": (_set(f"{SHARD}.path", "/etc/passwd"), "splits[2].shards[0]", "the fields ['crc32c', 'filename'"),
    "compression": (_set("compression", "BROTLI"), "compression", "one of 'NONE', 'GZIP', 'ZLIB'"),
    "dead-letters-traversal": (_set("dead_letters", "../../x.jsonl"), "dead_letters", "a plain file name"),
    "dataset-name": (_set("dataset_name", "../t"), "dataset_name", "a dataset name"),
    "sums": (_set("num_inputs", 7), "num_inputs", "num_written + num_rejected"),
    "split-sum": (_set("splits.2.num_records", 5), "splits[2].num_records", "the sum over its shards"),
    "duplicate-split": (_set("splits.1.name", "train"), "splits[1].name", "a name no other split has"),
    "spread": (_set("splits.0.balance_spread", float("nan")), "splits[0].balance_spread", "a number in [0, 1]"),
}


@pytest.fixture()
def copy_of(counted, tmp_path):
    root = str(tmp_path / "ds")
    shutil.copytree(counted.path, root)
    with open(os.path.join(root, "manifest.json")) as handle:
        return root, json.load(handle)


def _write(root: str, data: dict) -> None:
    with open(os.path.join(root, "manifest.json"), "w") as handle:
        json.dump(data, handle)


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_field_is_named_with_its_value(copy_of, case):
    _, data = copy_of
    change, field, expected = CASES[case]
    with pytest.raises(ManifestError) as info:
        Manifest.from_json(_tamper(data, change))
    assert str(info.value).startswith(f"manifest field {field!r}: expected ") and expected in str(info.value)


def test_the_untampered_copy_is_accepted(copy_of):
    root, _ = copy_of
    assert verify_dataset(root).num_records == 1000


def test_a_manifest_that_points_outside_the_dataset_is_refused_everywhere(copy_of, tmp_path):
    root, data = copy_of
    outside = tmp_path / "outside"
    outside.mkdir()
    name = data["splits"][2]["shards"][0]["filename"]
    shutil.copy(os.path.join(root, name), outside / name)  # a real file: the old code verified it happily
    _write(root, _tamper(data, _set(f"{SHARD}.filename", f"../outside/{name}")))
    os.remove(os.path.join(root, name))  # and nothing in the dataset by that name
    message = re.escape("manifest field 'splits[2].shards[0].filename': expected a plain file name")
    versioned = tmp_path / "root"  # a refresh root whose LATEST version is the tampered copy
    shutil.copytree(root, versioned / "versions" / VERSION)
    (versioned / "LATEST").write_text(VERSION + "\n")
    fingerprint = InputFingerprint(sha256="0" * 64, num_files=1, num_bytes=1)
    for attempt in (lambda: verify_dataset(root), lambda: load_manifest(root),
                    lambda: list(read_numpy(root, split="test")), lambda: plan_refresh(str(versioned), fingerprint),
                    lambda: list(read_numpy(str(versioned), split="test"))):
        with pytest.raises(ManifestError, match=message):
            attempt()
    import tensorflow as tf  # noqa: F401  (the tf.data reader)

    from beam_tfrecord.reader.tf_data import read_dataset
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset
    for attempt in (lambda: read_dataset(root, split="test"), lambda: TFRecordIterableDataset(root, split="test")):
        with pytest.raises(ManifestError, match=message):
            attempt()
    for command in ("inspect", "verify"):
        done = subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", command, root], capture_output=True,
                              text=True)
        assert done.returncode == 1 and re.search(message, done.stderr + done.stdout), (command, done.stderr)

"""NVIDIA DALI reads a dataset written with ``dali_index=True`` without a pre-pass.

The index files equal those DALI's own ``tfrecord2idx`` makes; DALI's ``fn.readers.tfrecord`` on a
CPU pipeline (``device_id=None``), split between two ``shard_id``s, reads every record equal to
``read_numpy``; what cannot have an index is refused; the manifest lists the indexes and checks them.
The tests marked ``ecosystem`` need DALI (the ``[ecosystem]`` extra) and are skipped without it.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import sys

import numpy as np
import pytest

from beam_tfrecord import DatasetDescription, load_manifest, read_numpy, verify_dataset
from beam_tfrecord.core.file_format import Compression, FileFormat
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.errors import CorruptShardError, ManifestError, MissingShardError, ReaderError, WriterOptionError
from beam_tfrecord.interop.dali import dali_reader_args
from tests.interop.conftest import SCHEMA

NUM_PIPELINES = 2
BATCH = 8
_BYTES_FEATURES = ("photo", "mask", "caption", "blob", "pixels", "depth", "flags")


@pytest.mark.ecosystem
def test_every_shard_has_the_index_dali_tfrecord2idx_makes(dali_dataset, tmp_path, monkeypatch):
    manifest = load_manifest(dali_dataset)
    script = shutil.which("tfrecord2idx", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("DALI's tfrecord2idx script is not installed (the [ecosystem] extra: "
                    "pip install -e '.[test,ecosystem]')")
    for shard in manifest.shards:
        assert shard.dali_index == shard.filename + ".idx"
        reference = tmp_path / f"{shard.filename}.idx"
        # The script run in this process (a process per shard would import TensorFlow each time).
        monkeypatch.setattr(sys, "argv", [script, os.path.join(dali_dataset, shard.filename), str(reference)])
        runpy.run_path(script, run_name="__main__")
        with open(os.path.join(dali_dataset, shard.dali_index), "rb") as handle:
            written = handle.read()
        assert written == reference.read_bytes() and written.count(b"\n") == shard.num_records


def _dali_records(args: dict, shard_id: int) -> dict[str, list[np.ndarray]]:
    dali = pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (the [ecosystem] extra: "
                                                     "pip install -e '.[test,ecosystem]')")

    @dali.pipeline_def(batch_size=BATCH, num_threads=1, device_id=None)  # a CPU pipeline: no GPU here
    def pipeline():
        outputs = dali.fn.readers.tfrecord(**args, shard_id=shard_id, num_shards=NUM_PIPELINES,
                                           random_shuffle=False, name="reader")
        return tuple(outputs[name] for name in sorted(args["features"]))

    pipe = pipeline()
    pipe.build()
    epoch = pipe.reader_meta("reader")["epoch_size"]
    share = epoch * (shard_id + 1) // NUM_PIPELINES - epoch * shard_id // NUM_PIPELINES
    records: dict[str, list[np.ndarray]] = {name: [] for name in sorted(args["features"])}
    for _ in range(-(-share // BATCH)):
        for name, batch in zip(sorted(args["features"]), pipe.run(), strict=True):
            records[name].extend(np.array(batch[i]) for i in range(len(batch)))
    return {name: values[:share] for name, values in records.items()}  # the last batch wraps around


@pytest.mark.ecosystem
@pytest.mark.parametrize("split", ["train", "test"])
def test_dali_reads_every_record_equal_to_read_numpy_on_two_shard_ids(dali_dataset, split):
    args = dali_reader_args(dali_dataset, split=split)
    parts = [_dali_records(args, shard_id) for shard_id in range(NUM_PIPELINES)]
    dali = {name: [v for part in parts for v in part[name]] for name in args["features"]}
    expected = list(read_numpy(dali_dataset, split=split))
    assert len(dali["count"]) == len(expected) == load_manifest(dali_dataset).split(split).num_records
    for i, example in enumerate(expected):
        for name in ("count", "score", "label", "box"):
            np.testing.assert_array_equal(dali[name][i], example[name])
        for name in _BYTES_FEATURES:  # DALI gives bytes as uint8 arrays; tensors are their raw bytes
            value = example[name]
            raw = value if isinstance(value, bytes) else value.astype(value.dtype.newbyteorder("<")).tobytes()
            assert dali[name][i].tobytes() == raw, (split, i, name)
        assert dali["ids"][i].tolist() == example["ids"].tolist()  # absent (empty) lists too
    assert "tags" not in args["features"]  # a VarList of strings: DALI has no such feature


def test_a_feature_dali_cannot_parse_is_refused_by_name(dali_dataset):
    with pytest.raises(ReaderError) as err:
        dali_reader_args(dali_dataset, features=["count", "tags"])
    assert str(err.value) == ("feature 'tags': DALI's tfrecord reader has no variable-length string features "
                              "('Tensors of strings are not supported')")


@pytest.mark.parametrize("compression, file_format, expected", [
    pytest.param(Compression.GZIP, FileFormat.TFRECORD,
                 "dali_index: a DALI index gives offsets in the file as stored, and DALI reads uncompressed TFRecord "
                 "files only; these shards are GZIP-compressed (use --compression none)", id="gzip"),
    pytest.param(Compression.NONE, FileFormat.ARRAY_RECORD,
                 "dali_index: DALI reads TFRecord files; array_record shards are not a sequence of framed records "
                 "(use --file_format tfrecord)", id="array_record"),
])
def test_shards_that_cannot_have_an_index_are_refused(tmp_path, compression, file_format, expected):
    with pytest.raises(WriterOptionError) as err:
        DatasetDescription(schema=SCHEMA, compression=compression, file_format=file_format, dali_index=True)
    assert str(err.value) == expected


def test_a_dataset_without_indexes_is_refused_by_the_reader_args(tfrecord_dataset):
    with pytest.raises(ReaderError, match="written without DALI indexes; build it again with --dali_index"):
        dali_reader_args(tfrecord_dataset)
    assert all(s.dali_index is None for s in load_manifest(tfrecord_dataset).shards)
    assert "dali_index" not in json.dumps(_manifest_json(tfrecord_dataset))  # left out: older versions read it


def _manifest_json(dataset: str) -> dict:
    with open(os.path.join(dataset, "manifest.json")) as handle:
        return json.load(handle)


@pytest.mark.parametrize("damage, expected", [
    pytest.param(lambda m: m["splits"][0]["shards"][1].__setitem__("dali_index", "../other.idx"),
                 "manifest field 'splits[0].shards[1].dali_index': expected 'data-train.tfrecord-00001-of-",
                 id="another-name"),
    pytest.param(lambda m: m["splits"][1]["shards"][0].pop("dali_index"),
                 "manifest field 'splits[1].shards[0].dali_index': expected a DALI index, as the other shards "
                 "list one, got None", id="one-missing"),
    pytest.param(lambda m: m.__setitem__("compression", "GZIP") or [
        s.__setitem__("filename", s["filename"] + ".gz") or s.__setitem__("dali_index", s["filename"] + ".idx")
        for split in m["splits"] for s in split["shards"]],
                 "manifest field 'splits[0].shards[0].dali_index': expected no DALI index (a DALI index gives "
                 "offsets in the file as stored", id="compressed"),
])
def test_the_manifest_checks_the_indexes_it_lists(dali_dataset, damage, expected):
    data = _manifest_json(dali_dataset)
    assert Manifest.from_json(data).shards[0].dali_index == data["splits"][0]["shards"][0]["dali_index"]
    damage(data)
    with pytest.raises(ManifestError) as err:
        Manifest.from_json(data)
    assert str(err.value).startswith(expected)


def test_verify_checks_every_index_against_its_shard(dali_dataset, tmp_path):
    assert verify_dataset(dali_dataset).num_records == load_manifest(dali_dataset).num_written
    copy = shutil.copytree(dali_dataset, tmp_path / "copy")
    shard = load_manifest(str(copy)).shards[1]
    index = copy / str(shard.dali_index)
    first, rest = index.read_bytes().split(b"\n", 1)
    index.write_bytes(first.replace(b" ", b" 1") + b"\n" + rest)  # one size off
    with pytest.raises(CorruptShardError) as err:
        verify_dataset(str(copy))
    assert str(err.value) == (f"shard {str(index)!r}: the DALI index differs from the {shard.num_records} records of "
                              f"{shard.filename} (offset and size per record)")
    index.unlink()
    with pytest.raises(MissingShardError, match=str(index)):
        verify_dataset(str(copy))

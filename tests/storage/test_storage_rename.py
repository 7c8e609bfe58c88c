"""storage.rename between local filesystems: a temp_dir on another disk than the output.

The publish step moves the shards from the writer's temp_dir into the output folder by rename;
with the temp_dir on another filesystem that rename used to fail at the very end of the job
(``OSError: [Errno 18] Invalid cross-device link``)."""

from __future__ import annotations

import os
import tempfile

import apache_beam as beam
import pytest

from beam_tfrecord import DType, Sample, Scalar, Schema, WriterTuning, WriteTFRecordDataset, read_numpy, storage

OTHER_FILESYSTEM = "/dev/shm"


def _on_another_filesystem(path: str) -> bool:
    return os.path.isdir(OTHER_FILESYSTEM) and os.stat(OTHER_FILESYSTEM).st_dev != os.stat(path).st_dev


def test_a_rename_across_filesystems_copies_over_the_destination_then_deletes_the_source(tmp_path):
    if not _on_another_filesystem(str(tmp_path)):
        pytest.fail(f"{OTHER_FILESYSTEM} is not another filesystem than {tmp_path} here: the case cannot be made")
    with tempfile.TemporaryDirectory(dir=OTHER_FILESYSTEM) as other:
        source = os.path.join(other, "shard")
        expected = os.urandom(3 << 20)
        with open(source, "wb") as handle:
            handle.write(expected)
        destination = tmp_path / "out" / "shard"
        destination.parent.mkdir()
        destination.write_bytes(b"old")
        storage.rename([source], [str(destination)])
        assert destination.read_bytes() == expected and not os.path.exists(source)
        assert os.listdir(destination.parent) == ["shard"]  # no temporary name left behind


def test_a_dataset_whose_temp_dir_is_on_another_filesystem_is_published(tmp_path):
    if not _on_another_filesystem(str(tmp_path)):
        pytest.fail(f"{OTHER_FILESYSTEM} is not another filesystem than {tmp_path} here: the case cannot be made")
    out = str(tmp_path / "ds")
    with tempfile.TemporaryDirectory(dir=OTHER_FILESYSTEM) as other:
        temp_dir = os.path.join(other, "temp")
        with beam.Pipeline(argv=["--runner=DirectRunner"]) as pipeline:
            _ = (pipeline | beam.Create([Sample(f"k{i}", {"x": i}) for i in range(50)])
                 | WriteTFRecordDataset(out, schema=Schema({"x": Scalar(DType.INT64)}),
                                        tuning=WriterTuning(temp_dir=temp_dir)))
        assert not os.path.exists(temp_dir)  # deleted once published
    assert sorted(int(example["x"]) for example in read_numpy(out)) == list(range(50))

"""WriteBalancedTFRecord under a Beam file_path_prefix: WriteToTFRecord's signature and file names, the manifest
where no PREFIX-* glob sees it, every reader opening the dataset from the prefix, and typed refusals up front."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.testing import test_stream

from beam_tfrecord import WriteBalancedTFRecord, load_manifest, read_dataset, read_numpy, verify_dataset
from beam_tfrecord.cli import main as cli_main
from beam_tfrecord.core import proto
from beam_tfrecord.errors import OutputPathError, ShardingError, UnboundedInputError, WriterOptionError

NUM_RECORDS = 120


def _example(i: int) -> tf.train.Example:
    example = tf.train.Example()
    example.features.feature["id"].int64_list.value.append(i)
    example.features.feature["text"].bytes_list.value.append(b"x" * (i % 37))
    return example


def _write(records, writer: WriteBalancedTFRecord) -> None:
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(records, reshuffle=False) | writer


def _ids(path: str, split: str = "train") -> list[int]:
    return sorted(int(e["id"]) for e in read_numpy(path, split=split))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    """Examples through ProtoCoder, WriteToTFRecord's arguments given positionally, into a folder that
    already holds a file named as the prefix (as Beam's own tests have it)."""
    folder = tmp_path_factory.mktemp("prefix")
    (folder / "result").write_text("a file named as the prefix")
    prefix = str(folder / "result")
    _write([_example(i) for i in range(NUM_RECORDS)],
           WriteBalancedTFRecord(prefix, beam.coders.ProtoCoder(tf.train.Example), ".tfrecord", 3))
    return prefix


def test_shards_take_beams_names_beside_the_prefix_and_the_manifest_hides_from_its_glob(built):
    folder = Path(built).parent
    shards = [f"result-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert sorted(os.listdir(folder)) == [".result.beam-tfrecord", "result", *shards]
    assert sorted(os.listdir(folder / ".result.beam-tfrecord")) == ["manifest.json", "statistics.pb"]
    assert sorted(glob.glob(built + "-*")) == [str(folder / s) for s in shards]
    assert sorted(glob.glob(str(folder / "*"))) == [built, *[str(folder / s) for s in shards]]
    manifest = load_manifest(built)
    assert [s.filename for s in manifest.shards] == shards
    assert manifest.shard_naming is not None and manifest.shard_naming.suffix == ".tfrecord"
    assert max(s.num_record_bytes for s in manifest.shards) - min(s.num_record_bytes for s in manifest.shards) < 200


def test_every_reader_opens_it_from_the_prefix_or_the_manifest(built, capsys):
    manifest_path = str(Path(built).parent / ".result.beam-tfrecord" / "manifest.json")
    assert _ids(built) == _ids(manifest_path) == list(range(NUM_RECORDS))
    assert verify_dataset(built).num_records == verify_dataset(manifest_path).num_records == NUM_RECORDS
    records = [r.numpy() for r in tf.data.TFRecordDataset(sorted(glob.glob(built + "-*")))]
    assert sorted(proto.Example.FromString(r).features.feature["id"].int64_list.value[0] for r in records) == \
        list(range(NUM_RECORDS))
    assert cli_main(["inspect", built]) in (0, None)
    assert "result-00000-of-00003.tfrecord" in capsys.readouterr().out


def test_writing_the_prefix_again_replaces_its_shards_and_refuses_another_jobs_files(built):
    folder = Path(built).parent
    _write([_example(i) for i in range(10)], WriteBalancedTFRecord(file_path_prefix=built, num_shards=2,
                                                                   file_name_suffix=".tfrecord"))
    assert sorted(glob.glob(built + "-*")) == [f"{built}-0000{i}-of-00002.tfrecord" for i in range(2)]
    assert _ids(built) == list(range(10))
    (folder / "result-00000-of-00007.tfrecord").write_bytes(b"another job's")
    with pytest.raises(OutputPathError, match=r"1 file\(s\) another job wrote take the names of its shards \(.*"
                                              r"result-00000-of-00007.tfrecord\)") as info:
        WriteBalancedTFRecord(built, file_name_suffix=".tfrecord")
    assert info.value.path == str(folder / "result-00000-of-00007.tfrecord")


def test_a_prefix_whose_folder_is_a_file_is_refused_before_the_pipeline(tmp_path):
    (tmp_path / "result").write_text("")
    with pytest.raises(OutputPathError, match="its folder '.*/result' is a file") as info:
        WriteBalancedTFRecord(str(tmp_path / "result" / "part"))
    assert info.value.path == str(tmp_path / "result")


def test_raw_payloads_are_written_byte_for_byte_and_splits_go_into_names(tmp_path):
    prefix = str(tmp_path / "raw")
    payloads = [f"payload {i}".encode() for i in range(40)]
    _write(payloads, WriteBalancedTFRecord(prefix, num_shards=2, splits="train=0.5,test=0.5", compression_type="gzip"))
    names = sorted(os.path.basename(p) for p in glob.glob(prefix + "-*"))
    assert names == [f"raw-{split}-0000{i}-of-00002" for split in ("test", "train") for i in range(2)]
    written = [r.numpy() for r in tf.data.TFRecordDataset(glob.glob(prefix + "-*"), compression_type="GZIP")]
    assert sorted(written) == sorted(payloads)
    read = [e["record"] for split in ("train", "test") for e in read_numpy(prefix, split=split)]
    assert sorted(read) == sorted(payloads)  # whole: verbatim payloads are not parsed as Examples
    batches = read_dataset(prefix, split="test", batch_size=64)
    assert sorted(r for batch in batches for r in batch["record"].numpy().tolist()) == sorted(
        e["record"] for e in read_numpy(prefix, split="test"))


@pytest.mark.parametrize("args, options, error, message", [
    ((), {}, WriterOptionError, "give file_path_prefix .* or output_dir"),
    (("/tmp/x",), dict(output_dir="/tmp/y"), WriterOptionError, "give file_path_prefix"),
    ((3,), {}, WriterOptionError, "file_path_prefix must be a str, got 3"),
    (("/tmp/never/",), {}, WriterOptionError, "file_path_prefix must end in a file name"),
    (("/tmp/never/a b",), {}, WriterOptionError, "file_path_prefix: prefix 'a b'"),
    (("/tmp/never/r",), dict(file_name_suffix="/x"), WriterOptionError, "file_name_suffix: suffix '/x'"),
    (("/tmp/never/r",), dict(shard_name_template="-NN"), WriterOptionError, "shard_name_template: .*one run of 'S'"),
    (("/tmp/never/r",), dict(shard_name_template="", num_shards=3), WriterOptionError, "num_shards: .* 3"),
    (("/tmp/never/r",), dict(coder="bytes"), WriterOptionError, "coder must be a beam.coders.Coder"),
    (("/tmp/never/r",), dict(compression_type="bzip2"), WriterOptionError, "compression_type must be"),
    (("/tmp/never/r",), dict(file_name_suffix=".bz2"), WriterOptionError, "'auto' gives 'bzip2'"),
    (("/tmp/never/r",), dict(triggering_frequency=-1), WriterOptionError, "triggering_frequency must be"),
    (("/tmp/never/r",), dict(dali_index=True), WriterOptionError, "^dali_index: beside a file_path_prefix"),
    (("/tmp/never/r",), dict(num_shards=-2), ShardingError, "num_shards must be an int >= 0"),
    ((), dict(output_dir="/tmp/never", file_name_suffix=".gz"), WriterOptionError, "name files under a file_path"),
], ids=["neither", "both", "prefix-not-str", "prefix-a-folder", "prefix-not-plain", "suffix", "template",
        "one-file-many-shards", "coder", "bzip2", "auto-bzip2", "triggering", "dali", "negative-shards", "dir-suffix"])
def test_bad_arguments_are_value_errors_naming_the_argument(args, options, error, message):
    with pytest.raises(error, match=message) as info:
        WriteBalancedTFRecord(*args, **options)
    assert isinstance(info.value, ValueError)


def test_a_window_template_is_refused_for_a_bounded_input_and_a_global_stream_needs_a_frequency(tmp_path):
    writer = WriteBalancedTFRecord(str(tmp_path / "r"), shard_name_template="-W-SSSSS-of-NNNNN")
    with pytest.raises(WriterOptionError, match="W and V name the windows of a streaming write"):
        _ = beam.Pipeline() | beam.Create([b"x"]) | writer
    stream = beam.Pipeline() | test_stream.TestStream().add_elements([b"a"])
    with pytest.raises(WriterOptionError, match="triggering_frequency: an unbounded input in the global window"):
        _ = stream | WriteBalancedTFRecord(str(tmp_path / "r"), shard_name_template="-W-SSSSS-of-NNNNN")
    stream = beam.Pipeline() | test_stream.TestStream().add_elements([b"a"])
    with pytest.raises(UnboundedInputError):  # a dataset directory takes a bounded input only
        _ = stream | WriteBalancedTFRecord(output_dir=str(tmp_path / "d"))

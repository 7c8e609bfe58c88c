"""What the writers take as input, from a Beam user's side (issue 30): windowed and unbounded
PCollections, Beam's own DaskRunner, empty input, and records the writer cannot place as asked.

Each case is one that ``beam.io.WriteToTFRecord`` handles (or refuses) in a way a Beam user
relies on; the writers must do as well, or refuse with this project's typed error.
"""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from beam_tfrecord import (
    DType,
    Scalar,
    Schema,
    ShardingConfig,
    TFRecordIterableDataset,
    WriteBalancedTFRecord,
    WriterTuning,
    WriteTFRecordDataset,
    load_manifest,
    read_dataset,
    read_numpy,
    verify_dataset,
)
from beam_tfrecord.beam.write import FanIn
from beam_tfrecord.core import proto
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.describe import describe_manifest
from beam_tfrecord.errors import RejectedSamplesError, UnboundedInputError, WriterOptionError
from pipelines.common import job_pipeline

SCHEMA = Schema({"id": Scalar(DType.INT64)})


def _example(i: int) -> bytes:
    example = proto.Example()
    example.features.feature["id"].int64_list.value.append(i)
    return example.SerializeToString(deterministic=True)


def _in_windows(pipeline: beam.Pipeline, values: list) -> beam.PCollection:
    """``values`` spread over three 60-second fixed windows (a bounded input in non-global windows)."""
    return (pipeline
            | beam.Create([TimestampedValue(v, 60 * (i % 3)) for i, v in enumerate(values)], reshuffle=False)
            | beam.WindowInto(FixedWindows(60)))


def _ids(out: str) -> list[int]:
    return sorted(int(e["id"]) for e in read_numpy(out))


@pytest.mark.parametrize("fan_in", [FanIn.SPILL, FanIn.SHUFFLE], ids=["spill", "shuffle"])
def test_write_balanced_takes_a_windowed_input_as_one_dataset(tmp_path, fan_in):
    # Beam 2.77 failed at run time in GatherRuns/Read (spill) or Gather/Read (shuffle): Invalid PaneInfoEncoding.
    out = str(tmp_path / "ds")
    with beam.Pipeline() as pipeline:
        _ = (_in_windows(pipeline, [_example(i) for i in range(30)])
             | WriteBalancedTFRecord(output_dir=out, tuning=WriterTuning(fan_in=fan_in)))
    assert _ids(out) == list(range(30))
    assert load_manifest(out).num_written == 30


@pytest.mark.parametrize("fan_in", [FanIn.SPILL, FanIn.SHUFFLE], ids=["spill", "shuffle"])
def test_write_dataset_takes_a_windowed_input_as_one_dataset(tmp_path, fan_in):
    out = str(tmp_path / "ds")
    with beam.Pipeline() as pipeline:
        _ = (_in_windows(pipeline, [Sample(f"k{i}", {"id": i}) for i in range(30)])
             | WriteTFRecordDataset(out, schema=SCHEMA, tuning=WriterTuning(fan_in=fan_in)))
    assert _ids(out) == list(range(30))


@pytest.mark.parametrize("make_writer, name", [
    (lambda out: WriteBalancedTFRecord(output_dir=out), "WriteBalancedTFRecord"),
], ids=["balanced"])  # WriteTFRecordDataset commits each pane of Samples as a version (tests/streaming)
def test_an_unbounded_input_is_a_typed_error_when_the_pipeline_is_built(tmp_path, make_writer, name):
    pipeline = beam.Pipeline(options=PipelineOptions(["--streaming"]))
    stream = pipeline | "Stream" >> test_stream.TestStream().add_elements([b"a"]) | beam.WindowInto(FixedWindows(60))
    with pytest.raises(UnboundedInputError) as caught:
        _ = stream | make_writer(str(tmp_path / "never"))
    assert str(caught.value) == (
        f"{name} is a batch writer: it writes one dataset of its whole input, which must be bounded; its input "
        "'WindowInto(WindowIntoFn)' is unbounded (a streaming source). Give it a bounded source: files, a table, "
        "or a bounded read of the stream (e.g. ReadFromKafka(max_num_records=...)). To write a stream, write it "
        "under a Beam prefix: WriteBalancedTFRecord(file_path_prefix, triggering_frequency=SECONDS) commits each "
        "window's pane (docs/streaming.md).")
    assert isinstance(caught.value, WriterOptionError)


def test_a_user_pipeline_on_beams_dask_runner_runs_on_the_fixed_one(tmp_path, dask_address):
    from apache_beam.runners.dask.dask_runner import DaskRunner as BeamDaskRunner

    from beam_tfrecord.engine.dask_runner import DaskRunner as FixedDaskRunner

    out = str(tmp_path / "ds")
    options = PipelineOptions([f"--dask_client_address={dask_address}"])
    pipeline = beam.Pipeline(runner=BeamDaskRunner(), options=options)
    _ = pipeline | beam.Create([_example(i) for i in range(40)]) | WriteBalancedTFRecord(output_dir=out, num_shards=2)
    assert type(pipeline.runner) is FixedDaskRunner  # swapped when the writer was applied
    result = pipeline.run()
    result.wait_until_finish()
    result.client.close()
    assert _ids(out) == list(range(40))
    assert [s.num_records > 0 for s in load_manifest(out).shards] == [True, True]
    assert sorted(os.listdir(out)) == sorted(["manifest.json", "dataset_info.json", "features.json",
                                              "croissant.json", "schema.pbtxt", "statistics.pb",
                                              "data-train.tfrecord-00000-of-00002",
                                              "data-train.tfrecord-00001-of-00002"])


def _unnameable(kind: str) -> bytes:
    """A valid record whose feature names no schema can hold."""
    if kind == "empty-name":
        example = proto.Example()
        example.features.feature[""].int64_list.value.append(1)
        return example.SerializeToString()
    sequence = proto.SequenceExample()
    sequence.context.feature["id"].int64_list.value.append(1)
    sequence.feature_lists.feature_list["id"].feature.add().int64_list.value.append(2)
    return sequence.SerializeToString()


@pytest.mark.parametrize("kind, message", [
    ("empty-name", "feature '': expected a feature name a schema can hold (non-empty, one kind of feature), "
                   "got an empty feature name"),
    ("context-and-list", "feature 'id': expected a feature name a schema can hold (non-empty, one kind of "
                         "feature), got the name of both a context feature and a feature list"),
])
def test_a_record_whose_feature_names_no_schema_holds_is_a_dead_letter(tmp_path, kind, message):
    # Was: the whole job failed with RecordSchemaError at publication, whatever max_rejected_fraction said.
    out = str(tmp_path / "ds")
    with job_pipeline(PipelineOptions([])) as pipeline:
        _ = (pipeline | beam.Create([_unnameable(kind)] + [_example(i) for i in range(20)], reshuffle=False)
             | WriteBalancedTFRecord(output_dir=out, max_rejected_fraction=0.1))
    manifest = load_manifest(out)
    assert (manifest.num_inputs, manifest.num_written, manifest.num_rejected) == (21, 20, 1)
    assert manifest.schema == SCHEMA
    with open(os.path.join(out, manifest.dead_letters)) as handle:
        (line,) = handle.read().splitlines()
    assert message in line and '"stage": "validate"' in line


def test_the_rejection_hint_names_the_python_argument(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(RejectedSamplesError) as caught, job_pipeline(PipelineOptions([])) as pipeline:
        _ = (pipeline | beam.Create([_unnameable("empty-name")] + [_example(i) for i in range(20)])
             | WriteBalancedTFRecord(output_dir=out))
    assert "1 of 21 input samples were rejected" in str(caught.value)
    assert str(caught.value).endswith("(Allow skipping with max_rejected_fraction=0.0477 or more.)")  # 1/21 rounded up


def _id_of(record: bytes) -> int:
    return proto.Example.FromString(record).features.feature["id"].int64_list.value[0]


def _read_by_every_reader(out: str, split: str) -> dict[str, list[int]]:
    """The ids each reader reads from ``split``: tf.data and Beam on the shards' glob (no manifest),
    and this project's three readers."""
    import glob

    import tensorflow as tf
    from apache_beam.testing.util import assert_that, equal_to

    pattern = os.path.join(out, f"data-{split}.tfrecord-*")
    ids = sorted(int(e["id"]) for e in read_numpy(out, split=split))
    read = {"tf.data": sorted(_id_of(r.numpy()) for r in tf.data.TFRecordDataset(sorted(glob.glob(pattern))))}
    with beam.Pipeline() as pipeline:  # was: "No files found based on the file pattern" for no shard file
        assert_that(pipeline | beam.io.ReadFromTFRecord(pattern) | beam.Map(_id_of), equal_to(ids))
    read["read_numpy"] = ids
    read["read_dataset"] = sorted(int(i) for batch in read_dataset(out, split=split, batch_size=8)
                                  for i in batch["id"].numpy())
    read["torch"] = sorted(int(e["id"]) for e in TFRecordIterableDataset(out, split=split))
    return read


@pytest.fixture(scope="module")
def empty_build(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("empty") / "ds")
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([], reshuffle=False)
             | WriteBalancedTFRecord(output_dir=out, num_shards=4, splits="train=0.8,test=0.2"))
    return out


def test_empty_input_writes_num_shards_empty_files_per_split_as_write_to_tfrecord_does(empty_build, tmp_path):
    beams = str(tmp_path / "beam")
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create([], reshuffle=False) | beam.io.WriteToTFRecord(beams + "/data", num_shards=4)
    assert len(os.listdir(beams)) == 4
    manifest = load_manifest(empty_build)
    assert [(s.split, s.index, s.num_records, s.num_bytes) for s in manifest.shards] == [
        (split, i, 0, 0) for split in ("train", "test") for i in range(4)]
    assert all(os.path.getsize(os.path.join(empty_build, s.filename)) == 0 for s in manifest.shards)
    assert verify_dataset(empty_build).num_records == 0
    assert "(4 of its 4 shards are empty files: the split has no record)" in describe_manifest(manifest, "x")


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_reader_reads_an_empty_dataset_as_no_record(empty_build, split):
    assert _read_by_every_reader(empty_build, split) == {name: [] for name in ("tf.data", "read_numpy",
                                                                               "read_dataset", "torch")}


def test_tfds_loads_an_empty_dataset_and_refuses_to_read_an_empty_split_as_it_always_does(empty_build):
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(empty_build)
    assert builder.info.splits["train"].shard_lengths == [0, 0, 0, 0]
    assert builder.info.splits["train"].num_examples == 0
    with pytest.raises(ValueError, match="corresponds to no data"):  # TFDS's own rule, for any empty split
        builder.as_dataset(split="train")


@pytest.mark.parametrize("fan_in", [FanIn.SPILL, FanIn.SHUFFLE], ids=["spill", "shuffle"])
def test_a_record_larger_than_a_shards_share_leaves_num_shards_files_the_others_empty_and_says_so(
        tmp_path, fan_in, caplog):
    # Was: one shard file, silently, for num_shards=4.
    import tensorflow_datasets as tfds

    out = str(tmp_path / "ds")
    big = proto.Example()
    big.features.feature["id"].int64_list.value.append(7)
    big.features.feature["blob"].bytes_list.value.append(bytes(5_000))
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([big.SerializeToString()])
             | WriteBalancedTFRecord(output_dir=out, num_shards=4, target_shard_bytes=1_000,
                                       tuning=WriterTuning(fan_in=fan_in)))
    manifest = load_manifest(out)
    assert [(s.index, s.num_records) for s in manifest.shards] == [(0, 1), (1, 0), (2, 0), (3, 0)]
    note = "3 of its 4 shards are empty files: 1 record cannot fill 4 shards (a shard holds whole records)"
    assert f"split train: {note}" in caplog.text
    assert f"({note})" in describe_manifest(manifest, out)
    assert list(_read_by_every_reader(out, "train").values()) == [[7]] * 4
    assert [int(e["id"]) for e in tfds.as_numpy(tfds.builder_from_directory(out).as_dataset(split="train"))] == [7]


def test_array_record_shards_planned_empty_are_read_as_no_record(tmp_path):
    out = str(tmp_path / "ds")
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([Sample(f"k{i}", {"id": i}) for i in range(2)])
             | WriteTFRecordDataset(out, schema=SCHEMA, file_format=FileFormat.ARRAY_RECORD,
                                    sharding=ShardingConfig(num_shards=4)))
    manifest = load_manifest(out)
    assert [s.num_records for s in manifest.shards] == [1, 1, 0, 0]
    assert sorted(int(e["id"]) for e in read_numpy(out, shuffle=True)) == [0, 1]  # random access, global shuffle
    assert verify_dataset(out).num_records == 2
    import tensorflow_datasets as tfds

    source = tfds.builder_from_directory(out).as_data_source(split="train")
    assert sorted(int(source[i]["id"]) for i in range(len(source))) == [0, 1]


def test_the_progress_display_waits_only_for_the_shards_that_hold_records(tmp_path):
    from beam_tfrecord.job.progress import read_progress

    progress = tmp_path / "progress"
    progress.mkdir()
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([Sample("k0", {"id": 0})])
             | WriteTFRecordDataset(str(tmp_path / "ds"), schema=SCHEMA, sharding=ShardingConfig(num_shards=4),
                                    tuning=WriterTuning(progress_dir=str(progress))))
    counts = read_progress(str(progress))
    assert (counts.shards_written, counts.num_shards_planned) == (1, 1)  # not 1 of 4: no ETA left at the end


def test_a_job_s_summary_says_why_num_shards_left_shards_empty(tmp_path, capsys):
    import numpy as np

    from pipelines import build_from_arrays

    np.savez(tmp_path / "rows.npz", x=np.arange(3, dtype=np.int64))
    out = str(tmp_path / "out")
    build_from_arrays.run(["--arrays", str(tmp_path / "rows.npz"), "--output", out, "--num_shards", "5",
                           "--progress", "none"])
    assert "(2 of its 5 shards are empty files: 3 records cannot fill 5 shards (a shard holds whole records))" in (
        capsys.readouterr().out)
    assert len([name for name in os.listdir(out) if ".tfrecord-" in name]) == 5

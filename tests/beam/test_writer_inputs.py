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

from beam_tfrecord import DType, Scalar, Schema, WriteBalancedTFRecord, WriteTFRecordDataset, load_manifest, read_numpy
from beam_tfrecord.beam.write import FanIn
from beam_tfrecord.core import proto
from beam_tfrecord.core.samples import Sample
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
        _ = _in_windows(pipeline, [_example(i) for i in range(30)]) | WriteBalancedTFRecord(out, fan_in=fan_in)
    assert _ids(out) == list(range(30))
    assert load_manifest(out).num_written == 30


@pytest.mark.parametrize("fan_in", [FanIn.SPILL, FanIn.SHUFFLE], ids=["spill", "shuffle"])
def test_write_dataset_takes_a_windowed_input_as_one_dataset(tmp_path, fan_in):
    out = str(tmp_path / "ds")
    with beam.Pipeline() as pipeline:
        _ = (_in_windows(pipeline, [Sample(f"k{i}", {"id": i}) for i in range(30)])
             | WriteTFRecordDataset(out, schema=SCHEMA, fan_in=fan_in))
    assert _ids(out) == list(range(30))


@pytest.mark.parametrize("make_writer, name", [
    (lambda out: WriteBalancedTFRecord(out), "WriteBalancedTFRecord"),
    (lambda out: WriteTFRecordDataset(out, schema=SCHEMA), "WriteTFRecordDataset"),
], ids=["balanced", "dataset"])
def test_an_unbounded_input_is_a_typed_error_when_the_pipeline_is_built(tmp_path, make_writer, name):
    pipeline = beam.Pipeline(options=PipelineOptions(["--streaming"]))
    stream = pipeline | "Stream" >> test_stream.TestStream().add_elements([b"a"]) | beam.WindowInto(FixedWindows(60))
    with pytest.raises(UnboundedInputError) as caught:
        _ = stream | make_writer(str(tmp_path / "never"))
    assert str(caught.value) == (
        f"{name} is a batch writer: it writes one dataset of its whole input, which must be bounded; its input "
        "'WindowInto(WindowIntoFn)' is unbounded (a streaming source). Give it a bounded source: files, a table, "
        "or a bounded read of the stream (e.g. ReadFromKafka(max_num_records=...)). To write a stream, window it "
        "(beam.WindowInto(FixedWindows(...))), land each window in files (beam.io.fileio.WriteToFiles), and run "
        "this writer as a batch job over each window's files.")
    assert isinstance(caught.value, WriterOptionError)


def test_a_user_pipeline_on_beams_dask_runner_runs_on_the_fixed_one(tmp_path, dask_address):
    from apache_beam.runners.dask.dask_runner import DaskRunner as BeamDaskRunner

    from beam_tfrecord.beam.dask_runner import DaskRunner as FixedDaskRunner

    out = str(tmp_path / "ds")
    options = PipelineOptions([f"--dask_client_address={dask_address}"])
    pipeline = beam.Pipeline(runner=BeamDaskRunner(), options=options)
    _ = pipeline | beam.Create([_example(i) for i in range(40)]) | WriteBalancedTFRecord(out, num_shards=2)
    assert type(pipeline.runner) is FixedDaskRunner  # swapped when the writer was applied
    result = pipeline.run()
    result.wait_until_finish()
    result.client.close()
    assert _ids(out) == list(range(40))
    assert [s.num_records > 0 for s in load_manifest(out).shards] == [True, True]
    assert sorted(os.listdir(out)) == sorted(["manifest.json", "dataset_info.json", "features.json",
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
             | WriteBalancedTFRecord(out, max_rejected_fraction=0.1))
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
             | WriteBalancedTFRecord(out))
    assert "1 of 21 input samples were rejected" in str(caught.value)
    assert str(caught.value).endswith("(Allow skipping with max_rejected_fraction=0.0477 or more.)")  # 1/21 rounded up

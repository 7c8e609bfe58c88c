"""What a streaming write refuses before any work (issue 62), and the per-window names a manifest accepts."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger, window

from beam_tfrecord import WriteBalancedTFRecord
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.manifest import Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.naming import PrefixShardNames
from beam_tfrecord.core.schema import DType, Scalar, Schema
from beam_tfrecord.engine import traits_of_name
from beam_tfrecord.errors import ManifestError, ShardNameError, StreamingRunnerError, WriterOptionError


def _stream(pipeline: beam.Pipeline) -> beam.PCollection:
    return pipeline | test_stream.TestStream().add_elements([b"a"])


def test_a_runner_that_cannot_stream_is_refused_before_any_work(tmp_path):
    from apache_beam.runners.dask.dask_runner import DaskRunner

    assert traits_of_name("DaskRunner").streams is False and traits_of_name("DirectRunner").streams is True
    pipeline = beam.Pipeline(runner=DaskRunner())
    with pytest.raises(StreamingRunnerError, match="^the DaskRunner cannot run a streaming pipeline") as caught:
        _ = _stream(pipeline) | WriteBalancedTFRecord(str(tmp_path / "out"), triggering_frequency=5)
    assert caught.value.runner == "DaskRunner" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("windowing, writer_options, message", [
    (None, dict(shard_name_template="-SSSSS"), "shard_name_template '-SSSSS': an unbounded input .* needs the window"),
    (None, dict(triggering_frequency=5, duplicates="report"), "^duplicates: an unbounded input"),
    (beam.WindowInto(window.FixedWindows(5), trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                     accumulation_mode=trigger.AccumulationMode.ACCUMULATING, allowed_lateness=60),
     {}, "AccumulationMode.ACCUMULATING.*would publish the records of the window's earlier panes again"),
], ids=["template-without-window", "duplicates", "accumulating"])
def test_a_stream_the_writer_cannot_commit_pane_by_pane_is_refused(tmp_path, windowing, writer_options, message):
    stream = _stream(beam.Pipeline(options=PipelineOptions(["--streaming"])))
    if windowing is not None:
        stream = stream | windowing
    with pytest.raises(WriterOptionError, match=message):
        _ = stream | WriteBalancedTFRecord(str(tmp_path / "out"), **writer_options)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("names, window, filename", [
    (PrefixShardNames("out", "-W-SSSSS-of-NNNNN", ".tfrecord"), "[1614556800.0, 1614556805.0)",
     "out-[1614556800.0, 1614556805.0)-00001-of-00002.tfrecord"),
    (PrefixShardNames("out", "-V-SSSSS-of-NNNNN"), "[2021-03-01T00-00-00, 2021-03-01T00-01-00)-pane1",
     "out-[2021-03-01T00-00-00, 2021-03-01T00-01-00)-pane1-00001-of-00002"),
], ids=["W", "V-late-pane"])
def test_a_window_template_formats_and_parses_beams_names(names, window, filename):
    assert names.windowed and names.format("train", 1, 2, window=window) == filename
    assert names.parse_windowed(filename) == (None, window, 1, 2)
    with pytest.raises(ShardNameError, match="needs a window's text"):
        names.format("train", 1, 2)
    with pytest.raises(ShardNameError, match="is not a shard name"):
        names.parse_windowed(filename.replace(", ", ",/"))


def _manifest_json(windows: list[tuple[str, int, int]]) -> dict:
    names = PrefixShardNames("out", "-W-SSSSS-of-NNNNN")
    shards = tuple(ShardInfo(names.format("train", index, count, window=text), "train", position, 1, 19, 19,
                             "00000000") for position, (text, index, count) in enumerate(windows))
    manifest = Manifest(dataset_name="data", schema=Schema({"record": Scalar(DType.BYTES)}),
                        splits=(SplitInfo("train", shards),), compression=Compression.NONE,
                        created_at="2026-11-28T00:00:00+00:00", tool_version="0", command=(),
                        num_inputs=len(shards), num_rejected=0, dead_letters=None, salt="s", sharding={},
                        shard_naming=names)
    return json.loads(manifest.dumps())


def test_a_manifest_numbers_each_panes_shards_apart():
    panes = [("[0.0, 5.0)", 0, 2), ("[0.0, 5.0)", 1, 2), ("[5.0, 10.0)", 0, 1), ("[0.0, 5.0)-pane1", 0, 1)]
    assert len(Manifest.from_json(_manifest_json(panes)).shards) == 4
    with pytest.raises(ManifestError, match="a file no other shard of the split lists"):
        Manifest.from_json(_manifest_json([("[0.0, 5.0)", 0, 2), ("[0.0, 5.0)", 0, 2)]))
    with pytest.raises(ManifestError, match="a shard count of 2"):
        Manifest.from_json(_manifest_json([("[0.0, 5.0)", 0, 2), ("[0.0, 5.0)", 1, 3)]))

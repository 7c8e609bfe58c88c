"""The writer's encoding pool: how many processes encode, and what happens when one dies.

Byte-identity of the pool's output with one process is in tests/test_determinism.py (mode
"encode-pool"); kill safety of a whole job with its pool in tests/test_kill_safety.py.
"""

import os
import signal
import socket
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import DType, Sample, Scalar, Schema, WriteTFRecordDataset
from beam_tfrecord.beam import encode_pool
from beam_tfrecord.beam.encode_pool import available_cores
from beam_tfrecord.beam.runners import encode_processes_for
from beam_tfrecord.errors import EncodePoolError, WriterOptionError

SCHEMA = Schema({"id": Scalar(DType.INT64)})


@pytest.mark.parametrize("flags, requested, expected", [
    pytest.param([], None, None, id="no-options-every-core"),
    pytest.param(["--runner=DirectRunner"], None, None, id="direct-runner-named-every-core"),
    pytest.param(["--direct_num_workers=1"], None, 1, id="direct-num-workers-1-respected"),
    pytest.param(["--direct_num_workers=2", "--direct_running_mode=multi_processing"], None, 1,
                 id="beam-multi-processing-chosen"),
    pytest.param(["--direct_running_mode=multi_threading"], None, 1, id="beam-multi-threading-chosen"),
    pytest.param(["--runner=DataflowRunner"], None, 1, id="another-runner-untouched"),
    pytest.param(["--runner=PortableRunner"], None, 1, id="portable-runner-untouched"),
    pytest.param(["--direct_num_workers=1"], 3, 3, id="explicit-request-wins"),
])
def test_encode_processes_follow_the_users_runner_options(flags, requested, expected):
    assert encode_processes_for(PipelineOptions(flags), requested=requested, flags=flags) == expected


def test_a_users_pipeline_with_beam_parallelism_options_keeps_them():
    """Without the command line, options that differ from Beam's defaults still count as chosen."""
    options = PipelineOptions([])
    options.view_as(beam.options.pipeline_options.DirectOptions).direct_num_workers = 4
    assert encode_processes_for(options, requested=None) == 1


def test_every_core_is_this_process_affinity():
    assert available_cores() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("processes", [0, -2])
def test_encode_processes_below_one_is_an_option_error(processes, tmp_path):
    with pytest.raises(WriterOptionError, match="encode_processes must be >= 1"):
        WriteTFRecordDataset(str(tmp_path), schema=SCHEMA, encode_processes=processes)


def test_a_pool_process_that_dies_fails_the_build_and_publishes_nothing(tmp_path):
    out = str(tmp_path / "out")

    def die_in_the_pool(value):
        if os.getpid() != test_pid:  # in a pool process: killed as an out-of-memory killer would
            os.kill(os.getpid(), signal.SIGKILL)
        return value

    test_pid = os.getpid()
    samples = [[Sample(f"k{c}-{i}", {"id": c * 100 + i}) for i in range(100)] for c in range(4)]
    with pytest.raises(Exception) as raised:
        with beam.Pipeline(argv=["--runner=DirectRunner"]) as pipeline:
            _ = (pipeline | beam.Create(samples)
                 | WriteTFRecordDataset(out, schema=SCHEMA, encode_processes=2,
                                        feature_transforms={"id": die_in_the_pool}))
    assert "EncodePoolError" in repr(raised.value) or isinstance(raised.value, EncodePoolError)
    assert "exited (code -9)" in str(raised.value)
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def _build(out: str, samples: list[list[Sample]], processes: int) -> dict[str, bytes]:
    with beam.Pipeline(argv=["--runner=DirectRunner"]) as pipeline:
        _ = pipeline | beam.Create(samples) | WriteTFRecordDataset(out, schema=SCHEMA, encode_processes=processes)
    return {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))
            if name.startswith("data-")}


def test_the_pool_works_under_a_default_socket_timeout(tmp_path):
    """Beam's GCS auth calls socket.setdefaulttimeout(60): the pool's sockets must stay blocking
    (a socket with a timeout is non-blocking underneath; reads failed with EAGAIN)."""
    samples = [[Sample(f"k{c}-{i}", {"id": c * 100 + i}) for i in range(100)] for c in range(4)]
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(60)
    try:
        pooled = _build(str(tmp_path / "pool"), samples, processes=2)
    finally:
        socket.setdefaulttimeout(previous)
    assert pooled and pooled == _build(str(tmp_path / "one"), samples, processes=1)


def _processes_started(samples: list[list[Sample]], out: str, transforms: dict) -> int:
    pipeline = beam.Pipeline(argv=["--runner=DirectRunner"])
    _ = pipeline | beam.Create(samples) | WriteTFRecordDataset(out, schema=SCHEMA, feature_transforms=transforms)
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(beam.metrics.MetricsFilter().with_name("encode_processes_started"))["counters"]
    return sum(counter.committed or 0 for counter in counters)


@pytest.mark.skipif(available_cores() < 2, reason="the automatic pool needs two cores")
def test_the_automatic_pool_starts_only_where_encoding_outweighs_pickling(tmp_path, monkeypatch):
    """Cheap rows cost about as much to pickle as to encode: they stay in the runner's process.
    Samples whose transform costs milliseconds (as decoding and resizing an image does) go to the pool."""
    monkeypatch.setattr(encode_pool, "POOL_AFTER_SECONDS", 0.05)
    samples = [[Sample(f"k{c}-{i}", {"id": c * 100 + i}) for i in range(100)] for c in range(40)]

    def slow(value):
        time.sleep(0.002)
        return value

    assert _processes_started(samples, str(tmp_path / "cheap"), {}) == 0
    assert _processes_started(samples[:4], str(tmp_path / "costly"), {"id": slow}) == available_cores()

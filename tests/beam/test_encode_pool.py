"""The writer's explicit encoding pool (``encode_processes=N``): its output, and what happens when a process dies.

Byte-identity of the pool's output with one process is in tests/test_determinism.py (mode
"encode-pool"); kill safety of a whole job with its pool in tests/test_kill_safety.py.
"""

import os
import signal
import socket

import apache_beam as beam
import pytest

from beam_tfrecord import DType, Sample, Scalar, Schema, WriterTuning, WriteTFRecordDataset
from beam_tfrecord.errors import EncodePoolError, WriterOptionError

SCHEMA = Schema({"id": Scalar(DType.INT64)})


@pytest.mark.parametrize("processes", [0, -2])
def test_encode_processes_below_one_is_an_option_error(processes, tmp_path):
    with pytest.raises(WriterOptionError, match="encode_processes must be >= 1"):
        WriterTuning(encode_processes=processes)


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
                 | WriteTFRecordDataset(out, schema=SCHEMA, tuning=WriterTuning(encode_processes=2),
                                        feature_transforms={"id": die_in_the_pool}))
    assert "EncodePoolError" in repr(raised.value) or isinstance(raised.value, EncodePoolError)
    assert "exited (code -9)" in str(raised.value)
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def _build(out: str, samples: list[list[Sample]], processes: int) -> dict[str, bytes]:
    with beam.Pipeline(argv=["--runner=DirectRunner"]) as pipeline:
        _ = (pipeline | beam.Create(samples)
             | WriteTFRecordDataset(out, schema=SCHEMA, tuning=WriterTuning(encode_processes=processes)))
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

"""``WriterTuning``: checked once when made, errors naming the field and the value; no Beam needed to make one.

That its fields leave the bytes as they are is checked where each one acts (``tests/test_determinism.py``,
``tests/beam/test_shards_reread.py``, ``tests/beam/test_shard_pieces.py``, ``tests/engine/test_local_workers.py``).
"""

import dataclasses
import subprocess
import sys

import pytest

from beam_tfrecord import DType, FanIn, Scalar, Schema, WriteBalancedTFRecord, WriterTuning, WriteTFRecordDataset
from beam_tfrecord.errors import WriterOptionError

SCHEMA = Schema({"id": Scalar(DType.INT64)})


@pytest.mark.parametrize("fields, message", [
    pytest.param({"spill_run_bytes": 0}, "spill_run_bytes must be >= 1, got 0", id="empty-runs"),
    pytest.param({"spill_run_bytes": "64MiB"}, "spill_run_bytes must be an int, got '64MiB'", id="runs-as-text"),
    pytest.param({"reread_min_bytes": -1}, "reread_min_bytes must be >= 0, got -1", id="negative-reread"),
    pytest.param({"encode_processes": True}, "encode_processes must be an int, got True", id="processes-as-bool"),
    pytest.param({"local_workers": 0}, "local_workers must be >= 1, got 0", id="no-local-workers"),
    pytest.param({"shard_writers": 0}, "shard_writers must be >= 1, got 0", id="no-shard-writers"),
    pytest.param({"min_piece_bytes": 0}, "min_piece_bytes must be >= 1, got 0", id="empty-pieces"),
    pytest.param({"fan_in": "spill"}, "fan_in must be a FanIn, got 'spill'", id="fan-in-as-text"),
    pytest.param({"direct_io": "no"}, "direct_io must be a bool, got 'no'", id="direct-io-as-text"),
    pytest.param({"temp_dir": ""}, "temp_dir must be a directory path or None, got ''", id="empty-temp-dir"),
])
def test_a_bad_field_is_an_option_error_naming_it_and_its_value(fields, message):
    with pytest.raises(WriterOptionError) as raised:
        WriterTuning(**fields)
    assert str(raised.value) == message


def test_it_is_a_value():
    tuning = WriterTuning(fan_in=FanIn.SPILL, shard_writers=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tuning.shard_writers = 3  # type: ignore[misc]
    assert tuning == WriterTuning(fan_in=FanIn.SPILL, shard_writers=2)
    assert (tuning.shard_phase.writers, tuning.shard_phase.min_piece_bytes) == (2, tuning.min_piece_bytes)


@pytest.mark.parametrize("make", [
    pytest.param(lambda tuning: WriteTFRecordDataset("/tmp/never-written", schema=SCHEMA, tuning=tuning), id="dataset"),
    pytest.param(lambda tuning: WriteBalancedTFRecord("/tmp/never-written", tuning=tuning), id="balanced"),
])
def test_the_writers_take_only_a_writer_tuning(make):
    with pytest.raises(WriterOptionError, match=r"^tuning must be a WriterTuning, got \{'shard_writers': 2\}$"):
        make({"shard_writers": 2})


def test_an_old_keyword_argument_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="spill_run_bytes"):
        WriteTFRecordDataset("/tmp/never-written", schema=SCHEMA, spill_run_bytes=1 << 20)  # type: ignore[call-arg]


def test_making_one_needs_no_beam():
    code = ("import sys, beam_tfrecord; beam_tfrecord.WriterTuning(fan_in=beam_tfrecord.FanIn.parse('spill')); "
            "assert 'apache_beam' not in sys.modules, 'Beam was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)

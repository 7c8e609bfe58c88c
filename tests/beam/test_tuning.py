"""``WriterTuning`` and the writer's other groups (``WriterChecks``, ``WriterProvenance``): checked once when
made, errors naming the field and the value; no Beam needed to make one; a keyword that moved names its new home.

That its fields leave the bytes as they are is checked where each one acts (``tests/test_determinism.py``,
``tests/beam/test_shards_reread.py``, ``tests/beam/test_shard_pieces.py``, ``tests/engine/test_local_workers.py``).
"""

import dataclasses
import inspect
import subprocess
import sys

import pytest

from beam_tfrecord import (
    DatasetDescription,
    DType,
    FanIn,
    Scalar,
    Schema,
    SplitConfig,
    WriteBalancedTFRecord,
    WriterChecks,
    WriterProvenance,
    WriterTuning,
    WriteTFRecordDataset,
)
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


@pytest.mark.parametrize("make, message", [
    pytest.param(lambda: WriteTFRecordDataset("/tmp/never-written", schema=SCHEMA, dataset_name="d", resume=True),
                 "WriteTFRecordDataset() no longer takes dataset_name, resume: pass dataset_name as "
                 "description=DatasetDescription(name=...); resume as provenance=WriterProvenance(resume=...)",
                 id="description-and-provenance"),
    pytest.param(lambda: WriteTFRecordDataset("/tmp/never-written", schema=SCHEMA, duplicates="report"),
                 "WriteTFRecordDataset() no longer takes duplicates: pass duplicates as "
                 "checks=WriterChecks(duplicates=...)", id="checks"),
    pytest.param(lambda: WriterTuning(statistics=False),
                 "WriterTuning() no longer takes statistics: pass statistics as DatasetDescription(statistics=...)",
                 id="tuning-statistics"),
])
def test_a_keyword_that_moved_is_a_type_error_naming_its_new_home(make, message):
    with pytest.raises(TypeError) as raised:
        make()
    assert str(raised.value) == message


def test_the_writer_takes_at_most_twelve_parameters_and_its_shorthands_or_a_description():
    assert len(inspect.signature(WriteTFRecordDataset).parameters) <= 12
    description = DatasetDescription(schema=SCHEMA, name="d")
    WriteTFRecordDataset("/tmp/never-written", description=description)  # made, nothing written
    with pytest.raises(WriterOptionError, match=r"^give \['schema', 'splits'\] in description=DatasetDescription"):
        WriteTFRecordDataset("/tmp/never-written", description=description, schema=SCHEMA,
                             splits=SplitConfig.single())
    with pytest.raises(WriterOptionError, match=r"^give the dataset's description=DatasetDescription\(schema=...\)"):
        WriteTFRecordDataset("/tmp/never-written")


@pytest.mark.parametrize("make, message", [
    pytest.param(lambda: WriterChecks(max_rejected_fraction=1.5), "max_rejected_fraction must be in [0, 1], got 1.5",
                 id="fraction"),
    pytest.param(lambda: WriterChecks(split_key_fn="user"), "split_key_fn must be callable (a sample -> its group), "
                 "got 'user'", id="split-key"),
    pytest.param(lambda: WriterProvenance(expected_inputs=-1), "expected_inputs must be >= 0, got -1", id="inputs"),
    pytest.param(lambda: WriterProvenance(command="build"), "command must be a sequence of arguments (text), "
                 "got 'build'", id="command-as-text"),
])
def test_the_other_groups_name_a_bad_field(make, message):
    with pytest.raises(WriterOptionError) as raised:
        make()
    assert str(raised.value) == message


def test_making_one_needs_no_beam():
    code = ("import sys, beam_tfrecord; beam_tfrecord.WriterTuning(fan_in=beam_tfrecord.FanIn.parse('spill')); "
            "assert 'apache_beam' not in sys.modules, 'Beam was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)

"""The import paths users and configurations name keep working when modules move (issue 44)."""

from __future__ import annotations

import importlib

import pytest

import beam_tfrecord

# (module, name): paths that README, docs, deploy files or users' configurations name.
NAMED_PATHS = [
    ("beam_tfrecord.beam.dask_runner", "DaskRunner"),  # --runner beam_tfrecord.beam.dask_runner.DaskRunner
    ("beam_tfrecord.engine.dask_runner", "DaskRunner"),  # its home since issue 59
    ("beam_tfrecord.remote_reads", "RemoteReads"),
    ("beam_tfrecord.beam.write", "WriteTFRecordDataset"),
    ("beam_tfrecord.beam.write", "FanIn"),
    ("beam_tfrecord.beam.write_balanced", "WriteBalancedTFRecord"),
    ("beam_tfrecord.storage", "list_files"),
]


@pytest.mark.parametrize(("module", "name"), NAMED_PATHS, ids=[f"{m}.{n}" for m, n in NAMED_PATHS])
def test_a_named_path_imports(module, name):
    value = getattr(importlib.import_module(module), name)
    if name in beam_tfrecord.__all__:
        assert value is getattr(beam_tfrecord, name)


@pytest.mark.parametrize("name", beam_tfrecord.__all__)
def test_every_public_name_resolves(name):
    assert getattr(beam_tfrecord, name) is not None

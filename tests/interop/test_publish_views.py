"""Publication and the files for other tools: DALI indexes move with their shards (also when publication
runs again after a crash), and a dataset rebuilt in place keeps no stale index or view."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from beam_tfrecord import (
    DatasetDescription,
    DType,
    Scalar,
    Schema,
    WriterChecks,
    WriterProvenance,
    load_manifest,
    verify_dataset,
)
from beam_tfrecord.beam.publish import PublishSettings, _move_shards, publish
from beam_tfrecord.beam.spill_path import WriteShardFromRunsFn
from beam_tfrecord.core.cut_planner import plan_dataset
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.framing import FRAMING_BYTES, iter_records
from beam_tfrecord.core.runs import RunIndex, SpilledRun
from beam_tfrecord.core.samples import DeadLetter
from tests.beam.test_idempotent_steps import SCHEMA, SHARDING, SPLITS, _rows, _spill_bundle


def _index_of(path: str) -> bytes:
    """A shard's DALI index made by reading it (what DALI's tfrecord2idx does)."""
    lines, offset = [], 0
    with open(path, "rb") as handle:
        for record in iter_records(handle, name=path):
            lines.append(f"{offset} {len(record) + FRAMING_BYTES}\n")
            offset += len(record) + FRAMING_BYTES
    return "".join(lines).encode()


def _settings(tmp_path: Path, *, dali_index: bool, schema: Schema = SCHEMA) -> PublishSettings:
    return PublishSettings(output_dir=str(tmp_path / "ds"), temp_dir=str(tmp_path / "tmp"), run_id="run-1",
                           description=DatasetDescription(schema=schema, name="d", compression=Compression.NONE,
                                                          salt="s", sharding=SHARDING, splits=SPLITS,
                                                          dali_index=dali_index, statistics=False),
                           checks=WriterChecks(max_rejected_fraction=0.01),
                           provenance=WriterProvenance(command=("test",)))


def _shards(tmp_path: Path, *, dali_index: bool):
    out = _spill_bundle(tmp_path / "tmp" / "runs", _rows(400))
    runs = [o for o in out if isinstance(o, SpilledRun)]
    dead = [o for o in out if isinstance(o, DeadLetter)]
    indexes = [RunIndex.from_bytes(r.path, Path(r.index_path).read_bytes()) for r in runs]
    plan = plan_dataset(np.concatenate([i.hashes for i in indexes]), np.concatenate([i.framed_sizes for i in indexes]),
                        SPLITS, SHARDING)
    fn = WriteShardFromRunsFn(SCHEMA, Compression.NONE, {}, dataset_name="d", direct_io=True,
                              shards_dir=str(tmp_path / "tmp" / "shards"), dali_index=dali_index)
    fn.setup()
    return plan, [fn.write_from_runs(spec, runs) for spec in plan.shards], dead


def test_publishing_again_after_a_crash_moves_every_index_once(tmp_path):
    plan, infos, dead = _shards(tmp_path, dali_index=True)
    settings = _settings(tmp_path, dali_index=True)
    _move_shards(settings, infos[:2])  # the first attempt died here: two shards and their indexes moved
    manifest = publish(settings, plan, infos, dead)
    assert verify_dataset(settings.output_dir).num_records == 400 == manifest.num_written
    for shard in load_manifest(settings.output_dir).shards:
        with open(os.path.join(settings.output_dir, str(shard.dali_index)), "rb") as handle:
            assert handle.read() == _index_of(os.path.join(settings.output_dir, shard.filename))
    assert not os.path.exists(settings.temp_dir)


@pytest.mark.parametrize("rebuild", ["without-indexes", "sequence-records"])
def test_a_dataset_rebuilt_in_place_keeps_no_stale_index_or_view(tmp_path, rebuild):
    plan, infos, dead = _shards(tmp_path, dali_index=True)
    first = publish(_settings(tmp_path, dali_index=True), plan, infos, dead)
    out = Path(tmp_path / "ds")
    assert {"croissant.json", "schema.pbtxt", *(s.dali_index for s in first.shards)} <= set(os.listdir(out))
    again = tmp_path / "again"
    plan, infos, dead = _shards(again, dali_index=False)
    schema = SCHEMA if rebuild == "without-indexes" else Schema(
        {}, sequence_features={"id": Scalar(DType.INT64), "text": Scalar(DType.STRING)})
    settings = _settings(again, dali_index=False, schema=schema)
    publish(dataclasses.replace(settings, output_dir=str(out), run_id="run-2"), plan, infos, dead)
    left = set(os.listdir(out))
    assert not any(name.endswith(".idx") for name in left)
    assert ({"croissant.json", "schema.pbtxt"} <= left) == (rebuild == "without-indexes")

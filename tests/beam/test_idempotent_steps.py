"""Every step that writes, executed again (as a runner does after a lost worker or a retried bundle),
gives the same records, no duplicate and no error: spilling a bundle (new run files, the same
entries), writing a shard from runs or from a shuffled group (the same file), and publishing."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from beam_tfrecord import (
    DatasetDescription,
    DType,
    Scalar,
    Schema,
    ShardingConfig,
    SplitConfig,
    WriterChecks,
    WriterProvenance,
    load_manifest,
    verify_dataset,
)
from beam_tfrecord.beam.publish import PublishSettings, _move_shards, publish
from beam_tfrecord.beam.shuffle_path import EncodeToBatchesFn, WriteShardFromGroupFn
from beam_tfrecord.beam.spill_path import EncodeToRunsFn, WriteShardFromRunsFn
from beam_tfrecord.core.cut_planner import plan_dataset
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.runs import RunIndex, SpilledRun
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.core.sharding import DatasetPlan
from beam_tfrecord.errors import CorruptShardError
from beam_tfrecord.spill.resume import FINISHED_SHARD_SUFFIX, REUSED_SHARD_SUFFIX

SCHEMA = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.STRING)})
SPLITS = SplitConfig.parse("train=0.7,test=0.3")
SHARDING = ShardingConfig(target_shard_bytes=4_000)
ENCODE = dict(salt="s", max_record_bytes=SHARDING.cap, feature_transforms={}, reread_min_bytes=0)


def _rows(n: int) -> list[Sample]:
    rows = [Sample(f"row-{i:04d}", {"id": i, "text": "words " * (i % 13)}) for i in range(n)]
    return rows + [Sample("bad", {"id": "seven", "text": "x"})]


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _shard_files(directory: Path) -> dict[str, bytes]:
    """The shard files, without the records a writer keeps beside each (``spill_resume.finished_shard``)."""
    return {name: data for name, data in _files(directory).items()
            if not name.endswith((FINISHED_SHARD_SUFFIX, REUSED_SHARD_SUFFIX))}


def _spill_bundle(runs_dir: Path, rows: list[Sample]) -> list:
    fn = EncodeToRunsFn(SCHEMA, runs_dir=str(runs_dir), run_bytes=3_000, direct_io=True, **ENCODE)
    fn.setup()
    fn.start_bundle()
    out = [*fn.process(rows[:250]), *fn.process(rows[250:])]
    assert fn.finish_bundle() is None  # nothing emitted there: the Dask runner would drop it
    fn.teardown()
    return out


@pytest.fixture()
def spilled(tmp_path: Path) -> tuple[Path, list[SpilledRun], list[DeadLetter], DatasetPlan]:
    runs_dir = tmp_path / "tmp" / "runs"
    out = _spill_bundle(runs_dir, _rows(400))
    runs = [o for o in out if isinstance(o, SpilledRun)]
    dead = [o for o in out if isinstance(o, DeadLetter)]
    indexes = [RunIndex.from_bytes(r.path, Path(r.index_path).read_bytes()) for r in runs]
    plan = plan_dataset(np.concatenate([i.hashes for i in indexes]), np.concatenate([i.framed_sizes for i in indexes]),
                        SPLITS, SHARDING)
    return tmp_path, runs, dead, plan


def _run_contents(runs: list[SpilledRun]) -> list[bytes]:
    return [Path(run.path).read_bytes() for run in runs]


def test_spilling_a_bundle_again_announces_new_runs_with_the_same_entries(spilled) -> None:
    tmp_path, runs, dead, _ = spilled
    runs_dir = tmp_path / "tmp" / "runs"
    before = _files(runs_dir)
    again = _spill_bundle(runs_dir, _rows(400))
    runs_again = [o for o in again if isinstance(o, SpilledRun)]
    # New names (unique to the attempt: only the runs of the attempt the runner kept are read), same bytes.
    assert not {r.path for r in runs_again} & {r.path for r in runs}
    assert _run_contents(runs_again) == _run_contents(runs)
    assert [o for o in again if isinstance(o, DeadLetter)] == dead == [dead[0]] and dead[0].key == "bad"
    assert {k: v for k, v in _files(runs_dir).items() if k in before} == before  # the first attempt untouched
    indexes = [RunIndex.from_bytes(r.path, Path(r.index_path).read_bytes()) for r in runs]
    assert len(before) == 2 * len(runs) and len(runs) > 5 and sum(len(i.hashes) for i in indexes) == 400


def _shard_fn(cls, shards_dir: Path):
    fn = cls(SCHEMA, Compression.GZIP, {}, dataset_name="d", shards_dir=str(shards_dir), direct_io=True)
    fn.setup()
    return fn


def test_writing_a_shard_from_runs_again_gives_the_same_file(spilled) -> None:
    tmp_path, runs, _, plan = spilled
    shards_dir = tmp_path / "tmp" / "shards"
    fn = _shard_fn(WriteShardFromRunsFn, shards_dir)
    first = [fn.write_from_runs(spec, runs) for spec in plan.shards]
    files = _shard_files(shards_dir)
    for record in shards_dir.glob(f"*{FINISHED_SHARD_SUFFIX}"):
        record.unlink()  # written again, not reused (see tests/resume for a shard reused)
    second = [fn.write_from_runs(spec, list(reversed(runs))) for spec in plan.shards]
    assert second == first and _shard_files(shards_dir) == files
    assert sum(info.num_records for info in first) == 400 and len(files) == len(plan.shards) >= 4


def test_writing_a_shuffled_group_again_in_another_order_gives_the_same_file(spilled, tmp_path: Path) -> None:
    _, runs, _, plan = spilled
    from_runs = _shard_fn(WriteShardFromRunsFn, tmp_path / "from-runs")
    expected = {info.filename: info for info in (from_runs.write_from_runs(spec, runs) for spec in plan.shards)}
    encode = EncodeToBatchesFn(SCHEMA, **ENCODE)
    encode.setup()
    entries = [e for batch in encode.process(_rows(400)) for e in batch.entries]
    fn = _shard_fn(WriteShardFromGroupFn, tmp_path / "grouped")
    for attempt in range(2):
        random.Random(attempt).shuffle(entries)
        numbers = plan.shard_numbers(np.array([int.from_bytes(e[:8], "big") for e in entries], dtype=np.uint64))
        for number, spec in enumerate(plan.shards):
            group = [spec] + [e for e, n in zip(entries, numbers.tolist()) if n == number]
            random.Random(number).shuffle(group)  # the spec may come anywhere in the group
            (info,) = fn.process((number, group))
            assert info == expected[info.filename]
    assert _shard_files(tmp_path / "grouped") == _shard_files(tmp_path / "from-runs")


def _settings(tmp_path: Path) -> PublishSettings:
    return PublishSettings(output_dir=str(tmp_path / "ds"), temp_dir=str(tmp_path / "tmp"), run_id="run-1",
                           description=DatasetDescription(schema=SCHEMA, name="d", compression=Compression.GZIP,
                                                          salt="s", sharding=SHARDING, splits=SPLITS,
                                                          statistics=False),
                           checks=WriterChecks(max_rejected_fraction=0.01),
                           provenance=WriterProvenance(command=("test",)))


def test_publishing_again_returns_the_published_manifest_and_changes_nothing(spilled) -> None:
    tmp_path, runs, dead, plan = spilled
    fn = _shard_fn(WriteShardFromRunsFn, tmp_path / "tmp" / "shards")
    infos = [fn.write_from_runs(spec, runs) for spec in plan.shards]
    settings = _settings(tmp_path)
    first = publish(settings, plan, infos, dead)
    files = _files(tmp_path / "ds")
    second = publish(settings, plan, infos, dead)
    assert second == first and _files(tmp_path / "ds") == files
    assert not os.path.exists(settings.temp_dir)
    assert load_manifest(settings.output_dir).run_id == "run-1"
    assert verify_dataset(settings.output_dir).num_records == 400


def test_publishing_again_after_a_crash_between_moving_shards_and_the_manifest(spilled) -> None:
    tmp_path, runs, dead, plan = spilled
    fn = _shard_fn(WriteShardFromRunsFn, tmp_path / "tmp" / "shards")
    infos = [fn.write_from_runs(spec, runs) for spec in plan.shards]
    settings = _settings(tmp_path)
    _move_shards(settings, infos[:2])  # the first attempt died here: two shards moved, no manifest
    assert not os.path.exists(os.path.join(settings.output_dir, "manifest.json"))
    manifest = publish(settings, plan, infos, dead)
    assert verify_dataset(settings.output_dir).num_records == 400 == manifest.num_written
    assert manifest.num_rejected == 1


def test_a_run_index_that_does_not_match_its_run_is_a_corrupt_shard_error(spilled) -> None:
    tmp_path, runs, _, plan = spilled
    run = runs[0]
    data = Path(run.index_path).read_bytes()
    count = (len(data) - 16) // 24
    Path(run.index_path).write_bytes(data[24:])  # one item short, trailer kept
    fn = _shard_fn(WriteShardFromRunsFn, tmp_path / "tmp" / "shards")
    with pytest.raises(CorruptShardError, match=rf"{run.index_path}.*expected {count} index items, "
                                                rf"found {count - 1}"):
        fn.write_from_runs(plan.shards[0], runs)


def test_an_announced_run_whose_bundle_never_finished_is_a_corrupt_shard_error(spilled) -> None:
    tmp_path, runs, _, plan = spilled
    Path(runs[1].index_path).unlink()  # as if its bundle had died before writing it (and was not retried)
    fn = _shard_fn(WriteShardFromRunsFn, tmp_path / "tmp" / "shards")
    with pytest.raises(CorruptShardError, match=rf"{runs[1].index_path}.*announced but its bundle never finished"):
        fn.write_from_runs(plan.shards[0], runs)

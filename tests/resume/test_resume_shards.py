"""A build killed in its shard phase resumes with the shards it finished: each is reused when its file is
exactly what its writer recorded (size and CRC32C) for the shard the plan names again, and written otherwise;
the output is the clean build's bytes, and the manifest counts the shards reused."""

from __future__ import annotations

import dataclasses
import glob
import sys
from pathlib import Path

import pytest
import resume_job
from kills import files_exist, kill_when

from beam_tfrecord import load_manifest, storage
from beam_tfrecord.core.manifest import ShardInfo
from beam_tfrecord.core.sharding import ShardSpec
from beam_tfrecord.spill.resume import (
    FINISHED_SHARD_SUFFIX,
    REUSED_SHARD_SUFFIX,
    TEMP_PREFIX,
    describe_reused_shards,
    finished_shard,
    record_finished_shard,
    with_reused_shards,
)


def _shard_bytes(out: str) -> dict[str, bytes]:
    return {s.filename: Path(out, s.filename).read_bytes() for s in load_manifest(out).shards}


def test_a_build_killed_in_its_shard_phase_reuses_the_shards_it_finished(tmp_path: Path) -> None:
    clean, out = str(tmp_path / "clean"), str(tmp_path / "ds")
    resume_job.build(clean, resume=False, seconds=0.0, shard_bytes=resume_job.SHARD_PHASE_BYTES)
    kill_when([sys.executable, resume_job.__file__, out, "--shards"],
              files_exist(f"{out}/{TEMP_PREFIX}*/shards/*{FINISHED_SHARD_SUFFIX}"),
              seconds=180, poll=0.01, cwd=tmp_path)
    assert not Path(out, "manifest.json").exists()
    finished = len(glob.glob(f"{out}/{TEMP_PREFIX}*/shards/*{FINISHED_SHARD_SUFFIX}"))
    assert 0 < finished < len(load_manifest(clean).shards)

    resumed = resume_job.build(out, resume=True, seconds=0.0, shard_bytes=resume_job.SHARD_PHASE_BYTES)
    assert resumed["reused_shards"] == finished  # every finished shard, and only those, kept as it was
    assert resumed["reused_records"] == resume_job.NUM_SAMPLES  # the kill came after the last run
    assert _shard_bytes(out) == _shard_bytes(clean)
    assert not glob.glob(f"{out}/{TEMP_PREFIX}*")


SPEC = ShardSpec(split="train", index=0, count=2, hash_lo=0, hash_hi=2**63, num_records=2, num_record_bytes=40)


@pytest.fixture
def shard(tmp_path: Path) -> tuple[str, ShardInfo]:
    """A shard file and the record its writer made once it was complete."""
    path = tmp_path / "shards" / "data-train.tfrecord-00000-of-00002"
    path.parent.mkdir()
    path.write_bytes(b"x" * 40)
    crc32c, size = storage.crc32c_and_size(str(path))
    info = ShardInfo(filename=path.name, split="train", index=0, num_records=2, num_bytes=size,
                     num_record_bytes=40, crc32c=crc32c)
    record_finished_shard(str(path), SPEC, info)
    return str(path), info


def test_a_finished_shard_is_reused_and_marked(shard: tuple[str, ShardInfo]) -> None:
    path, info = shard
    assert finished_shard(path, SPEC) == info
    assert Path(path + REUSED_SHARD_SUFFIX).exists()
    temp_dir = str(Path(path).parent.parent)
    assert with_reused_shards({"resumed": {"from_run": "r"}, "other": 1}, temp_dir) == {
        "resumed": {"from_run": "r", "reused_shards": 1}, "other": 1}
    assert with_reused_shards({"other": 1}, temp_dir) == {"other": 1}  # not a resumed build
    assert describe_reused_shards({"resumed": {"reused_shards": 1}}) == (
        "  1 shard(s) the killed build finished were reused as they were")
    assert describe_reused_shards({"resumed": {"reused_shards": 0}}) is None


@pytest.mark.parametrize("damage", ["cut", "one byte changed", "planned otherwise", "no record", "bad record",
                                    "no shard file"])
def test_a_shard_not_exactly_as_recorded_is_written_again(shard: tuple[str, ShardInfo], damage: str) -> None:
    path, _ = shard
    spec = SPEC
    if damage == "cut":
        Path(path).write_bytes(b"x" * 39)
    elif damage == "one byte changed":
        Path(path).write_bytes(b"x" * 39 + b"y")
    elif damage == "planned otherwise":
        spec = dataclasses.replace(SPEC, hash_hi=2**62)
    elif damage == "no record":
        Path(path + FINISHED_SHARD_SUFFIX).unlink()
    elif damage == "no shard file":  # the record outlived its shard (a temp folder cleaned by hand, a lost file)
        Path(path).unlink()
    else:
        Path(path + FINISHED_SHARD_SUFFIX).write_text('{"spec": {}}')
    assert finished_shard(path, spec) is None
    assert not Path(path + REUSED_SHARD_SUFFIX).exists()


@pytest.fixture(scope="module")
def one_writer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The clean build of ``resume_job --pieces`` by one writer, made once for both moments."""
    clean = str(tmp_path_factory.mktemp("one-writer") / "clean")
    resume_job.build(clean, resume=False, seconds=0.0, shard_bytes=resume_job.PIECES_SHARD_BYTES)
    return clean


@pytest.mark.parametrize("moment", [
    pytest.param("pieces/*.piece-*", id="killed-while-writing-pieces"),
    pytest.param("*train*-of-00001", id="killed-while-joining-them"),  # the train shard's file: made by its join
])
def test_a_build_killed_while_writing_or_joining_pieces_resumes_to_the_one_writer_bytes(tmp_path: Path, moment: str,
                                                                                         one_writer: str) -> None:
    clean, out = one_writer, str(tmp_path / "ds")
    kill_when([sys.executable, resume_job.__file__, out, "--pieces"],
              files_exist(f"{out}/{TEMP_PREFIX}*/shards/{moment}"), seconds=180, poll=0.005, cwd=tmp_path)
    assert not Path(out, "manifest.json").exists()

    resume_job.build(out, resume=True, seconds=0.0, shard_bytes=resume_job.PIECES_SHARD_BYTES, shard_writers=2)
    assert _shard_bytes(out) == _shard_bytes(clean)
    assert [dataclasses.asdict(s) for s in load_manifest(out).shards] == [
        dataclasses.asdict(s) for s in load_manifest(clean).shards]
    assert not glob.glob(f"{out}/{TEMP_PREFIX}*")

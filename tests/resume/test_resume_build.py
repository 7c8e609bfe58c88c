"""A build killed at any moment resumes from the spill runs it finished: it encodes only the samples those runs
do not hold, says what it reused (summary line, manifest metadata) and writes the clean build's bytes. A
resume against other inputs or options is refused, and finished runs are told from cut ones and duplicates."""

from __future__ import annotations

import glob
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import resume_job
from kills import files_exist, kill_when

from beam_tfrecord import WriterProvenance, WriterTuning, load_manifest
from beam_tfrecord.core.runs import INDEX_SUFFIX, RunIndex, make_record_entry, write_run
from beam_tfrecord.errors import ResumeMismatchError, WriterOptionError
from beam_tfrecord.spill.resume import (
    RESUME_FILENAME,
    TEMP_PREFIX,
    find_resume_point,
    finished_runs,
    read_reused_hashes,
    skipped,
)


def _shard_bytes(out: str) -> dict[str, bytes]:
    return {s.filename: Path(out, s.filename).read_bytes() for s in load_manifest(out).shards}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = str(tmp_path_factory.mktemp("clean") / "ds")
    resume_job.build(out, resume=False, seconds=0.0)
    return _shard_bytes(out)


def _finished_records(out: str) -> int:
    """Records held by the finished runs (index present, data complete) of the killed build in ``out``."""
    return sum(len(index.hashes) for index in finished_runs(out))


# A pause of 1.9 s into about 4 s of encoding; the kill at the first finished run (no pause) is
# test_the_job_resumes_with_resume_and_says_what_it_reused's.
@pytest.mark.parametrize("seed", [2])
def test_a_build_killed_at_a_random_moment_resumes_with_the_clean_bytes(clean, tmp_path: Path, seed: int) -> None:
    out = str(tmp_path / "ds")
    kill_when([sys.executable, resume_job.__file__, out], files_exist(f"{out}/{TEMP_PREFIX}*/runs/*{INDEX_SUFFIX}"),
              pause=random.Random(seed).uniform(0.0, 2.0), cwd=tmp_path)  # somewhere in encoding (about 4 s of it)
    assert not Path(out, "manifest.json").exists()
    finished = _finished_records(out)
    assert 0 < finished < resume_job.NUM_SAMPLES

    resumed = resume_job.build(out, resume=True)
    assert resumed["reused_records"] == finished  # encoded again: exactly the samples no finished run holds
    assert resumed["reused_runs"] >= 1
    assert _shard_bytes(out) == clean
    assert load_manifest(out).num_inputs == resume_job.NUM_SAMPLES
    assert not glob.glob(f"{out}/{TEMP_PREFIX}*")  # the taken-over folder went at publication


def test_resume_without_a_killed_build_is_a_clean_build(clean, tmp_path: Path) -> None:
    out = str(tmp_path / "ds")
    assert resume_job.build(out, resume=True, seconds=0.0) == {}
    assert _shard_bytes(out) == clean


def _killed_build(out: Path, fingerprint: str, runs: dict[str, list[int]], *, cut: str | None = None) -> Path:
    """A killed build's temp folder: ``resume.json`` and runs of record entries (key hashes given)."""
    temp = out / f"{TEMP_PREFIX}abc123"
    (temp / "runs").mkdir(parents=True)
    (temp / RESUME_FILENAME).write_text(fingerprint)
    for name, hashes in runs.items():
        entries = sorted(make_record_entry(h, b"r%d" % h) for h in hashes)
        path = temp / "runs" / name
        with path.open("wb") as handle:
            write_run(handle, entries)
        Path(f"{path}{INDEX_SUFFIX}").write_bytes(RunIndex.of_entries(str(path), entries).to_bytes())
        if name == cut:
            path.write_bytes(path.read_bytes()[:-3])
    return temp


def test_finished_runs_are_kept_cut_ones_and_duplicates_left_out(tmp_path: Path) -> None:
    temp = _killed_build(tmp_path, "same", {"a-00000.run": [5, 1], "a-00001.run": [9], "b-00000.run": [1, 7],
                                            "c-00000.run": [3]}, cut="c-00000.run")
    (temp / "runs" / "d-00000.run").write_bytes(b"no index: the kill came before it")
    point = find_resume_point(str(tmp_path), "same")
    assert point is not None
    assert [Path(r.path).name for r in point.runs] == ["a-00000.run", "a-00001.run"]  # b repeats hash 1
    assert (point.num_records, point.runs_left_out, point.run_id) == (3, 1, "abc123")
    assert read_reused_hashes(point.hashes_path).tolist() == [1, 5, 9]
    assert skipped(np.array([1, 2, 9, 10], np.uint64), read_reused_hashes(point.hashes_path)).tolist() == [
        True, False, True, False]


def test_a_killed_build_of_other_inputs_or_options_is_refused(tmp_path: Path) -> None:
    temp = _killed_build(tmp_path, "then", {"a-00000.run": [1]})
    with pytest.raises(ResumeMismatchError) as raised:
        find_resume_point(str(tmp_path), "now")
    assert str(raised.value) == (
        f"cannot resume in {str(tmp_path)!r}: the killed build in {str(temp)!r} was made from other inputs or "
        "options (files added, changed or removed since, or another schema, split, sharding, salt or transform); "
        "run without resume for a clean build (its folder is left as it is), or with the inputs and options of "
        "that build")
    assert find_resume_point(str(tmp_path / "elsewhere"), "now") is None


def test_the_build_of_other_options_refuses_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    _killed_build(out, "a fingerprint of other options", {"a-00000.run": [1]})
    with pytest.raises(ResumeMismatchError):
        resume_job.build(str(out), resume=True, seconds=0.0)
    assert not (out / "manifest.json").exists()


def test_resume_needs_what_makes_it_safe(tmp_path: Path) -> None:
    from beam_tfrecord import WriteTFRecordDataset
    from beam_tfrecord.beam.write import FanIn

    with pytest.raises(WriterOptionError, match=r"^resume needs inputs_identity, Sample inputs \(not "
                                                r"WriteBalancedTFRecord's records\), the default temp_dir and the "
                                                r"spill fan-in$"):
        WriteTFRecordDataset(str(tmp_path), schema=resume_job.SCHEMA, provenance=WriterProvenance(resume=True))
    with pytest.raises(WriterOptionError):
        WriteTFRecordDataset(str(tmp_path), schema=resume_job.SCHEMA,
                             provenance=WriterProvenance(resume=True, inputs_identity="x"),
                             tuning=WriterTuning(fan_in=FanIn.SHUFFLE))


def test_the_job_resumes_with_resume_and_says_what_it_reused(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``--resume`` after a SIGKILL of the command: the summary line and the manifest's metadata. The clean
    and the resumed builds run the job's ``run`` on the same arguments in this process (the kill needs one)."""
    from pipelines import build_image_dataset
    from pipelines.make_sample_images import write_sample_images

    images, out, ref = tmp_path / "images", tmp_path / "ds", tmp_path / "ref"
    write_sample_images(str(images), per_class=400, size=64, seed=3)
    args = ["--input", str(images), "--resize", "64x64", "--spill_run_mib=1", "--progress=none",
            "--direct_num_workers=1"]
    build_image_dataset.run([*args, "--output", str(ref)])
    kill_when([sys.executable, "-m", "pipelines.build_image_dataset", *args, "--output", str(out)],
              files_exist(f"{out}/{TEMP_PREFIX}*/runs/*{INDEX_SUFFIX}"))
    finished = _finished_records(str(out))
    capsys.readouterr()
    build_image_dataset.run([*args, "--output", str(out), "--resume"])
    resumed = load_manifest(str(out)).metadata["resumed"]
    assert resumed["reused_records"] == finished > 0
    assert (f"  resumed run {resumed['from_run']}: {finished} records reused from {resumed['reused_runs']} "
            "finished spill runs") in capsys.readouterr().out
    assert _shard_bytes(str(out)) == _shard_bytes(str(ref))

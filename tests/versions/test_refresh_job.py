"""The refresh job end to end (local paths): versions, LATEST, no-op, --force, retention."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from beam_tfrecord.dataset import load_manifest, read_latest, resolve_dataset_dir
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.refresh import RefreshAction, list_versions
from pipelines import refresh_image_dataset
from pipelines.sources import SOURCES, source_named


def _refresh(images: str, root: str, *extra: str):
    return refresh_image_dataset.run(["--input", images, "--dataset_root", root, "--keep_versions=2", *extra])


def test_refresh_builds_skips_rebuilds_and_retains(images: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path / "root")
    first = _refresh(images, root)
    assert first.action is RefreshAction.BUILD and read_latest(root) == first.version_id
    assert verify_dataset(resolve_dataset_dir(root)).num_records == 30

    capsys.readouterr()
    unchanged = _refresh(images, root)
    assert (unchanged.action, unchanged.version_id) == (RefreshAction.SKIP, first.version_id)
    assert "nothing to do" in capsys.readouterr().out
    assert list_versions(root).complete == (first.version_id,)

    Path(images, "square", "0001.jpg").unlink()  # raw data changes
    second = _refresh(images, root)
    assert second.action is RefreshAction.BUILD
    assert load_manifest(root).num_written == 29

    forced = _refresh(images, root, "--force", "--min_version_age=0")  # 0: old versions go at once
    assert forced.action is RefreshAction.BUILD and read_latest(root) == forced.version_id
    assert list_versions(root).complete == (second.version_id, forced.version_id)  # keep_versions=2
    manifest = load_manifest(root)
    assert manifest.metadata["version_id"] == forced.version_id
    assert manifest.command[0] == "refresh_image_dataset" and "--force=True" in manifest.command


def test_refresh_rejects_output_option(images: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _refresh(images, str(tmp_path / "root"), "--output", str(tmp_path / "elsewhere"))
    assert exit_info.value.code == 2
    assert ("python -m pipelines.refresh_image_dataset: --output is not an option of this job: the job writes "
            "ROOT/versions/<id> under --dataset_root itself") in capsys.readouterr().err


@pytest.mark.parametrize("flag, expected", [("--force", True), ("--force=true", True), ("--force=false", False),
                                            ("--keep_versions=2", False)])
def test_force_flag_forms(flag: str, expected: bool) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions

    assert PipelineOptions([flag]).view_as(refresh_image_dataset.RefreshOptions).force is expected


def test_unchanged_run_still_cleans_up_after_a_killed_run(images: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    first = _refresh(images, str(root))
    abandoned = root / "versions" / "20000101T000000.000Z-aaaaaa"  # what a run killed mid-write leaves
    shutil.copytree(first.version_dir, abandoned)
    (abandoned / "manifest.json").unlink()
    (root / "LATEST.tmp-0123456789ab").write_text("garbage")  # killed while moving LATEST
    assert _refresh(images, str(root)).action is RefreshAction.SKIP
    assert list_versions(str(root)).incomplete == ()
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", "versions"]


@pytest.mark.parametrize("source", [s.name for s in SOURCES])
def test_the_quality_options_are_in_the_recorded_command_and_so_the_resume_identity(source: str) -> None:
    """A killed refresh is resumed only by one of the same recorded command: --duplicates and --split_by are in it
    (a resume under another duplicates mode would mix two checks in one version)."""
    from pipelines.common import parse_job
    from pipelines.refresh_driver import recorded_command
    from pipelines.source_jobs import RefreshJob
    from pipelines.sources.spec import spec_of

    entry = source_named(source)
    job, name = RefreshJob(spec_of(entry), "beam-tfrecord refresh"), entry.refresh_job
    argv = ["--dataset_root=/r", "--duplicates=drop", "--duplicates_exclude=path", "--split_by=label"]
    options, _ = parse_job(job.command, argv, prog=name)
    assert recorded_command(options, name, job.option_classes, job.refused) == [
        name, "--dataset_root=/r", "--duplicates=drop", "--duplicates_exclude=path", "--split_by=label"]
    other, _ = parse_job(job.command, ["--dataset_root=/r", "--duplicates=off"], prog=name)
    assert recorded_command(other, name, job.option_classes, job.refused) == [name, "--dataset_root=/r",
                                                                              "--duplicates=off"]
    with pytest.raises(SystemExit) as refused:  # no refresh job hashes images for near duplicates: refused, not ignored
        parse_job(job.command, ["--near_duplicates"], prog=name)
    assert refused.value.code == 2

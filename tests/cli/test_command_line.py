"""What a user meets on the command line: --help, typos refused, every file accounted, progress.

Most cases call the command's ``main`` in this process (its output read from the file descriptors):
a fresh interpreter costs ~3 s of Beam imports and is what the command line is not about. Through a
real process: the console script's top-level help and one typo (its exit code), an unreadable file
(capabilities dropped) and the progress bar (a pseudo-terminal).
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_tty import run_on_tty
from fixtures_gcs import tiny_images  # noqa: F401  (pytest fixture)
from PIL import Image as PILImage

from beam_tfrecord import ImageDecoding, cli, image_format_of, load_manifest, read_numpy
from beam_tfrecord.core.schema import ImageFormat
from beam_tfrecord.describe import SKIPPED_INPUTS_KEY
from pipelines.common import run_as_command
from pipelines.make_sample_images import write_sample_images

BIN = Path(sys.executable).parent
CLI = str(BIN / "beam-tfrecord")


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=300)


def _in_process(capfd: pytest.CaptureFixture[str], *argv: str) -> subprocess.CompletedProcess:
    """``argv`` (``CLI ...`` or ``python -m pipelines.JOB ...``) run by the command's own ``main`` in this
    process, as its console script or ``__main__`` runs it: its exit code, stdout and stderr."""
    capfd.readouterr()  # what earlier steps printed is not the command's
    try:
        if argv[0] == CLI:
            code = cli.main(list(argv[1:]))
        else:
            assert argv[:2] == (sys.executable, "-m"), argv
            job = importlib.import_module(argv[2])
            code = run_as_command(job.run, list(argv[3:]), prog=job.COMMAND.prog)
    except SystemExit as ended:  # --help, or an option refused
        code = ended.code if isinstance(ended.code, int) else 1
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(list(argv), code, out, err)


@pytest.mark.parametrize("command, first_option", [
    ([CLI, "build"], "--input"),
    ([CLI, "build-manifest"], "--manifest"),
    ([CLI, "build-arrays"], "--arrays"),
    ([sys.executable, "-m", "pipelines.build_image_dataset"], "--input"),
    ([sys.executable, "-m", "pipelines.refresh_image_dataset"], "--dataset_root"),
])
def test_help_lists_every_option_by_group_and_points_to_beam(command, first_option, capfd, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps the help as in a process without a terminal
    done = _in_process(capfd, *command, "--help")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    groups = [line for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert {"output and sharding:", "schema checks:", "progress:"} <= set(groups) and "input:" in groups
    for option in (first_option, "--output" if "refresh" not in command[-1] else "--keep_versions",
                   "--target_shard_bytes", "--file_format", "--check_decode", "--progress"):
        assert f"  {option}" in out, option
    assert "aim for shards of this many uncompressed bytes (default: 134217728)" in " ".join(out.split())
    assert "apache_beam.options.pipeline_options.html" in out.replace("\n", "")
    if command[0] == CLI:
        assert out.startswith(f"usage: beam-tfrecord {command[1]} ")


def test_top_level_help_names_each_command():
    done = _run(CLI, "--help")
    assert done.returncode == 0
    for command in ("build", "build-manifest", "build-arrays", "inspect", "verify"):
        assert command in done.stdout


@pytest.mark.parametrize("command, typo, expected, as_process", [
    ([CLI, "build", "--input", "IMGS", "--output", "OUT"], "--taget_shard_bytes=1000",
     "beam-tfrecord build: unknown option --taget_shard_bytes; did you mean --target_shard_bytes?", True),
    ([CLI, "build", "--input", "IMGS", "--output", "OUT"], "--runer=DirectRunner",
     "beam-tfrecord build: unknown option --runer; did you mean --runner?", False),
    ([sys.executable, "-m", "pipelines.refresh_image_dataset", "--input", "IMGS"], "--root=ROOT",
     "python -m pipelines.refresh_image_dataset: unknown option --root; did you mean --dataset_root?", False),
    ([CLI, "build-manifest", "--manifest", "x.csv", "--output", "OUT"], "--frobnicate",
     "beam-tfrecord build-manifest: unknown option --frobnicate", False),
], ids=["console-script-process", "runner", "python-m-refresh", "no-close-option"])
def test_unknown_options_are_refused_with_the_closest_known_one(tmp_path, command, typo, expected, as_process,
                                                                 capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = (subprocess.run([*command, typo], capture_output=True, text=True, timeout=300) if as_process else
            _in_process(capfd, *command, typo))
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == expected
    assert "--help` lists the options" in done.stderr
    assert not (tmp_path / "OUT").exists()


def test_beam_pipeline_options_pass_through(tmp_path, tiny_images, capfd):
    out = tmp_path / "ds"
    done = _in_process(capfd, CLI, "build", "--input", tiny_images, "--output", str(out), "--runner=DirectRunner",
                       "--direct_num_workers=1", "--project=unused-project", "--temp_location=/tmp", "--progress=none")
    assert done.returncode == 0, done.stderr
    assert load_manifest(str(out)).num_written == 30


def _jpeg(path: Path, seed: int) -> None:
    PILImage.fromarray(np.full((12, 10, 3), seed * 11 % 256, np.uint8)).save(path, format="JPEG")


def _png(path: Path, seed: int) -> None:
    PILImage.fromarray(np.full((9, 7, 4), seed * 11 % 256, np.uint8)).save(path, format="PNG")


@pytest.fixture()
def untidy_folder(tmp_path) -> Path:
    """44 JPEGs in two classes, plus a dangling link, a symlink loop (unreadable, even for root),
    a .txt file, a hidden file, a file in the root and one nested too deep."""
    root = tmp_path / "untidy"
    for label in ("cats", "dogs"):
        (root / label).mkdir(parents=True)
        for i in range(22):
            _jpeg(root / label / f"{i:03d}.jpg", i)
    os.symlink(root / "cats" / "missing.jpg", root / "cats" / "dangling.jpg")
    os.symlink(root / "dogs" / "loop-b.jpg", root / "dogs" / "loop-a.jpg")
    os.symlink(root / "dogs" / "loop-a.jpg", root / "dogs" / "loop-b.jpg")
    (root / "dogs" / "notes.txt").write_text("not an image")
    (root / "cats" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (root / "README.md").write_text("a dataset")
    (root / "dogs" / "extra").mkdir()
    _jpeg(root / "dogs" / "extra" / "deep.jpg", 1)
    return root


def test_every_file_is_written_rejected_with_a_reason_or_reported_as_skipped(tmp_path, untidy_folder, capfd):
    out = tmp_path / "ds"
    done = _in_process(capfd, CLI, "build", "--input", str(untidy_folder), "--output", str(out),
                       "--max_rejected_fraction=0.1", "--progress=none")
    assert done.returncode == 0, done.stderr
    manifest = load_manifest(str(out))
    # 44 JPEGs + the dangling link + the two links of the loop: every image file is an input.
    assert (manifest.num_inputs, manifest.num_written, manifest.num_rejected) == (47, 44, 3)
    lines = (out / manifest.dead_letters).read_text().splitlines()
    dead = {json.loads(line)["key"]: json.loads(line) for line in lines}
    assert set(dead) == {"cats/dangling.jpg", "dogs/loop-a.jpg", "dogs/loop-b.jpg"}
    assert {d["stage"] for d in dead.values()} == {"read"}
    assert "No such file or directory" in dead["cats/dangling.jpg"]["message"]
    assert "Too many levels of symbolic links" in dead["dogs/loop-a.jpg"]["message"]
    skipped = manifest.metadata[SKIPPED_INPUTS_KEY]
    assert skipped["count"] == 4
    assert skipped["by_extension"] == {"(none)": 1, ".jpg": 1, ".md": 1, ".txt": 1}  # ".DS_Store" has none
    assert skipped["by_reason"] == {
        "extension is not one of ['.bmp', '.gif', '.jpeg', '.jpg', '.png', '.webp']": 1,
        "hidden file": 1, "nested deeper than ROOT/<label>/<file>": 1,
        "not in a class folder (ROOT/<label>/<file>)": 1}
    assert ("skipped 4 files that are not samples: 1 extension is not one of ['.bmp', '.gif', '.jpeg', '.jpg', "
            "'.png', '.webp']; 1 hidden file; 1 nested deeper than ROOT/<label>/<file>; 1 not in a class folder "
            "(ROOT/<label>/<file>) (extensions: (none) x1, .jpg x1, .md x1, .txt x1)") in done.stdout


def _without_read_override() -> list[str]:
    """A prefix that runs a command unable to read a file its mode forbids. Root reads any file through
    the CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH capabilities, so as root the command runs with those two
    dropped (util-linux's setpriv); any other user is refused already."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    drop = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}"]


def test_a_file_without_read_permission_is_a_dead_letter(tmp_path):
    root = tmp_path / "imgs"
    (root / "a").mkdir(parents=True)
    for i in range(9):
        _jpeg(root / "a" / f"{i}.jpg", i)
    os.chmod(root / "a" / "0.jpg", 0)
    out = tmp_path / "ds"
    done = _run(*_without_read_override(), CLI, "build", "--input", str(root), "--output", str(out),
                "--max_rejected_fraction=0.2", "--progress=none")
    assert done.returncode == 0, done.stderr
    manifest = load_manifest(str(out))
    assert (manifest.num_inputs, manifest.num_written, manifest.num_rejected) == (9, 8, 1)
    [dead] = [json.loads(line) for line in (out / manifest.dead_letters).read_text().splitlines()]
    assert (dead["key"], dead["stage"], dead["error_type"]) == ("a/0.jpg", "read", "SampleReadError")
    assert "Permission denied" in dead["message"], dead["message"]


def test_a_folder_mixing_jpeg_and_png_builds_and_reads_back(tmp_path, capfd):
    root = tmp_path / "mixed"
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(6):
            (_jpeg if i % 2 else _png)(root / label / f"{i}.{'jpg' if i % 2 else 'png'}", i)
    out = tmp_path / "ds"
    done = _in_process(capfd, CLI, "build", "--input", str(root), "--output", str(out), "--progress=none")
    assert done.returncode == 0, done.stderr
    manifest = load_manifest(str(out))
    assert manifest.schema.features["image"].format is ImageFormat.ANY
    assert (manifest.num_written, manifest.num_rejected) == (12, 0)
    encodings = collections.Counter(image_format_of(e["image"]) for e in read_numpy(str(out)))
    assert encodings == {ImageFormat.JPEG: 6, ImageFormat.PNG: 6}  # each record keeps its own encoding
    images = [e["image"] for e in read_numpy(str(out), image_decoding=ImageDecoding(size=(8, 8)))]
    assert len(images) == 12 and all(i.shape == (8, 8, 3) and i.dtype == np.uint8 for i in images)
    import tensorflow as tf

    from beam_tfrecord import read_dataset

    batch = next(iter(read_dataset(str(out), batch_size=12, image_decoding=ImageDecoding(size=(8, 8)))))
    assert batch["image"].shape == (12, 8, 8, 3) and batch["image"].dtype == tf.uint8
    np.testing.assert_array_equal(np.sort(batch["image"].numpy().reshape(12, -1), axis=0),
                                  np.sort(np.stack(images).reshape(12, -1), axis=0))


def test_an_explicit_single_format_still_rejects_the_other_one(tmp_path, capfd):
    root = tmp_path / "mixed"
    (root / "a").mkdir(parents=True)
    _jpeg(root / "a" / "0.jpg", 0)
    _png(root / "a" / "1.png", 1)
    done = _in_process(capfd, CLI, "build", "--input", str(root), "--output", str(tmp_path / "ds"),
                       "--image_format=jpeg")
    assert done.returncode == 1
    assert "a/1.png" in done.stderr and "expected jpeg image bytes" in done.stderr


def test_progress_lines_when_not_a_terminal_leave_the_summary_whole(tmp_path, tiny_images, capfd):
    done = _in_process(capfd, CLI, "build", "--input", tiny_images, "--output", str(tmp_path / "ds"),
                       "--progress=log", "--progress_interval_seconds=0.05")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("progress: ")]
    assert lines, done.stderr
    assert any("30/30 samples (0 rejected) | shards" in line for line in lines)
    assert re.match(r"progress: 30/30 samples \(0 rejected\) \| shards (\d+)/\1 \| ", lines[-1]), lines[-1]
    assert done.stdout.startswith("dataset 'data' at ") and "30 records written" in done.stdout


def test_progress_bar_on_a_terminal_is_cleared_before_the_summary(tmp_path):
    images = tmp_path / "imgs"
    write_sample_images(str(images), per_class=100, size=32, seed=1)  # the bar redraws every 0.25 s
    code, raw = run_on_tty([CLI, "build", "--input", str(images), "--output", str(tmp_path / "ds"),
                            "--target_shard_bytes=100000"])
    text = raw.decode("utf-8", errors="replace")
    assert code == 0, text[-2000:]
    frames = [frame for frame in text.split("\r") if "samples (" in frame]
    assert frames and "/300 samples (0 rejected) | shards " in frames[-1]
    before_summary, summary = text.split("dataset 'data' at ", 1)
    assert before_summary.rstrip(" ").endswith("\r")  # the bar's last frame was blanked out
    assert "300 records written" in summary and "samples (" not in summary

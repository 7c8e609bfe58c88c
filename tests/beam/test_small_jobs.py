"""Small jobs run in one in-memory worker: a job that knows its input is small before building (at
most ``SMALL_JOB_MAX_SAMPLES`` samples in at most ``SMALL_JOB_MAX_INPUT_BYTES``) starts no worker
process, the user's own runner options win, and the summary says which it chose and why.

The suite sets ``BEAM_TFRECORD_LOCAL_WORKERS=1`` (tests/conftest.py); these tests remove it.
"""

import csv

import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.engine.local_workers import (
    LOCAL_WORKERS_ENV,
    SMALL_JOB_MAX_INPUT_BYTES,
    SMALL_JOB_MAX_SAMPLES,
    InputSize,
    LocalWorkersChoice,
    available_cores,
    choose_local_workers,
)
from beam_tfrecord.sources.arrays import count_samples
from pipelines import build_from_arrays, build_from_manifest, build_image_dataset
from pipelines.build_from_manifest import ManifestFormat, rows_at_most
from pipelines.make_sample_images import write_sample_images

SMALL = InputSize(300, 800_000)
SMALL_REASON = (f"a small input: 300 samples, 0.8 MB, at most {SMALL_JOB_MAX_SAMPLES:,} samples and "
                f"{SMALL_JOB_MAX_INPUT_BYTES >> 20} MiB; --direct_num_workers=N to choose")


@pytest.fixture
def default_workers(monkeypatch):
    """The environment of a user who set nothing."""
    monkeypatch.delenv(LOCAL_WORKERS_ENV, raising=False)


@pytest.mark.parametrize("size, small", [
    pytest.param(InputSize(SMALL_JOB_MAX_SAMPLES, SMALL_JOB_MAX_INPUT_BYTES), True, id="at-both-limits"),
    pytest.param(InputSize(SMALL_JOB_MAX_SAMPLES + 1, 1_000), False, id="one-sample-too-many"),
    pytest.param(InputSize(10, SMALL_JOB_MAX_INPUT_BYTES + 1), False, id="one-byte-too-many"),
    pytest.param(InputSize(None, 1_000), False, id="samples-unknown"),
    pytest.param(InputSize(10, None), False, id="bytes-unknown"),
])
def test_a_small_input_is_small_by_both_count_and_bytes(size, small):
    assert size.is_small() is small


@pytest.mark.parametrize("flags, size, expected", [
    pytest.param([], SMALL, LocalWorkersChoice(1, SMALL_REASON), id="small-one-in-memory-worker"),
    pytest.param([], InputSize(SMALL_JOB_MAX_SAMPLES + 1, 1_000),
                 LocalWorkersChoice(available_cores(), "one per core by default"), id="large-every-core"),
    pytest.param([], None, LocalWorkersChoice(available_cores(), "one per core by default"), id="size-unknown"),
    pytest.param(["--direct_num_workers=2", "--direct_running_mode=multi_processing"], SMALL,
                 LocalWorkersChoice(1, "the runner's own options"), id="users-runner-options-win"),
    pytest.param(["--runner=PortableRunner"], SMALL, LocalWorkersChoice(1, "the runner's own options"),
                 id="another-runner-untouched"),
])
def test_the_choice_follows_the_input_size_after_the_users_options(flags, size, expected, default_workers):
    assert choose_local_workers(PipelineOptions(flags), requested=None, flags=flags, input_size=size) == expected


def test_an_explicit_request_and_the_environment_win_over_the_input_size(monkeypatch):
    assert choose_local_workers(PipelineOptions([]), requested=2, input_size=SMALL) == LocalWorkersChoice(2, "as asked")
    monkeypatch.setenv(LOCAL_WORKERS_ENV, "2")
    assert choose_local_workers(PipelineOptions([]), requested=None, input_size=SMALL) == LocalWorkersChoice(
        2, f"${LOCAL_WORKERS_ENV}")


def test_the_image_job_on_a_small_folder_runs_in_one_in_memory_worker_and_says_why(tmp_path, capsys,
                                                                                   default_workers):
    write_sample_images(str(tmp_path / "images"), per_class=10, size=32)
    manifest = build_image_dataset.run(["--input", str(tmp_path / "images"), "--output", str(tmp_path / "out"),
                                        "--progress", "none"])
    assert manifest.num_written == 30
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ran in")]
    assert len(lines) == 1
    assert lines[0].startswith("  ran in this process (1 in-memory DirectRunner worker: a small input: 30 samples, ")
    assert lines[0].endswith(f"at most {SMALL_JOB_MAX_SAMPLES:,} samples and {SMALL_JOB_MAX_INPUT_BYTES >> 20} MiB; "
                             "--direct_num_workers=N to choose)")


def test_the_manifest_and_arrays_jobs_count_their_samples_before_building(tmp_path, capsys, default_workers):
    rows = tmp_path / "rows.csv"
    with open(rows, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["x", "label"])
        writer.writerows([i, i % 3] for i in range(100))
    assert rows_at_most(str(rows), ManifestFormat.CSV) == 102  # lines: the header and the final newline count
    build_from_manifest.run(["--manifest", str(rows), "--output", str(tmp_path / "csv"), "--progress", "none"])
    assert "1 in-memory DirectRunner worker: a small input: 102 samples" in capsys.readouterr().out

    np.save(tmp_path / "a.npy", np.zeros((70, 3), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((30, 3), np.float32))
    assert count_samples([str(tmp_path / "a.npy"), str(tmp_path / "b.npy")]) == 100
    np.savez(tmp_path / "c.npz", x=np.zeros((5, 3)))
    assert count_samples([str(tmp_path / "c.npz")]) is None  # not counted: such a job is not small
    build_from_arrays.run(["--arrays", str(tmp_path / "*.npy"), "--output", str(tmp_path / "arrays"),
                           "--progress", "none"])
    assert "1 in-memory DirectRunner worker: a small input: 100 samples" in capsys.readouterr().out

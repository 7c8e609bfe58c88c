"""Incremental refresh that copies the kept records (``--append=false``) end to end: adds, changes and removals
give exactly a full build's shards.

Every case runs the refresh job twice (a full first version, then an incremental one) and builds
the changed folder in full with ``build_image_dataset``: the two must hold the same records, and
since the writer plans and writes both the same way, the very same shard bytes. Local and gs://
(the emulator); a SIGKILL in the middle of an append refresh (the default) on gs://, then a re-run (the killed
jobs run in forks of one server that imported Beam once: tests/docs/command_zygote.py). Appends themselves:
test_append_refresh.py.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from beam_tfrecord import storage
from beam_tfrecord.core.image_ops import ResizeImage, ResizeMethod
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.dataset import load_manifest, read_latest, resolve_dataset_dir, version_dir
from beam_tfrecord.errors import InputIndexError
from beam_tfrecord.formats import shard_format
from beam_tfrecord.verify import verify_dataset
from beam_tfrecord.versions.commit import COMMIT_KEY
from beam_tfrecord.versions.incremental import REFRESH_KEY, plan_incremental
from beam_tfrecord.versions.input_index import INPUT_INDEX_FILENAME, InputIndex, encoding_digest
from beam_tfrecord.versions.refresh import RefreshAction, list_versions
from pipelines import build_image_dataset, refresh_image_dataset
from tests.docs.command_zygote import Job, serving
from tests.versions.live_records import live_records

LAYOUT = ["--splits=train=0.7,validation=0.3", "--target_shard_bytes=3000", "--resize=12x12",
          "--max_rejected_fraction=0.1"]
RUNNER = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]


def _refresh(images: str, root: str, *extra: str):
    return refresh_image_dataset.run(["--input", images, "--dataset_root", root, *LAYOUT, *RUNNER, *extra])


def _records(dataset_dir: str, manifest: Manifest) -> dict[str, collections.Counter]:
    """Per split, the multiset of serialized records."""
    found: dict[str, collections.Counter] = {}
    reader_format = shard_format(manifest.file_format)
    for split in manifest.splits:
        counter = found.setdefault(split.name, collections.Counter())
        for shard in split.shards:
            with reader_format.open_reader(storage.join(dataset_dir, shard.filename), shard,
                                           compression=manifest.compression) as reader:
                counter.update(record for record, _ in reader.iter_records(0, shard.num_records))
    return found


def _change_inputs(images: str) -> None:
    """3 added, 2 changed (another image's bytes), 2 removed."""
    paths = sorted(path for path, _ in storage.list_files(images.rstrip("/") + "/*/*"))
    for number, source in enumerate(paths[:3]):
        with storage.open_write(f"{images}/square/new-{number}.jpg") as handle:
            handle.write(storage.read_bytes(source))
    for target, source in ((paths[5], paths[20]), (paths[12], paths[25])):
        data = storage.read_bytes(source)
        with storage.open_write(target) as handle:
            handle.write(data)
    storage.delete_if_exists([paths[8], paths[27]])


def _assert_same_as_full_build(images: str, root: str, full_dir: str) -> Manifest:
    """The root's LATEST holds exactly what a full build of ``images`` holds, shard for shard."""
    full = build_image_dataset.run(["--input", images, "--output", full_dir, *LAYOUT, *RUNNER])
    latest_dir = resolve_dataset_dir(root)
    manifest = load_manifest(root)
    verify_dataset(latest_dir)
    assert _records(latest_dir, manifest) == _records(full_dir, full)
    assert [(s.name, s.num_records) for s in manifest.splits] == [(s.name, s.num_records) for s in full.splits]
    assert (manifest.num_inputs, manifest.num_rejected) == (full.num_inputs, full.num_rejected)
    # Same records, same planner: the same shards (so the same balance), TFDS metadata included.
    assert [(s.filename, s.crc32c) for s in manifest.shards] == [(s.filename, s.crc32c) for s in full.shards]
    assert storage.exists(storage.join(latest_dir, "dataset_info.json"))
    return manifest


def test_incremental_refresh_equals_full_build(input_and_root: tuple[str, str], tmp_path) -> None:
    images, root = input_and_root
    with storage.open_write(f"{images}/circle/broken.jpg") as handle:  # rejected: encoded again every time
        handle.write(b"not a jpeg")
    first = _refresh(images, root)
    assert REFRESH_KEY not in load_manifest(root).metadata  # the first version is a full build
    _change_inputs(images)

    # Locally through the shuffle fan-in path: both paths write the same shards.
    second = _refresh(images, root, "--append=false", *([] if root.startswith("gs://") else ["--fan_in=shuffle"]))
    assert second.action is RefreshAction.BUILD and read_latest(root) == second.version_id
    manifest = _assert_same_as_full_build(images, root, str(tmp_path / "full"))
    assert manifest.metadata[REFRESH_KEY] == {"base_version": first.version_id, "reused_records": 26,
                                              "encoded_records": 6, "removed_records": 2}
    assert (manifest.num_written, manifest.num_rejected) == (31, 1)

    assert _refresh(images, root).action is RefreshAction.SKIP  # a re-run with no change does nothing
    storage.delete_if_exists([sorted(p for p, _ in storage.list_files(images.rstrip("/") + "/*/*"))[0]])
    _refresh(images, root, "--append=false")  # an incremental version lends its records in turn
    assert load_manifest(root).metadata[REFRESH_KEY] == {"base_version": second.version_id, "reused_records": 30,
                                                         "encoded_records": 1, "removed_records": 1}


@pytest.mark.parametrize("index_bytes, reason", [
    (b"{not json", "not JSON"),
    (b'[1, 2]', "expected an object with format 'beam-tfrecord-input-index'"),
    (b'{"format": "beam-tfrecord-input-index", "version": 9, "encoding": "", "inputs": []}',
     "version 9; this reader knows 1"),
    (b'{"format": "beam-tfrecord-input-index", "version": 1, "encoding": 3, "inputs": []}',
     "expected 'encoding' (a string) and 'inputs' (a list)"),
    (b'{"format": "beam-tfrecord-input-index", "version": 1, "encoding": "x", "inputs": [["a", "b"]]}',
     "input 0: expected [key, path, token] strings, got ['a', 'b']"),
    (b'{"format": "beam-tfrecord-input-index", "version": 1, "encoding": "x", "inputs": [["a", "b", "1:2"], '
     b'["a", "c", "1:2"]]}', "an input key is listed twice"),
], ids=["not-json", "not-an-object", "future-version", "encoding-not-text", "short-row", "duplicate-key"])
def test_malformed_index_is_a_typed_error(index_bytes: bytes, reason: str) -> None:
    with pytest.raises(InputIndexError) as raised:
        InputIndex.from_bytes(index_bytes, path="ROOT/versions/v/input_index.json")
    assert raised.value.reason.startswith(reason) and raised.value.path == "ROOT/versions/v/input_index.json"


def test_missing_index_means_a_full_build(images: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path / "root")
    first = _refresh(images, root)
    os.remove(os.path.join(first.version_dir, INPUT_INDEX_FILENAME))  # as a version built before indexes
    _change_inputs(images)
    capsys.readouterr()
    _refresh(images, root)
    assert "cannot lend its records (missing (the version was built without one))" in capsys.readouterr().out
    assert REFRESH_KEY not in load_manifest(root).metadata
    _assert_same_as_full_build(images, root, str(tmp_path / "full"))


def test_index_disagreeing_with_manifest_is_refused(built_version) -> None:
    index = InputIndex.from_bytes((built_version / INPUT_INDEX_FILENAME).read_bytes(), path="index")

    shorter = InputIndex(index.encoding, index.inputs[1:])
    with pytest.raises(InputIndexError, match="29 inputs were written by its account; the manifest lists 30 records"):
        plan_incremental(base_version="v", base_dir=str(built_version), manifest=load_manifest(str(built_version)),
                         base_index=shorter, current=index)
    with pytest.raises(InputIndexError, match="built with another schema, transform or salt"):
        plan_incremental(base_version="v", base_dir=str(built_version), manifest=load_manifest(str(built_version)),
                         base_index=index, current=InputIndex("other", index.inputs))


@pytest.mark.parametrize("other", [
    ResizeImage(12, 12, jpeg_quality=80), ResizeImage(10, 12), ResizeImage(12, 12, method=ResizeMethod.NEAREST),
], ids=["quality", "size", "method"])
def test_any_resize_option_changes_the_encoding_digest(other: ResizeImage) -> None:
    schema = {"features": {}}
    digest = encoding_digest(schema_json=schema, transforms={"image": ResizeImage(12, 12)}, salt="s")
    assert digest == encoding_digest(schema_json=schema, transforms={"image": ResizeImage(12, 12)}, salt="s")
    assert digest != encoding_digest(schema_json=schema, transforms={"image": other}, salt="s")
    assert digest != encoding_digest(schema_json=schema, transforms={"image": ResizeImage(12, 12)}, salt="t")


def _command(images: str, root: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.refresh_image_dataset", "--input", images, "--dataset_root", root,
            *LAYOUT, *RUNNER]


def _versions_now(root: str) -> int:
    listing = list_versions(root)
    return len(listing.complete) + len(listing.incomplete)


@pytest.fixture(scope="module")
def jobs() -> Iterator[str]:
    """The socket of the server the killed jobs are forked from (the job and the GCS client imported)."""
    with serving(("apache_beam", "apache_beam.runners.portability.fn_api_runner", "pipelines.refresh_image_dataset",
                  "google.cloud.storage")) as socket_path:
        yield socket_path


def _run_job(jobs: str, images: str, root: str, kill_after_seconds: float | None) -> tuple[bool, float]:
    """Runs the job in its own process; SIGKILLs it ``kill_after_seconds`` after its new version's folder
    appears. Returns (killed, seconds from that folder's appearance to the end)."""
    before = _versions_now(root)
    with tempfile.TemporaryFile() as stderr:
        process = Job(jobs, _command(images, root), stderr=stderr.fileno())
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline and _versions_now(root) == before:
            time.sleep(0.01)
        appeared = time.monotonic()
        try:
            process.wait(timeout=kill_after_seconds if kill_after_seconds is not None else 120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            return True, time.monotonic() - appeared
        stderr.seek(0)
        assert process.returncode == 0, stderr.read()[-3000:].decode(errors="replace")
    return False, time.monotonic() - appeared


def _undo_refresh(root: str, first: str) -> None:
    """Moves LATEST back to ``first`` and deletes what a refresh published after it, so the next run builds again."""
    finished = read_latest(root)
    if finished != first:
        storage.write_bytes_atomic(f"{root}/LATEST", f"{first}\n".encode())
        storage.delete_tree(version_dir(root, str(finished)))


# On gs:// only: the kills on local paths are test_refresh_kill.py's (three moments, incremental runs too).
@pytest.mark.slow
@pytest.mark.parametrize("input_and_root", ["gs"], indirect=True)
def test_sigkill_during_append_refresh_then_rerun(input_and_root: tuple[str, str], tmp_path, jobs: str) -> None:
    """Kills land anywhere from the launch listing to retention: the window is measured on an uninterrupted
    append refresh (the kind killed). Runs vary by a quarter here, so when every seeded kill came after its run
    had ended, one more lands at half the shortest run. After each kill, what looks complete is complete; the
    re-run gives a full build's records."""
    images, root = input_and_root
    first = _refresh(images, root).version_id  # the base version: built in this process, not the kind killed
    _change_inputs(images)
    _, window_seconds = _run_job(jobs, images, root, None)
    _undo_refresh(root, first)
    seed = int(os.environ.get("BT_KILL_SEED", "20261123"))
    delays = [round(random.Random(seed + n).uniform(0.0, window_seconds), 3) for n in range(2)]
    killed: list[bool] = []
    run_seconds = [window_seconds]

    def kill_after(delay: float) -> str:
        was_killed, seconds = _run_job(jobs, images, root, delay)
        killed.append(was_killed)
        if not was_killed:
            run_seconds.append(seconds)
        context = f"seed {seed}, delays {delays} in a {window_seconds:.2f} s window, killed {killed}"
        for version_id in list_versions(root).complete:  # anything that looks complete is complete
            verify_dataset(version_dir(root, version_id))
        assert read_latest(root) in list_versions(root).complete, context
        _undo_refresh(root, first)  # a run that published (it finished, or was killed during retention)
        return context

    for delay in list(delays):
        context = kill_after(delay)
    for _ in range(2):  # every run ended before its kill: once or twice more, at half the shortest run
        if any(killed):
            break
        delays.append(round(min(run_seconds) / 2, 3))
        context = kill_after(delays[-1])
    assert any(killed), context

    again = _refresh(images, root)  # the re-run builds (or adopts what a killed run finished)
    assert read_latest(root) != first and again.action is not RefreshAction.SKIP, context
    build_image_dataset.run(["--input", images, "--output", str(tmp_path / "full"), *LAYOUT, *RUNNER])
    assert live_records(root) == live_records(str(tmp_path / "full")), context  # an append of the change
    assert load_manifest(root).metadata[COMMIT_KEY]["base_version"] == first, context
    assert list_versions(root).incomplete == (), context

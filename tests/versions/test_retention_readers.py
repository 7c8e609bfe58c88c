"""Retention under readers: a reader that opened a version finishes its epoch across refreshes.

A training job resolves the root to LATEST's version once and reads that version's shards for a
whole epoch. With ``--keep_versions 1`` every refresh makes the previous version deletable; the
default ``--min_version_age`` (24 h) keeps it, ``--min_version_age 0`` deletes it at once (the old
behaviour, under which the reader loses its shards). Local paths and gs:// (the emulator).
"""

from __future__ import annotations

import pytest

from beam_tfrecord import RemoteReads, storage
from beam_tfrecord.dataset import read_latest, version_dir
from beam_tfrecord.errors import MissingShardError
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.versions.refresh import SUPERSEDED_FILENAME, list_versions
from pipelines import refresh_image_dataset

SMALL_SHARDS = "--target_shard_bytes=2000"  # ~20 train shards of the 30 tiny images: the reader is mid-way


def _refresh(images: str, root: str, *extra: str) -> str:
    plan = refresh_image_dataset.run(["--input", images, "--dataset_root", root, "--keep_versions=1", SMALL_SHARDS,
                                      "--force", "--direct_num_workers=1", *extra])  # --force: a rewrite
    return plan.version_id


def test_reader_mid_epoch_survives_two_refreshes_unless_min_age_is_zero(input_and_root: tuple[str, str]) -> None:
    images, root = input_and_root
    first = _refresh(images, root)
    pinned = read_numpy(root, split="train")  # resolves the root to `first` now
    started = [next(pinned)]

    second = _refresh(images, root)  # default --min_version_age: `first` stays for 24 h
    third = _refresh(images, root)
    epoch = started + list(pinned)  # the reader finishes the epoch it began on `first`
    assert sorted(bytes(ex["image"]) for ex in epoch) == sorted(bytes(ex["image"]) for ex in read_numpy(root))
    assert read_latest(root) == third
    assert list_versions(root).complete == (first, second, third)
    assert storage.exists(storage.join(version_dir(root, first), SUPERSEDED_FILENAME))

    # Now pinned to `third`, reading ahead as little as it can: on gs:// a reader holds the shards it
    # fetched ahead (the tiny dataset would be all in memory), which a deletion cannot take away.
    pinned = read_numpy(root, split="train", remote_reads=RemoteReads(
        connections=1, range_bytes=1024, bytes_in_flight=1024))
    next(pinned)
    fourth = _refresh(images, root, "--min_version_age=0")  # the old behaviour: deleted at once
    assert list_versions(root).complete == (fourth,)
    with pytest.raises(MissingShardError):
        list(pinned)


def test_min_version_age_text_is_checked(images: str, tmp_path) -> None:
    with pytest.raises(SystemExit, match="--min_version_age: bad duration '3 days'"):
        refresh_image_dataset.run(["--input", images, "--dataset_root", str(tmp_path / "root"),
                                   "--min_version_age=3 days"])

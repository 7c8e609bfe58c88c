"""``storage.list_details`` lists what Beam's ``FileSystems.match`` listed (paths, sizes, update times), on local
paths and gs://: the refresh fingerprints stored in existing manifests were taken with Beam and must not change."""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystems import FileSystems

from beam_tfrecord import storage
from beam_tfrecord.versions.refresh import (
    InputFile,
    InputFingerprint,
    fingerprint_inputs,
    fingerprint_listed,
    list_input_files,
)

NAMES = ("cats/1.jpg", "cats/2.jpg", "dogs/3.jpg", "dogs/sub/4.jpg", "notes.txt")


def _beam_listing(patterns: list[str]) -> list[InputFile]:
    """What ``list_input_files`` computed before it listed through ``storage`` (Beam's match)."""
    files = {}
    for result in FileSystems.match(patterns):
        for meta in result.metadata_list:
            files[meta.path] = InputFile(meta.path, int(meta.size_in_bytes), float(meta.last_updated_in_seconds))
    return sorted(files.values(), key=lambda f: f.path)


@pytest.fixture(params=["local", "gs"])
def inputs(request: pytest.FixtureRequest, tmp_path) -> str:
    root = str(tmp_path / "in") if request.param == "local" else request.getfixturevalue("gcs_bucket") + "/in"
    for number, name in enumerate(NAMES):
        with storage.open_write(storage.join(root, name)) as handle:
            handle.write(b"x" * (10 + number))
    return root


@pytest.mark.parametrize("patterns", [["*/*"], ["**"], ["cats/"], ["notes.txt"], ["*/*.jpg", "dogs/**"],
                                      ["missing/*"], ["missing.txt"], ["c?ts/[12].jpg"]],
                         ids=["one-level", "everything", "folder", "one-file", "overlapping", "no-match",
                              "missing-file", "wildcards"])
def test_the_listing_and_fingerprint_are_beams(inputs: str, patterns: list[str]) -> None:
    full = [storage.join(inputs, p) if p != "cats/" else storage.join(inputs, "cats") + "/" for p in patterns]
    assert list_input_files(full) == _beam_listing(full)
    assert InputFingerprint.of(list_input_files(full)) == InputFingerprint.of(_beam_listing(full))


def test_a_local_folder_named_without_wildcards_is_listed_as_beam_lists_it(tmp_path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"1")
    assert list_input_files([str(tmp_path / "d")]) == _beam_listing([str(tmp_path / "d")])
    assert os.path.isdir(list_input_files([str(tmp_path / "d")])[0].path)


@pytest.mark.parametrize("patterns", [["*/*"], ["*/*.jpg", "dogs/**"], ["c?ts/[12].jpg"], ["missing/*"]],
                         ids=["one-level", "overlapping", "wildcards", "no-match"])
def test_a_fingerprint_from_a_listing_of_everything_is_the_patterns_own(inputs: str, patterns: list[str]) -> None:
    """``fingerprint_listed`` over a listing of every file (what an image folder's plan has) is the fingerprint
    a listing of the patterns gives; ``list_details(include_broken=True)`` lists what ``list_files`` does."""
    everything = storage.list_details(storage.join(inputs, "**"), include_broken=True)
    assert [(f.path, f.size_bytes) for f in everything] == storage.list_files(storage.join(inputs, "**"),
                                                                             include_broken=True)
    full = [storage.join(inputs, p) for p in patterns]
    assert fingerprint_listed(full, everything) == fingerprint_inputs(full)

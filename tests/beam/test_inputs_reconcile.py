"""What the client planned and what the workers read must agree, on every runner: a folder changed under a
running job (the same fault as workers that do not see the client's folder) fails and publishes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import apache_beam as beam
import pytest

from beam_tfrecord import DType, Scalar, Schema, WriterProvenance, WriteTFRecordDataset
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.core.schema import ClassLabel, Image, ImageFormat
from beam_tfrecord.engine.local_engine import LocalBatchRunner
from beam_tfrecord.errors import InputsMismatchError, WriterOptionError
from beam_tfrecord.sources.image_folder import FolderListing, ListingCheck, ReadImageFolder, list_folder
from pipelines.make_sample_images import write_sample_images


@pytest.fixture()
def images(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    write_sample_images(str(root), per_class=4, size=8, seed=1)
    return root


def _build(root: Path, out: Path, check: ListingCheck, expected_inputs: int | None = None) -> None:
    schema = Schema({"image": Image(ImageFormat.JPEG), "label": ClassLabel(("circle", "square", "stripes"))})
    writer = WriteTFRecordDataset(str(out), schema=schema,
                                  provenance=WriterProvenance(expected_inputs=expected_inputs))
    with beam.Pipeline(runner=LocalBatchRunner()) as pipeline:
        _ = pipeline | ReadImageFolder(str(root), check=check) | writer


def test_the_same_listing_builds(images: Path, tmp_path: Path) -> None:
    listing = list_folder(str(images))
    _build(images, tmp_path / "out", ListingCheck.of(listing), expected_inputs=len(listing.images))
    assert (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("change, detail", [
    ("removed", "2 missing, e.g. 'circle/0000.jpg' is missing"),
    ("emptied", "12 missing, e.g. 'circle/0000.jpg' is missing"),
    ("renamed", "e.g. 'circle/0000.jpg' is missing"),  # the same count, another file
], ids=["two-removed", "folder-emptied", "same-count-other-files"])
def test_a_folder_changed_after_planning_fails_and_publishes_nothing(images: Path, tmp_path: Path, change: str,
                                                                     detail: str) -> None:
    listing = list_folder(str(images))
    first = images / listing.images[0][0]
    if change == "removed":
        first.unlink()
        (images / listing.images[1][0]).unlink()
    elif change == "emptied":
        for label in ("circle", "square", "stripes"):
            shutil.rmtree(images / label)
            (images / label).mkdir()
    else:
        first.rename(first.with_name("zz-renamed.jpg"))
    found = {"removed": 10, "emptied": 0, "renamed": 12}[change]
    with pytest.raises(InputsMismatchError) as raised:
        _build(images, tmp_path / "out", ListingCheck.of(listing))
    assert str(raised.value) == (
        f"image folder {str(images)!r}: the workers read {found} inputs where the client planned 12 ({detail}); "
        "nothing was published. Either the workers do not see the client's inputs (workers on other machines see "
        "shared storage, gs://..., and only the folders they mount) or the inputs changed while the job ran")
    assert not (tmp_path / "out").exists()


SCHEMA = Schema({"id": Scalar(DType.INT64)})


@pytest.mark.parametrize("expected, detail", [(5, "2 missing"), (2, "1 more than planned")], ids=["fewer", "more"])
def test_the_writer_refuses_another_count_than_planned(tmp_path: Path, expected: int, detail: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(InputsMismatchError, match=rf"^{out}: the workers read 3 inputs where the client planned "
                                                  rf"{expected} \({detail}\); nothing was published\."):
        with beam.Pipeline(runner=LocalBatchRunner()) as pipeline:
            _ = (pipeline | beam.Create([Sample(f"k{i}", {"id": i}) for i in range(3)])
                 | WriteTFRecordDataset(str(out), schema=SCHEMA,
                                        provenance=WriterProvenance(expected_inputs=expected)))
    assert list(out.iterdir()) == []  # the temp folder is gone, no manifest


def test_expected_inputs_must_not_be_negative() -> None:
    with pytest.raises(WriterOptionError, match=r"^expected_inputs must be >= 0, got -1$"):
        WriterProvenance(expected_inputs=-1)


def _listing(keys: list[str]) -> FolderListing:
    return FolderListing(tuple((key, f"/root/{key}") for key in keys), ())


def test_a_listing_check_carries_evenly_spaced_examples_and_names_what_it_can() -> None:
    keys = [f"c/{i:04d}.jpg" for i in range(100)]
    check = ListingCheck.of(_listing(keys))
    assert (check.count, len(check.examples), check.examples[:3]) == (100, 32, ("c/0000.jpg", "c/0003.jpg",
                                                                                  "c/0006.jpg"))
    check.verify("/root", _listing(list(keys)))  # the same listing passes
    unsampled = [*keys[:1], "c/zzzz.jpg", *keys[2:]]  # c/0001.jpg is not among the examples
    with pytest.raises(InputsMismatchError, match=r"planned 100 \(other files under the same count\)"):
        check.verify("/root", _listing(sorted(unsampled)))
    with pytest.raises(InputsMismatchError, match=r"read 97 inputs where the client planned 100 \(3 missing, e.g. "
                                                  r"'c/0000.jpg' is missing\)"):
        check.verify("/root", _listing(keys[3:]))

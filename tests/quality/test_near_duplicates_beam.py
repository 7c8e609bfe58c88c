"""Near duplicates in a build: the image-folder job with --near_duplicates on the DirectRunner (its
WriteTFRecordDataset(checks=WriterChecks(near_duplicates=...))): pairs by split, the manifest entry, the summary
line, bad input."""

import os

import numpy as np
import pytest
from near_duplicate_images import distinct_image, jpeg, planted_copy

from beam_tfrecord import SplitConfig
from beam_tfrecord.core.hashing import key_hash
from pipelines import build_image_dataset, refresh_image_dataset

SPLITS = SplitConfig.parse("train=0.5,test=0.5")
TRUNCATED = b"\xff\xd8\xff\xe0 a JPEG cut short"  # passes the writer's signature check, but no decoder's


def _split(key: str) -> str:
    hashed = key_hash(key, "beam-tfrecord")  # the writer's default salt
    return next(name for name, lo, hi in SPLITS.ratio_bounds() if lo <= hashed < hi)


@pytest.fixture(scope="module")
def planted() -> dict[str, bytes]:
    """8 distinct images (96x72 JPEGs) and a copy of 3 of them, one of each kind; one truncated JPEG."""
    rng = np.random.default_rng(5)
    images = [distinct_image(rng, (96, 72)) for _ in range(8)]
    files = {f"img{n}.jpg": jpeg(image) for n, image in enumerate(images)}
    for n, kind in enumerate(("jpeg_quality", "resize", "crop")):
        files[f"img{n}_{kind}.jpg"] = planted_copy(images[n], kind, np.random.default_rng(n))
    files["truncated.jpg"] = TRUNCATED
    return files


EXPECTED_PAIRS = [("img0.jpg", "img0_jpeg_quality.jpg", 0), ("img1.jpg", "img1_resize.jpg", 2),
                  ("img2.jpg", "img2_crop.jpg", 10)]


def _build(planted: dict[str, bytes], tmp_path, *options: str):
    root = tmp_path / "images"
    for name, data in planted.items():
        os.makedirs(root / "cats", exist_ok=True)
        (root / "cats" / name).write_bytes(data)
    return build_image_dataset.run(["--input", str(root), "--output", str(tmp_path / "ds"), "--splits",
                                    "train=0.5,test=0.5", "--near_duplicates", "--progress", "none", *options])


def _check(report: dict) -> None:
    """The planted pairs, by the splits the writer's hash puts their images in; the truncated JPEG not hashed."""
    assert report["method"] == {"hash": "imagehash.phash 4.3.2 (64 bits)", "max_distance": 12,
                                "colour_layout": "4x4 RGB", "max_colour_difference": 20.0, "bands": 8,
                                "always_found_below": 8, "max_bucket": 1000}
    expected: dict[str, list] = {}
    for a, b, gap in EXPECTED_PAIRS:
        name = _split(f"cats/{a}") if _split(f"cats/{a}") == _split(f"cats/{b}") else "train/test"
        expected.setdefault(name, []).append([f"cats/{a}", f"cats/{b}", gap])
    assert report["examples"] == dict(sorted(expected.items()))
    assert report["across_splits"] == {name: len(v) for name, v in expected.items() if "/" in name}
    assert report["within_splits"] == {name: len(expected[name]) for name in ("train", "test") if name in expected}
    assert (report["pairs"], report["images_in_pairs"]) == (3, 6)
    assert report["not_hashed"]["examples"][0]["reason"].startswith(
        "sample 'cats/truncated.jpg': near duplicates: cannot decode the image")


def test_image_folder_job_with_near_duplicates(planted, tmp_path, capsys):
    manifest = _build(planted, tmp_path, "--direct_num_workers=1")
    report = manifest.metadata["near_duplicates"]
    _check(report)
    assert manifest.num_written == 12
    across = ", ".join(f"{name} {n}" for name, n in report["across_splits"].items())
    within = ", ".join(f"{name} {n}" for name, n in report["within_splits"].items())
    assert (f"  near duplicates: 3 pairs; across splits: {across}; within: {within} (pHash distance <= 12 of 64 "
            "bits, alike colours); 1 images not hashed (cannot decode, e.g. 'cats/truncated.jpg')"
            ) in capsys.readouterr().out


def test_near_duplicates_on_worker_processes_through_the_shuffle_find_the_same_pairs(planted, tmp_path):
    """On the DirectRunner's worker processes, the signatures travel through the shuffle fan-in's encoders."""
    manifest = _build(planted, tmp_path, "--direct_running_mode=multi_processing", "--direct_num_workers=2",
                      "--fan_in=shuffle")
    _check(manifest.metadata["near_duplicates"])


def test_refresh_refuses_near_duplicates(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        refresh_image_dataset.run(["--dataset_root", str(tmp_path / "root"), "--input", str(tmp_path),
                                   "--near_duplicates"])
    assert exit_info.value.code == 2
    assert ("--near_duplicates is not an option of this job: a refresh's kept records are not images to hash "
            "(pipelines.build_image_dataset has it)") in capsys.readouterr().err

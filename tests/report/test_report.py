"""`beam-tfrecord report`: built for real, rendered in headless Chromium, statistics read back."""

from __future__ import annotations

import collections
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fixtures_gcs import fake_gcs, gcs_bucket  # noqa: F401  (pytest fixtures)
from interop.conftest import array_record_dataset, tfrecord_dataset  # noqa: F401  (pytest fixtures)
from PIL import Image as PILImage
from tensorflow_metadata.proto.v0 import statistics_pb2

from beam_tfrecord import cli, load_manifest, read_numpy
from beam_tfrecord.report import REPORT_FILENAME, render_html, write_report
from beam_tfrecord.report.from_statistics import collect
from beam_tfrecord.report.stats import FROM_RECORDS, FROM_STATISTICS, DatasetStats, Reservoir

CLI = str(Path(sys.executable).parent / "beam-tfrecord")
_HARNESS = """<!DOCTYPE html><html><body><iframe id="r" src="report.html" style="width:1000px;height:4000px"></iframe>
<script>
document.getElementById("r").addEventListener("load", () => {
  const doc = document.getElementById("r").contentDocument;
  const figures = [...doc.querySelectorAll("figure.plot")].map(f => ({id: f.id,
    images: [...f.querySelectorAll("img")].map(i => i.complete && i.naturalWidth > 0 ? i.naturalWidth : 0)}));
  const out = document.createElement("pre");
  out.id = "result";
  out.textContent = JSON.stringify(figures);
  document.body.appendChild(out);
});
</script></body></html>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Debian's chromium is needed to render the report: scripts/test.sh installs it")
    return found


def _render(report_dir: Path) -> list[dict]:
    """Each plot figure of the page as headless Chromium loaded it: its id and its images' widths."""
    harness = report_dir / "harness.html"
    harness.write_text(_HARNESS)
    done = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                           "--virtual-time-budget=10000", "--dump-dom", harness.as_uri()],
                          capture_output=True, text=True, timeout=120)
    match = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.S)
    assert match, done.stderr[-2000:]
    return json.loads(match.group(1).replace("&quot;", '"'))


def _screenshot(report_dir: Path, target: Path) -> None:
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1100,2800", f"--screenshot={target}", (report_dir / REPORT_FILENAME).as_uri()],
                   capture_output=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def demo_like(tmp_path_factory, sample_images) -> str:
    """The demo's image dataset, with two rejected files so the dead-letter plot has bars."""
    images = tmp_path_factory.mktemp("report-images")
    shutil.copytree(sample_images, images, dirs_exist_ok=True)
    (images / "circle" / "truncated.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (images / "square" / "empty.png").write_bytes(b"")
    out = str(tmp_path_factory.mktemp("report-ds") / "ds")
    # In this process (the command line is not what these tests read; `report` runs as a command below).
    assert cli.main(["build", "--input", str(images), "--output", out, "--target_shard_bytes=200000",
                     "--splits=train=0.8,validation=0.1,test=0.1", "--max_rejected_fraction=0.01",
                     "--image_format=any", "--progress=none"]) == 0
    return out


def test_the_report_renders_every_plot_in_chromium(tmp_path, demo_like):
    output = tmp_path / "report"
    done = subprocess.run([CLI, "report", demo_like, "--output", str(output)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"wrote {output / REPORT_FILENAME} (6 plots) and {output / 'statistics.pb'}, "
                           "statistics from statistics.pb\n")
    figures = _render(output)
    assert [f["id"] for f in figures] == ["shard-sizes", "split-sizes", "classes-label", "image-sizes-image",
                                          "samples-image", "dead-letters"]
    assert all(f["images"] and all(width > 100 or (f["id"] == "samples-image" and width > 0)
                                   for width in f["images"]) for f in figures), figures
    samples = next(f for f in figures if f["id"] == "samples-image")
    assert len(samples["images"]) == 18  # 6 per class, 3 classes
    page = (output / REPORT_FILENAME).read_text()
    assert "http://" not in page and "https://" not in page  # self-contained: opens offline
    _screenshot(output, tmp_path / "report.png")
    assert (tmp_path / "report.png").stat().st_size > 50_000


def _records(dataset: str, split: str) -> list[dict]:
    """A split's records, read back independently of the statistics (the NumPy reader)."""
    return list(read_numpy(dataset, split=split))


def _header_size(record: dict) -> tuple[int, int] | None:
    try:
        return PILImage.open(io.BytesIO(bytes(record["image"]))).size
    except OSError:  # the signature-only check let the truncated JPEG in: statistics.pb counts it undecodable
        return None


def test_the_report_draws_the_builds_statistics_pb_and_they_are_the_records(tmp_path, demo_like):
    first, second = write_report(demo_like, str(tmp_path / "a")), write_report(demo_like, str(tmp_path / "b"))
    assert first.source == FROM_STATISTICS
    assert Path(first.html_path).read_bytes() == Path(second.html_path).read_bytes()
    assert Path(first.statistics_path).read_bytes() == (Path(demo_like) / "statistics.pb").read_bytes()
    assert '<p id="source">Statistics from statistics.pb.</p>' in Path(first.html_path).read_text()
    manifest = load_manifest(demo_like)
    drawn = collect(demo_like)
    names = manifest.schema.features["label"].names
    for split in drawn.splits:
        records = _records(demo_like, split.name)
        assert split.num_records == len(records) == manifest.split(split.name).num_records
        assert split.classes["label"] == collections.Counter(names[int(r["label"])] for r in records)
        sizes = [size for size in map(_header_size, records) if size is not None]
        encoded = [len(bytes(r["image"])) for r in records]
        image = split.images["image"]
        assert (image.widths.count, image.widths.minimum, image.widths.maximum, image.unreadable) == (
            len(sizes), min(w for w, _ in sizes), max(w for w, _ in sizes), len(records) - len(sizes))
        assert (image.heights.minimum, image.heights.maximum) == (64, 64)
        assert (image.encoded_bytes.minimum, image.encoded_bytes.maximum) == (min(encoded), max(encoded))
        assert image.encoded_bytes.mean == pytest.approx(np.mean(encoded))
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(Path(first.statistics_path).read_bytes())
    assert [(d.name, d.num_examples) for d in stats.datasets] == [(s.name, s.num_records) for s in manifest.splits]
    first_split, samples = drawn.samples["image"]
    assert first_split == "train" and sorted(samples) == ["circle", "square", "stripes"]
    assert all(len(images) == 6 for images in samples.values())


_EVERY_PLOT = {"shard-sizes", "split-sizes", "classes-label", "dead-letters", "numeric-count", "numeric-score",
               "numeric-box", "numeric-ids", "numeric-pixels", "numeric-depth", "numeric-flags", "lengths-tags",
               "lengths-ids", "image-sizes-photo", "image-sizes-mask", "samples-photo", "samples-mask"}


def _check_drawn(dataset: str, stats: DatasetStats) -> None:
    """What the report draws of the interop dataset is what its records hold."""
    names = load_manifest(dataset).schema.features["label"].names
    for split in stats.splits:
        records = _records(dataset, split.name)
        counts = [int(r["count"]) for r in records]
        drawn = split.numeric["count"]
        assert (drawn.count, drawn.minimum, drawn.maximum) == (len(records), min(counts), max(counts))
        assert drawn.mean == pytest.approx(np.mean(counts))
        assert sum(b.count for b in drawn.buckets) == pytest.approx(len(records))
        tags = [len(r["tags"]) for r in records]
        lengths = split.lengths["tags"]
        assert (lengths.count, lengths.minimum, lengths.maximum) == (len(records), min(tags), max(tags)) \
            == (len(records), 0, 3)
        assert split.classes["label"] == collections.Counter(names[int(r["label"])] for r in records)


def test_every_feature_type_gets_its_plot(tmp_path, tfrecord_dataset):
    report = write_report(tfrecord_dataset, str(tmp_path / "report"))
    assert report.source == FROM_STATISTICS and set(report.plot_ids) == _EVERY_PLOT
    figures = _render(tmp_path / "report")
    assert {f["id"] for f in figures} == set(report.plot_ids) and all(f["images"] for f in figures)
    assert all(width > 0 for f in figures for width in f["images"])
    _check_drawn(tfrecord_dataset, collect(tfrecord_dataset))


def test_a_dataset_without_statistics_pb_is_read_once_instead(tmp_path, tfrecord_dataset):
    """An older version (no statistics.pb, none in its manifest): the report reads its records, says so, and
    draws the same counts and extremes."""
    older = tmp_path / "older"
    shutil.copytree(tfrecord_dataset, older)
    (older / "statistics.pb").unlink()
    manifest = json.loads((older / "manifest.json").read_text())
    del manifest["statistics"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    drawn = collect(str(older))
    page, plot_ids = render_html(drawn)
    assert drawn.source == FROM_RECORDS and set(plot_ids) == _EVERY_PLOT
    assert f"Statistics from {FROM_RECORDS}." in page
    _check_drawn(str(older), drawn)
    stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(drawn.statistics)  # what the report writes
    tags = {"/".join(f.path.step): f for f in stats.datasets[0].features}["tags/length"].num_stats
    assert (tags.min, tags.max) == (0, 3)


def test_a_gs_dataset_gives_the_same_statistics(tmp_path, fake_gcs, gcs_bucket, demo_like):
    remote = f"{gcs_bucket}/ds"
    fake_gcs.upload_tree(demo_like, remote)
    local, from_gcs = write_report(demo_like, str(tmp_path / "a")), write_report(remote, str(tmp_path / "b"))
    assert Path(from_gcs.statistics_path).read_bytes() == Path(local.statistics_path).read_bytes()
    assert from_gcs.plot_ids == local.plot_ids
    page = Path(from_gcs.html_path).read_text()
    assert f"at {remote}" in page


def test_reservoir_keeps_a_bounded_seeded_sample():
    values = range(100_000)
    first, second = Reservoir(1000, "train/x"), Reservoir(1000, "train/x")
    for value in values:
        first.add(value)
        second.add(value)
    assert len(first.values) == 1000 and first.values == second.values and first.seen == 100_000
    assert 40_000 < sum(first.values) / 1000 < 60_000  # uniform over the stream, not its head


def test_a_missing_dataset_is_a_clear_error(tmp_path):
    done = subprocess.run([CLI, "report", str(tmp_path / "nothing")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "beam-tfrecord report: DatasetNotFoundError: no published dataset at" in done.stderr
    assert not os.path.exists(tmp_path / "nothing")

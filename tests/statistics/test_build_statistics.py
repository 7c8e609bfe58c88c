"""``statistics.pb``: written by every build, as TFDV writes it, its values checked against the records read back.

Counts, min, max and mean exact, quantiles within 1.3% of their rank (exact here), top values exact;
``statistics=False`` writes none and the same shards. On Dask: tests/dask/test_users_cluster.py, with
``statistics_checks``.
"""

from __future__ import annotations

import collections
import io
import json
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from PIL import Image as PILImage
from statistics_checks import assert_statistics_match_records
from tensorflow_metadata.proto.v0 import statistics_pb2

from beam_tfrecord import (
    ClassLabel,
    DatasetDescription,
    DType,
    Image,
    ImageFormat,
    Sample,
    Scalar,
    Schema,
    SplitConfig,
    Tensor,
    TensorDType,
    VarList,
    WriterTuning,
    WriteTFRecordDataset,
    read_numpy,
)
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.statistics import STATISTICS_FILE, read_statistics

NAMES = ("cat", "dog", "bird")
SCHEMA = Schema({"x": Scalar(DType.FLOAT32), "n": Scalar(DType.INT64), "label": ClassLabel(NAMES),
                 "word": Scalar(DType.STRING), "blob": Scalar(DType.BYTES), "ids": VarList(DType.INT64),
                 "t": Tensor(TensorDType.UINT8, (2, 3)), "img": Image(ImageFormat.PNG)})
NUM = 400


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), (width, height, 7)).save(out, format="PNG")
    return out.getvalue()


def _samples(chunk: int) -> list[Sample]:
    rng = np.random.default_rng(chunk)
    return [Sample(f"k{i:05d}", {
        "x": float(rng.normal(5.0, 2.0)), "n": int(i % 17), "label": NAMES[(i * i) % 3],
        "word": f"w{i % 9}", "blob": bytes(i % 50), "ids": list(range(i % 4)),
        "t": rng.integers(0, 256, (2, 3)).astype(np.uint8), "img": _png(4 + i % 3, 2 + i % 5)})
        for i in range(chunk * 100, chunk * 100 + 100)]


def _build(out: Path, options: list[str], *, statistics: bool = True) -> None:
    with beam.Pipeline(argv=options) as pipeline:
        _ = (pipeline | beam.Create(range(NUM // 100)) | beam.Map(_samples)
             | WriteTFRecordDataset(str(out), description=DatasetDescription(
                 schema=SCHEMA, splits=SplitConfig.parse("train=0.7,test=0.3"), statistics=statistics),
                 tuning=WriterTuning(shared_filesystem=True)))


def _feature(dataset, name: str):
    return next(f for f in dataset.features if f.path.step == [name])


def _check(out: Path) -> None:
    stats = read_statistics(str(out))
    manifest = Manifest.loads((out / "manifest.json").read_bytes())
    assert manifest.statistics == STATISTICS_FILE
    assert [d.name for d in stats.datasets] == [s.name for s in manifest.splits]
    for dataset, split in zip(stats.datasets, manifest.splits):
        rows = list(read_numpy(str(out), split=split.name))
        assert dataset.num_examples == split.num_records == len(rows)
        x = np.array([r["x"] for r in rows], np.float64)
        num = _feature(dataset, "x").num_stats
        assert (num.common_stats.num_non_missing, num.common_stats.num_missing) == (len(rows), 0)
        assert (num.min, num.max) == (x.min(), x.max())
        assert num.mean == pytest.approx(x.mean(), rel=1e-12)
        assert num.std_dev == pytest.approx(x.std(), rel=1e-9)
        quantiles = next(h for h in num.histograms if h.type == statistics_pb2.Histogram.QUANTILES)
        ranks = [np.searchsorted(np.sort(x), b.high_value, side="right") / len(x) for b in quantiles.buckets[:-1]]
        assert np.abs(np.array(ranks) - np.arange(1, 10) / 10).max() <= 0.0133 + 1 / len(x)
        n = _feature(dataset, "n").num_stats
        assert n.num_zeros == sum(r["n"] == 0 for r in rows)
        labels = _feature(dataset, "label").string_stats
        counts = {name: sum(NAMES[r["label"]] == name for r in rows) for name in NAMES}
        assert {v.value: v.frequency for v in labels.top_values} == {k: c for k, c in counts.items() if c}
        assert labels.unique == sum(1 for c in counts.values() if c)
        words = _feature(dataset, "word").string_stats
        assert {v.value: v.frequency for v in words.top_values} == collections.Counter(r["word"].decode() for r in rows)
        blob = _feature(dataset, "blob").bytes_stats
        assert (blob.min_num_bytes, blob.max_num_bytes) == (min(len(r["blob"]) for r in rows),
                                                              max(len(r["blob"]) for r in rows))
        ids = _feature(dataset, "ids").num_stats.common_stats
        assert (ids.tot_num_values, ids.max_num_values) == (sum(len(r["ids"]) for r in rows), 3)
        t = _feature(dataset, "t").num_stats
        assert t.mean == pytest.approx(np.mean([r["t"] for r in rows]), rel=1e-12)
        img = {c.name: c for c in _feature(dataset, "img").custom_stats}
        sizes = [PILImage.open(io.BytesIO(r["img"])).size for r in rows]
        assert img["image_max_width"].num == max(w for w, _ in sizes)
        assert img["image_max_height"].num == max(h for _, h in sizes)
        assert [(b.label, b.sample_count) for b in img["image_format_histogram"].rank_histogram.buckets] == \
            [("png", len(rows))]


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob("data-*")}


def test_a_direct_runner_build_writes_the_statistics_of_its_records(tmp_path: Path) -> None:
    _build(tmp_path / "with", ["--runner=DirectRunner"])
    _check(tmp_path / "with")
    _build(tmp_path / "without", ["--runner=DirectRunner"], statistics=False)
    assert not (tmp_path / "without" / STATISTICS_FILE).exists()
    assert "statistics" not in json.loads((tmp_path / "without" / "manifest.json").read_text())
    assert _shard_bytes(tmp_path / "with") == _shard_bytes(tmp_path / "without")
    # The Beam-free computation from (split, record) pairs gives the same figures, the sketches' aside.
    assert_statistics_match_records(str(tmp_path / "with"))

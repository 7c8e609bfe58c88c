"""The report's plots, drawn with matplotlib (headless Agg backend) into PNG bytes."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

from beam_tfrecord.core.units import MiB
from beam_tfrecord.report.stats import DatasetStats, Distribution

_DPI = 96
_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display: the report is made on servers and in CI
    import matplotlib.pyplot as plt

    return plt


def _png(figure) -> bytes:
    out = io.BytesIO()
    figure.tight_layout()
    # No "Software" stamp and no date: the same statistics always give the same bytes.
    figure.savefig(out, format="png", dpi=_DPI, metadata={"Software": None})
    _pyplot().close(figure)
    return out.getvalue()


def _mib(num_bytes: float) -> float:
    return num_bytes / MiB


def shard_sizes(stats: DatasetStats) -> bytes:
    """Each split's shard sizes (stored bytes) against the target and the hard cap."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 3.2))
    position = 0
    ticks, labels = [], []
    for color, split in zip(_COLORS * 4, stats.splits):
        xs = np.arange(position, position + len(split.shard_bytes))
        axes.bar(xs, [_mib(b) for b in split.shard_bytes], color=color, label=f"{split.name} ({len(xs)} shards)")
        if len(xs):
            ticks.append(xs.mean())
            labels.append(split.name)
        position += len(split.shard_bytes) + 1
    sharding = stats.manifest.sharding
    for key, style, text in (("target_shard_bytes", "--", "target"), ("max_shard_bytes", ":", "cap")):
        if sharding.get(key):
            axes.axhline(_mib(sharding[key]), linestyle=style, color="black", linewidth=1,
                         label=f"{text} {_mib(sharding[key]):.2f} MiB")
    axes.set_xticks(ticks, labels)
    axes.set_ylabel("MiB")
    axes.set_title("Shard sizes per split")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)


def split_sizes(stats: DatasetStats) -> bytes:
    """Records and stored bytes per split."""
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
    names = [s.name for s in stats.splits]
    left.bar(names, [s.num_records for s in stats.splits], color=_COLORS[0])
    left.set_title("Records per split")
    right.bar(names, [_mib(s.num_bytes) for s in stats.splits], color=_COLORS[1])
    right.set_title("MiB per split")
    for axes, values in ((left, [s.num_records for s in stats.splits]),
                         (right, [_mib(s.num_bytes) for s in stats.splits])):
        axes.margins(y=0.15)  # room for the numbers above the bars
        for x, value in enumerate(values):
            axes.annotate(f"{value:,.0f}" if axes is left else f"{value:.2f}", (x, value), ha="center",
                          va="bottom", fontsize=8)
    return _png(figure)


def class_balance(stats: DatasetStats, feature: str) -> bytes:
    """Records per class of a class-label feature, one bar group per split."""
    plt = _pyplot()
    names = list(stats.manifest.schema.features[feature].names)  # type: ignore[union-attr]
    shown = names[:40]
    figure, axes = plt.subplots(figsize=(9, 3.2))
    width = 0.8 / max(len(stats.splits), 1)
    for i, (color, split) in enumerate(zip(_COLORS * 4, stats.splits)):
        counts = [split.classes[feature].get(name, 0) for name in shown]
        axes.bar(np.arange(len(shown)) + i * width, counts, width=width, color=color, label=split.name)
    axes.set_xticks(np.arange(len(shown)) + width * (len(stats.splits) - 1) / 2, shown,
                    rotation=45 if len(shown) > 8 else 0, ha="right" if len(shown) > 8 else "center", fontsize=8)
    axes.set_ylabel("records")
    suffix = f" (first 40 of {len(names)} classes)" if len(names) > 40 else ""
    axes.set_title(f"Class balance of '{feature}' per split{suffix}")
    axes.legend(fontsize=8)
    return _png(figure)


_BINS = 40


def _edges(distributions: Sequence[Distribution]) -> np.ndarray:
    """``_BINS`` equal bins over every distribution's range (one unit wide around a single value)."""
    low = min((d.minimum for d in distributions if d.count), default=0.0)
    high = max((d.maximum for d in distributions if d.count), default=1.0)
    if high <= low:
        low, high = low - 0.5, high + 0.5
    return np.linspace(low, high, _BINS + 1)


def _rebinned(distribution: Distribution, edges: np.ndarray) -> np.ndarray:
    """The distribution's buckets on ``edges``: each spread uniformly over its width, a point into its bin."""
    counts = np.zeros(len(edges) - 1)
    for bucket in distribution.buckets:
        if bucket.high > bucket.low:
            overlap = np.minimum(edges[1:], bucket.high) - np.maximum(edges[:-1], bucket.low)
            counts += bucket.count * np.clip(overlap, 0, None) / (bucket.high - bucket.low)
        else:
            counts[min(max(int(np.searchsorted(edges, bucket.low, side="right")) - 1, 0), len(counts) - 1)] += \
                bucket.count
    return counts


def _stairs(axes, per_split: Sequence[tuple[str, Distribution]], edges: np.ndarray, label, scale: float = 1.0):
    for color, (split, values) in zip(_COLORS * 4, per_split):
        if values.count:
            axes.stairs(_rebinned(values, edges), edges * scale, linewidth=1.5, color=color, label=label(split, values))


def distribution(stats: DatasetStats, title: str, per_split: Sequence[tuple[str, Distribution]],
                 *, xlabel: str = "") -> bytes:
    """Histogram of a numeric quantity, one outline per split, with min / mean / max in the legend."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 2.8))
    _stairs(axes, per_split, _edges([d for _, d in per_split]),
            lambda split, d: f"{split}: min {d.minimum:.4g}, mean {d.mean:.4g}, max {d.maximum:.4g}"
                             f"{f', {d.non_finite} non-finite' if d.non_finite else ''}")
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("count (sampled)" if any(d.sampled for _, d in per_split) else "count")
    axes.legend(fontsize=8)
    return _png(figure)


def image_sizes(stats: DatasetStats, feature: str) -> bytes:
    """Widths and heights of the images, and their encoded size (histograms per split)."""
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    images = [(split.name, split.images[feature]) for split in stats.splits if feature in split.images]
    sides = [(f"{name} {side}", getattr(sizes, side + "s")) for name, sizes in images for side in ("width", "height")]
    _stairs(left, sides, _edges([d for _, d in sides]), lambda label, d: f"{label}: {d.minimum:.0f}-{d.maximum:.0f}")
    encoded = [(name, sizes.encoded_bytes) for name, sizes in images]
    _stairs(right, encoded, _edges([d for _, d in encoded]), lambda split, d: f"{split}: mean {d.mean / 1024:.1f} KiB",
            scale=1 / 1024)
    left.set_xlabel("pixels")
    left.set_title(f"'{feature}': widths and heights")
    right.set_xlabel("KiB")
    right.set_title(f"'{feature}': encoded size")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return _png(figure)


def dead_letters(stats: DatasetStats) -> bytes:
    """Rejected samples by stage and error type."""
    plt = _pyplot()
    items = sorted(stats.dead_letters.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
    figure, axes = plt.subplots(figsize=(9, 1.8 + 0.35 * max(len(items), 1)))
    if items:
        labels = [f"{stage}: {error}" for (stage, error), _ in items]
        axes.barh(labels[::-1], [count for _, count in items][::-1], color=_COLORS[3])
        axes.set_xlabel("samples")
    else:
        axes.text(0.5, 0.5, "no dead letters: every input was written", ha="center", va="center")
        axes.set_axis_off()
    axes.set_title(f"Dead letters by stage and error type ({stats.manifest.num_rejected} of "
                   f"{stats.manifest.num_inputs} inputs rejected)")
    return _png(figure)

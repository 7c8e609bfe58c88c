"""``beam-tfrecord report``: a dataset as one self-contained HTML page, plus TFDV statistics.

Drawn from the dataset's ``statistics.pb`` (one pass over the records for a dataset written without it).
Needs the ``[report]`` extra; neither Beam nor TensorFlow. See docs/report.md.
"""

from __future__ import annotations

import base64
import dataclasses
import html

from beam_tfrecord import storage
from beam_tfrecord.core.schema import Image
from beam_tfrecord.describe import describe_manifest
from beam_tfrecord.report import plots
from beam_tfrecord.report.from_statistics import collect
from beam_tfrecord.report.stats import FROM_STATISTICS, DatasetStats
from beam_tfrecord.statistics.tfmd import NUM_RANK_BUCKETS

REPORT_FILENAME = "report.html"
STATISTICS_FILENAME = "statistics.pb"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; }
figure { margin: 1em 0; } figure img { max-width: 100%; } figcaption { color: #555; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
.samples { display: flex; flex-wrap: wrap; gap: 4px; align-items: flex-end; margin-bottom: 0.6em; }
.samples img { height: 72px; image-rendering: pixelated; border: 1px solid #ccc; }
.samples span { width: 9em; font-size: 0.85em; }
"""


_NUMBERS = {True: "every value of scalars and lists; up to 8 per record of tensors, by a stride",
            False: "every value of scalars and lists; up to 16 per record of tensors"}
_TOP_CLASSES = f" (the {NUM_RANK_BUCKETS} most frequent classes: statistics.pb keeps no more)"


def _capped(stats: DatasetStats) -> bool:
    return stats.source == FROM_STATISTICS and any(len(c) >= NUM_RANK_BUCKETS for s in stats.splits
                                                   for c in s.classes.values())


@dataclasses.dataclass(frozen=True)
class Report:
    """What ``write_report`` wrote."""

    html_path: str
    statistics_path: str
    plot_ids: tuple[str, ...]
    source: str  # where the statistics came from: ``stats.FROM_STATISTICS`` or ``stats.FROM_RECORDS``


def _figure(plot_id: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure class="plot" id="{plot_id}"><img alt="{html.escape(caption)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption></figure>')


def _mime(data: bytes) -> str:
    for prefix, mime in ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG", "image/png"), (b"GIF8", "image/gif"),
                         (b"BM", "image/bmp")):
        if data.startswith(prefix):
            return mime
    return "image/webp"


def _samples(feature: str, stats: DatasetStats) -> str:
    """A grid of the first images of each class (of the first split that has any)."""
    if feature not in stats.samples:
        return ""
    split, samples = stats.samples[feature]
    rows = []
    for label, images in sorted(samples.items()):
        tags = "".join(f'<img alt="{html.escape(label or split)}" src="data:{_mime(d)};base64,'
                       f'{base64.b64encode(d).decode("ascii")}">' for d in images)
        rows.append(f'<div class="samples"><span>{html.escape(label or "(no label)")}</span>{tags}</div>')
    return (f'<figure class="plot" id="samples-{html.escape(feature)}">{"".join(rows)}<figcaption>'
            f"First images of each class in split '{html.escape(split)}'</figcaption></figure>")


def render_html(stats: DatasetStats) -> tuple[str, tuple[str, ...]]:
    """The page, and the ids of its plots."""
    manifest = stats.manifest
    parts: list[str] = []
    ids: list[str] = []

    def add(plot_id: str, png: bytes, caption: str) -> None:
        parts.append(_figure(plot_id, png, caption))
        ids.append(plot_id)

    parts.append("<h2>Shards and splits</h2>")
    add("shard-sizes", plots.shard_sizes(stats), "Stored size of every shard, by split, against the target "
                                                 "and the hard cap")
    add("split-sizes", plots.split_sizes(stats), "Records and bytes per split")
    labels = list(stats.splits[0].classes) if stats.splits else []
    if labels:
        parts.append("<h2>Class balance</h2>")
        for feature in labels:
            add(f"classes-{feature}", plots.class_balance(stats, feature), f"Records per class of '{feature}'"
                                                                         f"{_TOP_CLASSES if _capped(stats) else ''}")
    numeric = list(stats.splits[0].numeric) if stats.splits else []
    if numeric:
        parts.append("<h2>Numeric features</h2>")
        for feature in numeric:
            add(f"numeric-{feature}", plots.distribution(
                stats, f"'{feature}'", [(s.name, s.numeric[feature]) for s in stats.splits], xlabel="value"),
                f"Distribution of '{feature}' ({_NUMBERS[stats.source == FROM_STATISTICS]})")
    lengths = list(stats.splits[0].lengths) if stats.splits else []
    if lengths:
        parts.append("<h2>Variable lengths</h2>")
        for feature in lengths:
            add(f"lengths-{feature}", plots.distribution(
                stats, f"'{feature}': values (or steps) per record", [(s.name, s.lengths[feature])
                                                                     for s in stats.splits], xlabel="length"),
                f"Lengths of '{feature}'")
    images = [n for n, f in manifest.schema.features.items() if isinstance(f, Image)]
    for feature in images:
        parts.append(f"<h2>Images: '{html.escape(feature)}'</h2>")
        add(f"image-sizes-{feature}", plots.image_sizes(stats, feature), f"Sizes of '{feature}'")
        grid = _samples(feature, stats)
        if grid:
            parts.append(grid)
            ids.append(f"samples-{feature}")
    parts.append("<h2>Dead letters</h2>")
    add("dead-letters", plots.dead_letters(stats), "Rejected samples by stage and error type")
    parts.append(f'<p id="source">Statistics from {html.escape(stats.source)}.</p>')
    title = f"Dataset '{manifest.dataset_name}'"
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<pre>{html.escape(describe_manifest(manifest, stats.location, show_shards=False))}</pre>"
            + "".join(parts) + "</body></html>\n")
    return page, tuple(ids)


def write_report(dataset: str, output_dir: str) -> Report:
    """Reads ``dataset`` (local or gs://) and writes ``report.html`` and ``statistics.pb`` to ``output_dir``."""
    stats = collect(dataset)
    page, ids = render_html(stats)
    storage.make_dirs(output_dir)
    html_path = storage.join(output_dir, REPORT_FILENAME)
    statistics_path = storage.join(output_dir, STATISTICS_FILENAME)
    storage.write_bytes_atomic(html_path, page.encode("utf-8"))
    storage.write_bytes_atomic(statistics_path, stats.statistics)
    return Report(html_path, statistics_path, ids, stats.source)


__all__ = ["REPORT_FILENAME", "STATISTICS_FILENAME", "Report", "render_html", "write_report"]

"""Report scale check: time and peak memory of `beam-tfrecord report` as the dataset grows.

    python benchmarks/report_scale.py                         # 25k, 100k, 400k records
    python benchmarks/report_scale.py --records 10000,40000   # other sizes

Each dataset has the feature kinds the report plots: a PNG image (16x16, one of 64 pre-encoded
variants), a class label (10 classes), a float score and a variable-length int64 list. Each size is
built once with the project's Beam writer (kept in --dir between runs), then `write_report` runs in
a child process whose peak RSS is sampled every 50 ms. The report streams the shards and keeps
reservoirs of at most 20,000 values per feature, so its memory should stay flat while its time
grows linearly: the last column divides each size's figures by the smallest size's.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import already_built, child_env, run_measured

CHUNK = 1000
VARIANTS = 64


def _pngs() -> list[bytes]:
    import numpy as np
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    out = []
    for _ in range(VARIANTS):
        buffer = io.BytesIO()
        PILImage.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def _chunk(index: int, total: int, pngs: list[bytes]):
    import numpy as np

    from beam_tfrecord import Sample

    rng = np.random.default_rng(index)
    start = index * CHUNK
    return [Sample(f"r/{i:09d}", {"image": pngs[i % VARIANTS], "label": f"class{i % 10}",
                                  "score": float(rng.normal()), "tokens": rng.integers(0, 1000, rng.integers(0, 40))})
            for i in range(start, min(total, start + CHUNK))]


def _build(path: str, records: int) -> None:
    import apache_beam as beam

    from beam_tfrecord import (
        ClassLabel,
        DType,
        Image,
        ImageFormat,
        Scalar,
        Schema,
        VarList,
        WriteTFRecordDataset,
    )

    if already_built(path, records):
        return
    schema = Schema({"image": Image(ImageFormat.PNG), "label": ClassLabel([f"class{k}" for k in range(10)]),
                     "score": Scalar(DType.FLOAT32), "tokens": VarList(DType.INT64)})
    pngs = _pngs()
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create(range((records + CHUNK - 1) // CHUNK))
             | beam.FlatMap(_chunk, records, pngs)
             | WriteTFRecordDataset(path, schema=schema))


def _child(dataset: str, output: str) -> None:
    from beam_tfrecord.report import write_report

    report = write_report(dataset, output)
    print(json.dumps({"html_bytes": os.path.getsize(report.html_path)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="25000,100000,400000", help="comma-separated dataset sizes")
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "bt_report_scale"))
    parser.add_argument("--child", nargs=2, metavar=("DATASET", "OUTPUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    sizes = sorted(int(n) for n in args.records.split(","))
    rows = []
    for records in sizes:
        dataset = os.path.join(args.dir, f"ds-{records}")
        _build(dataset, records)
        output = os.path.join(args.dir, f"report-{records}")
        measured = run_measured([sys.executable, __file__, "--child", dataset, output],
                                env=child_env(HERE, os.path.dirname(HERE)))
        html = json.loads(measured.stdout.strip().splitlines()[-1])["html_bytes"]
        rows.append((records, measured.seconds, measured.peak_rss_bytes, html))
    base_records, base_s, base_rss, _ = rows[0]
    print(f"{'records':>9} {'seconds':>8} {'rec/s':>8} {'peak RSS':>9} {'HTML':>8}   x records  x time  x RSS")
    for records, seconds, rss, html in rows:
        print(f"{records:>9,} {seconds:>8.1f} {records / seconds:>8,.0f} {rss / 2**20:>7.0f} MB {html / 1024:>5.0f} KiB"
              f"   {records / base_records:>9.1f} {seconds / base_s:>7.2f} {rss / base_rss:>6.2f}")


if __name__ == "__main__":
    main()

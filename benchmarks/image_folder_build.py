"""Image-folder build: ``beam-tfrecord build --resize 128x128`` on 15,000 256-px JPEGs, with the
default options (every core: one DirectRunner worker process per core) against one in-memory
worker (``--direct_num_workers=1``), one in-memory worker with an encoding pool of one process
per core (``--encode_processes``), and LitData's ``optimize`` doing the same resize and JPEG
re-encode with ``num_workers`` = cores, interleaved in one run. Prints wall, CPU and cores busy.

    python benchmarks/image_folder_build.py                      # 15,000 images, 3 repeats
    python benchmarks/image_folder_build.py --images 3000 --repeats 1   # quicker
    python benchmarks/image_folder_build.py --variants default,litdata
    python benchmarks/image_folder_build.py --variants "default,near duplicates"   # --near_duplicates' cost
    python benchmarks/image_folder_build.py --variants "default,no statistics"   # statistics.pb's cost
    python benchmarks/image_folder_build.py --variants "default,no checks"   # statistics.pb and duplicates together

LitData is a peer to compare with, never a dependency of beam-tfrecord: install it for the
benchmark only, ``pip install --no-deps litdata==0.2.76 lightning-utilities boto3 tifffile obstore``
(``--no-deps``: its ``torchvision`` requirement would replace the CPU build of torch by a CUDA one;
``optimize`` does not import it). Without it the ``litdata`` variant is skipped with a message.
The LitData child gets the same image listing (path, label index), decodes with Pillow, converts
to RGB, resizes to 128x128 (bilinear) and saves a JPEG of quality 90, as ``--resize 128x128``
does, and writes LitData's chunks (default chunk size) into its own output folder.

The images are made once (``pipelines.make_sample_images``, seeded) and kept in ``--images_dir``.
Wall is the whole command's (interpreter start and imports included, as a user waits for it);
CPU is the user + system time of the whole process tree (runner, Beam workers, pool processes).
Targets (issue 22, 2 cores): default <= 13 s wall and >= 1.8 cores busy; (issue 31): default
>= 1.25x faster than LitData; (issue 48): default (exact duplicates checked) <= 1.10x ``--duplicates=off``;
(issue 63): default <= 1.03x ``no checks`` (``--no_statistics --duplicates=off``) in CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import child_env, paired_ratios, run_measured

VARIANTS = {
    "default": [],
    "no duplicate check": ["--duplicates=off"],  # what the default's exact-duplicate check costs (issue 48)
    "no statistics": ["--no_statistics"],  # statistics.pb's cost (issue 50: at most 10% of the default's wall)
    "no checks": ["--no_statistics", "--duplicates=off"],  # both checks' cost (issue 63: default <= 1.03x in CPU)
    "full decode": ["--reduced_decode=false"],  # LitData's work exactly: every JPEG decoded whole
    "1 in-memory worker": ["--direct_num_workers=1"],
    "encoding pool": ["--direct_num_workers=1", f"--encode_processes={len(os.sched_getaffinity(0))}"],
    "litdata": [],  # not a beam-tfrecord command: see _litdata_command
    "near duplicates": ["--near_duplicates"],  # issue 48: <= 30% over default (benchmarks/near_duplicates.py)
}
LITDATA = "litdata"
NO_STATISTICS = "no statistics"
NO_CHECKS = "no checks"
LITDATA_INSTALL = "pip install --no-deps litdata==0.2.76 lightning-utilities boto3 tifffile obstore"


def _resize_for_litdata(item: tuple[str, int]) -> dict:
    """LitData's ``fn``: what ``--resize 128x128`` does to one image (Pillow, RGB, bilinear, JPEG 90)."""
    import io

    from PIL import Image

    path, label = item
    with Image.open(path) as image:
        resized = image.convert("RGB").resize((128, 128), resample=Image.Resampling.BILINEAR)
    out = io.BytesIO()
    resized.save(out, format="JPEG", quality=90, optimize=False, progressive=False)
    return {"image": out.getvalue(), "label": label}


def _litdata_child(images: str, out: str) -> None:
    """Runs LitData's ``optimize`` on the folder's images (sorted listing, label = class folder index)."""
    from litdata import optimize

    classes = sorted(d for d in os.listdir(images) if os.path.isdir(os.path.join(images, d)))
    inputs = [(os.path.join(images, name, f), label) for label, name in enumerate(classes)
              for f in sorted(os.listdir(os.path.join(images, name)))]
    optimize(fn=_resize_for_litdata, inputs=inputs, output_dir=out, num_workers=len(os.sched_getaffinity(0)),
             chunk_bytes="64MB", verbose=False)


def litdata_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("litdata") is not None


def _tree_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _make_images(root: str, count: int) -> None:
    per_class = count // 3
    marker = f"{root}.complete-{per_class}"  # beside the folder: nothing but class folders inside
    if os.path.exists(marker):
        return
    shutil.rmtree(root, ignore_errors=True)
    from pipelines.make_sample_images import write_sample_images

    write_sample_images(root, per_class=per_class, size=256, seed=0)
    open(marker, "w").close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=15_000)
    parser.add_argument("--images_dir", default=None, help="default: a folder per count in the temp dir")
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "near duplicates"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "beam_tfrecord_image_build"))
    parser.add_argument("--litdata_child", nargs=2, metavar=("IMAGES", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.litdata_child:
        _litdata_child(*args.litdata_child)
        return
    images = args.images_dir or os.path.join(tempfile.gettempdir(), f"beam_tfrecord_images_{args.images}_256")
    sys.path.insert(0, os.path.dirname(HERE))
    _make_images(images, args.images)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    if LITDATA in variants and not litdata_installed():
        print(f"skipping the litdata variant: litdata is not installed (for this benchmark only: {LITDATA_INSTALL})")
        variants.remove(LITDATA)
    runs: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    shards: dict[str, set[str]] = {v: set() for v in variants}  # each run's shards (names, CRC32Cs), as JSON
    for _ in range(args.repeats):
        for variant in variants:  # interleaved: every variant sees the same machine state
            shutil.rmtree(args.out, ignore_errors=True)
            os.sync()
            command = [sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", images, "--output", args.out,
                       "--resize", "128x128", "--progress", "none", *VARIANTS[variant]]
            if variant == LITDATA:
                command = [sys.executable, os.path.abspath(__file__), "--litdata_child", images, args.out]
            cpu_before = _tree_cpu_seconds()
            measured = run_measured(command, env=child_env(os.path.dirname(HERE)))
            cpu = _tree_cpu_seconds() - cpu_before
            runs[variant].append((measured.seconds, cpu))
            shards[variant].add(_shards_of(args.out))
            print(f"  {variant}: {measured.seconds:.2f} s wall, {cpu:.1f} s CPU, {cpu / measured.seconds:.2f} cores "
                  f"busy, peak RSS {measured.peak_rss_bytes / 2**20:,.0f} MB, load average {os.getloadavg()[0]:.2f}",
                  flush=True)
    shutil.rmtree(args.out, ignore_errors=True)
    print(f"\n{args.images} images, --resize 128x128, {os.cpu_count()} cores; median of {args.repeats}")
    print(f"  {'variant':<24} {'wall s':>8} {'CPU s':>8} {'cores busy':>11} {'vs 1 worker':>12} {'vs litdata':>11}")
    median = {v: sorted(r)[len(r) // 2] for v, r in runs.items()}
    base = median.get("1 in-memory worker", (None, None))[0]
    peer = median.get(LITDATA, (None, None))[0]
    for variant, (wall, cpu) in median.items():
        speed = f"{base / wall:.2f}x" if base else ""
        versus = f"{peer / wall:.2f}x" if peer else ""
        print(f"  {variant:<24} {wall:8.2f} {cpu:8.1f} {cpu / wall:11.2f} {speed:>12} {versus:>11}")
    best = {v: min(r) for v, r in runs.items()}  # bar 32's measure: each variant's fastest run
    if "default" in best and LITDATA in best:
        wall, cpu = best["default"]
        peer_best = best[LITDATA][0]
        print(f"  best of {args.repeats}: default {wall:.2f} s ({cpu / wall:.2f} cores busy), "
              f"litdata {peer_best:.2f} s: {peer_best / wall:.2f}x (target: >= 1.5x, >= 1.85 cores busy)")
    if "default" in median and "no duplicate check" in median:
        (wall, cpu), (plain_wall, plain_cpu) = median["default"], median["no duplicate check"]
        print(f"  duplicates' cost: default / no duplicate check = {wall / plain_wall:.3f} in wall, "
              f"{cpu / plain_cpu:.3f} in CPU (target: at most 1.10)")
    if "default" in median and NO_CHECKS in median:
        (wall, cpu), (bare_wall, bare_cpu) = median["default"], median[NO_CHECKS]
        print(f"  both checks' cost: default / no checks = {wall / bare_wall:.3f} in wall, {cpu / bare_cpu:.3f} in CPU "
              f"(issue 63's target: at most 1.03 in CPU)")
        print(f"    in CPU, within each round (the two run one after the other), median: "
              f"{paired_ratios([c for _, c in runs['default']], [c for _, c in runs[NO_CHECKS]])}")
    if "default" in median and NO_STATISTICS in median:
        same = len(shards["default"] | shards[NO_STATISTICS]) == 1
        print(f"  statistics.pb's cost: default / no statistics = {median['default'][0] / median[NO_STATISTICS][0]:.3f}"
              f" in wall time, {median['default'][1] / median[NO_STATISTICS][1]:.3f} in CPU; shards identical: {same}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _shards_of(out: str) -> str:
    """The shards a build's manifest lists (name, CRC32C, bytes), as JSON ("" when it wrote none)."""
    path = os.path.join(out, "manifest.json")
    if not os.path.exists(path):
        return ""
    with open(path) as handle:
        splits = json.load(handle)["splits"]
    return json.dumps([(s["filename"], s["crc32c"], s["num_bytes"]) for split in splits for s in split["shards"]])


if __name__ == "__main__":
    main()

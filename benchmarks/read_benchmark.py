"""Read benchmark: tf.data, NumPy and PyTorch readers against their baselines, on the same shards, in one run.

Builds (once, with the project's Beam writer) a dataset of ~3 KB records, CIFAR-like: a 32x32x3
uint8 ``Tensor`` and a ``ClassLabel``. Then, in one run, times full passes of each reader, mode
after mode, after a warm-up round (so every mode reads from the page cache), and keeps the best:

  (a) tutorial: TFRecordDataset(files) -> map(parse_single_example + decode_raw) -> batch(32)
  (b) raw:      TFRecordDataset(files) -> batch(1024), no parsing (the practical limit), and -> batch(32)
                (the limit at small batches: Python's own cost per batch iterated, with nothing parsed)
  (c) ours:     read_dataset(path, batch_size=B), parse spec from the manifest, no image decoding
  (n) NumPy:    read_numpy(path), one dict of arrays per example
  (t) PyTorch:  DataLoader(TFRecordIterableDataset(path, batch_size=256), batch_size=None), 0 and 2
                workers (batches built in the workers), and the per-example API with DataLoader(batch_size=256)
  (p) package:  the `tfrecord` package's reader (tfrecord.reader.tfrecord_loader over the shards,
                split between workers by file), DataLoader(batch_size=256), 0 and 2 workers
  (h) handoff:  DataLoader(batch_size=None) with 2 workers yielding ready batches of 256 records as
                tensors, no reading at all (what handing batches from workers to the main process costs)

With ``--litdata``, instead: ours against LitData's ``StreamingDataset`` (each reading its own output of the same
data, ``optimize()`` for LitData), DataLoader(batch 256) with 0 and 2 workers, interleaved, best of ``--rounds``:
15,000 256-px JPEGs resized to 128 px (``image_folder_build.py``'s images and recipe), bytes handed out (LitData's
memoryviews, our ``RaggedBatch``) and decoded to pixels, and ``--records`` small records (32x32x3 uint8 tensors). Run
it with a Python that has LitData (for this benchmark only, in its own venv: ``image_folder_build.LITDATA_INSTALL``).

and prints records/s and the ratios c/a and c/b (c at batch 1024 and at batch 32 over b at batch
1024, and c at batch 32 over b at batch 32), t/p at 0 and 2 workers, t at 2 workers over t at 0,
and h over t at 0 (above 1 only when 2 workers can beat 0 at all). With ``--images``, also (i) the
PyTorch reader over the same images PNG-encoded (a fifth of the records), decoding them, at 0 and 2
workers. The NumPy and PyTorch modes are timed in a child process without TensorFlow (the
`tfrecord` package's protos clash with TensorFlow's in one process, and DataLoader workers should
not fork a process running TensorFlow's threads), with the same interleaved rounds.

Run: python benchmarks/read_benchmark.py [--records 200000] [--dir /tmp/bt_read_bench] [--rounds 5]
     [--skip_torch] [--images]
     /tmp/litdata_venv/bin/python benchmarks/read_benchmark.py --litdata --records 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from collections.abc import Iterable
from typing import Any

import numpy as np
from measure import already_built

from beam_tfrecord import ClassLabel, Image, ImageFormat, Sample, Schema, Tensor, TensorDType
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.dataset import load_manifest, shard_paths

SCHEMA = Schema(features={"image": Tensor(TensorDType.UINT8, (32, 32, 3)),
                          "label": ClassLabel(tuple(f"class_{i}" for i in range(10)))})
# The same images PNG-encoded (--images): per-batch work that DataLoader workers can share.
PNG_SCHEMA = Schema(features={"image": Image(ImageFormat.PNG, (32, 32, 3)), "label": SCHEMA.features["label"]})
CHUNK = 1000  # samples per Beam element (the writer accepts lists of samples)


def _png(pixels: np.ndarray) -> bytes:
    import io

    from PIL import Image as PILImage

    encoded = io.BytesIO()
    PILImage.fromarray(pixels).save(encoded, format="PNG")
    return encoded.getvalue()


def _chunks(start: int, num_records: int, png: bool) -> Iterator[list[Sample]]:
    rng = np.random.default_rng(start)
    images = (rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(start, min(start + CHUNK, num_records)))
    yield [Sample(f"{i:08d}", {"image": _png(image) if png else image, "label": i % 10})
           for i, image in enumerate(images, start)]


def build(path: str, num_records: int, file_format: FileFormat = FileFormat.TFRECORD, *, png: bool = False) -> None:
    """Writes the benchmark dataset in ``file_format`` with the project's writer (skipped when it
    already exists); with ``png``, its images PNG-encoded (``PNG_SCHEMA``)."""
    if already_built(path, num_records):
        return
    import apache_beam as beam

    from beam_tfrecord import ShardingConfig, WriteTFRecordDataset

    started = time.perf_counter()
    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create(list(range(0, num_records, CHUNK)))
             | beam.FlatMap(_chunks, num_records, png)
             | WriteTFRecordDataset(path, schema=PNG_SCHEMA if png else SCHEMA, sharding=ShardingConfig(num_shards=16),
                                    file_format=file_format))
    print(f"built {num_records} {file_format.value} records in {time.perf_counter() - started:.1f} s")


def tutorial(files: list[str]) -> Any:
    import tensorflow as tf

    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record: tf.Tensor) -> dict[str, tf.Tensor]:
        example = tf.io.parse_single_example(record, spec)
        example["image"] = tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), [32, 32, 3])
        return example

    return tf.data.TFRecordDataset(files).map(parse).batch(32)


def raw(files: list[str], batch_size: int) -> Any:
    import tensorflow as tf

    return tf.data.TFRecordDataset(files).batch(batch_size)


TORCH_BATCH = 256


def torch_modes(path: str, files: list[str]) -> dict[str, Callable[[], Iterable[Any]]]:
    """The PyTorch readers: ours (ready batches, and the per-example API) and the `tfrecord` package's."""
    import torch.utils.data
    from tfrecord import reader as tfrecord_reader

    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    class TFRecordPackage(torch.utils.data.IterableDataset):
        """The `tfrecord` package over the shards, each DataLoader worker reading every n-th file."""

        def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
            info = torch.utils.data.get_worker_info()
            worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
            for file in files[worker::workers]:
                yield from tfrecord_reader.tfrecord_loader(file, None, {"image": "byte", "label": "int"})

    def ours(workers: int) -> Iterable[Any]:
        return torch.utils.data.DataLoader(TFRecordIterableDataset(path, batch_size=TORCH_BATCH), batch_size=None,
                                           num_workers=workers)

    def package(workers: int) -> Iterable[Any]:
        return torch.utils.data.DataLoader(TFRecordPackage(), batch_size=TORCH_BATCH, num_workers=workers)

    num_batches = -(-len(TFRecordIterableDataset(path)) // TORCH_BATCH)
    return {"t0": lambda: ours(0), "t2": lambda: ours(2),
            "te0": lambda: torch.utils.data.DataLoader(TFRecordIterableDataset(path), batch_size=TORCH_BATCH),
            "p0": lambda: package(0), "p2": lambda: package(2),
            "h2": lambda: torch.utils.data.DataLoader(_ready_batches(num_batches), batch_size=None, num_workers=2)}


def _ready_batches(num_batches: int) -> Any:
    """An IterableDataset whose DataLoader workers yield fresh copies of one CIFAR-like batch, reading nothing."""
    import torch.utils.data

    class ReadyBatches(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = torch.utils.data.get_worker_info()
            worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
            image = np.zeros((TORCH_BATCH, 32, 32, 3), np.uint8)
            label = np.zeros(TORCH_BATCH, np.int64)
            for _ in range(worker, num_batches, workers):
                yield {"image": torch.from_numpy(image.copy()), "label": torch.from_numpy(label.copy())}

    return ReadyBatches()


JPEG_IMAGES = 15_000  # image_folder_build.py's images: 256-px JPEGs, resized to 128 px by both writers


def build_versus_litdata(small: str, num_records: int, jpeg: str) -> None:
    """Our datasets (the small records, the images) and LitData's ``optimize()`` output of the same data."""
    from image_folder_build import _litdata_child, _make_images

    build(small, num_records)
    if not os.path.exists(f"{small}-litdata/index.json"):
        from litdata import optimize

        optimize(fn=_litdata_small, inputs=[(start, num_records) for start in range(0, num_records, CHUNK)],
                 output_dir=f"{small}-litdata",
                 num_workers=len(os.sched_getaffinity(0)), chunk_bytes="64MB", verbose=False)
    images = os.path.join(os.path.dirname(jpeg), f"beam_tfrecord_images_{JPEG_IMAGES}_256")
    _make_images(images, JPEG_IMAGES)
    if not already_built(jpeg, JPEG_IMAGES):
        subprocess.run([sys.executable, "-m", "beam_tfrecord.cli", "build", "--input", images, "--output", jpeg,
                        "--resize", "128x128", "--progress", "none"], check=True)
    if not os.path.exists(f"{jpeg}-litdata/index.json"):
        _litdata_child(images, f"{jpeg}-litdata")


def _litdata_small(item: tuple[int, int]) -> Iterator[dict[str, Any]]:
    """LitData's ``fn``: the samples of one chunk of the small dataset (the same pixels and labels as ours)."""
    for chunk in _chunks(*item, png=False):
        for sample in chunk:
            yield {"image": sample.values["image"], "label": sample.values["label"]}


def litdata_modes(small: str, jpeg: str, worker_sessions: bool = False) -> tuple[
        dict[str, Callable[[], Iterable[Any]]], dict[str, Callable[[], Iterable[Any]]]]:
    """(image modes, small-record modes): ours and LitData's, 0 and 2 workers, bytes and decoded images
    (``worker_sessions``: each DataLoader worker in a session of its own, ``_own_session``)."""
    import torch.utils.data
    from litdata import StreamingDataLoader, StreamingDataset

    from beam_tfrecord.reader.options import ImageDecoding
    from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

    def ours(path: str, workers: int, decode: bool = False) -> Iterable[Any]:
        decoding = ImageDecoding() if decode else None
        dataset = TFRecordIterableDataset(path, batch_size=TORCH_BATCH, image_decoding=decoding)
        return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, worker_init_fn=init)

    def theirs(path: str, workers: int, decode: bool = False) -> Iterable[Any]:
        dataset = StreamingDataset(f"{path}-litdata", transform=_decoded if decode else None)
        return StreamingDataLoader(dataset, batch_size=TORCH_BATCH, num_workers=workers,
                                   collate_fn=None if decode else _listed, worker_init_fn=init)

    init = _own_session if worker_sessions else None

    images = {f"{who}{kind}{workers}": (lambda f=make, w=workers, d=kind == "d": f(jpeg, w, d))
              for workers in (0, 2) for kind in ("j", "d") for who, make in (("o", ours), ("l", theirs))}
    smalls = {f"{who}s{workers}": (lambda f=make, w=workers: f(small, w))
              for workers in (0, 2) for who, make in (("o", ours), ("l", theirs))}
    return images, smalls


def _own_session(_: int) -> None:
    """A DataLoader worker's ``worker_init_fn`` with ``--worker_sessions``: the worker starts a session of its own.

    Linux's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) shares the CPU between sessions,
    not processes: on a machine busy with other sessions, a loader's workers together get one session's share,
    whatever their number, so 2 workers cannot beat 0. In sessions of their own, each worker gets a share, as each
    gets a core on an idle machine. Applied to LitData's workers and ours alike.
    """
    os.setsid()


def _decoded(item: dict[str, Any]) -> dict[str, Any]:
    """LitData's ``transform``: the JPEG decoded to (128, 128, 3) uint8 by the decoder ``ImageDecoding()`` uses
    (simplejpeg when installed, else Pillow: ``JPEG_DECODER``), so that the readers are compared, not decoders."""
    import io

    import torch
    from PIL import Image as PILImage

    from beam_tfrecord.reader.decode.jpeg import simplejpeg

    if simplejpeg is not None:
        return {"image": torch.from_numpy(simplejpeg.decode_jpeg(item["image"], colorspace="RGB")),
                "label": item["label"]}
    with PILImage.open(io.BytesIO(item["image"])) as opened:
        pixels = np.asarray(opened.convert("RGB"), dtype=np.uint8)
    return {"image": torch.from_numpy(pixels.copy()), "label": item["label"]}


def _listed(items: list[dict[str, Any]]) -> dict[str, Any]:
    """LitData's batches of bytes as it hands them out: each item's memoryview (or bytes) in a list; labels and
    tensors stacked (torch's default collate cannot take memoryviews)."""
    from torch.utils.data import default_collate

    out = {name: [item[name] for item in items] for name in items[0]}
    return {name: values if isinstance(values[0], (bytes, memoryview)) else default_collate(values)
            for name, values in out.items()}


def measure(modes: dict[str, Callable[[], Iterable[Any]]], num_records: int,
            rounds: int) -> dict[str, tuple[float, float]]:
    """(records/s, CPU microseconds per record) of each mode: the best of ``rounds`` full passes.

    Passes are iterated from Python like a training loop. Rounds go mode after mode (a, b, c, a,
    b, c...), after one warm-up round, so that a busy moment on a shared machine hits every mode
    alike rather than one of them. CPU time (all threads of this process; DataLoader workers are
    other processes, not counted) is the noise-robust view.
    """
    best = {name: (float("inf"), float("inf")) for name in modes}
    for round_index in range(rounds + 1):
        for name, make in modes.items():
            dataset = make()
            started, cpu_started = time.perf_counter(), time.process_time()
            for _ in dataset:
                pass
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            if round_index:
                best[name] = (min(best[name][0], elapsed), min(best[name][1], cpu))
    return {name: (num_records / wall, cpu * 1e6 / num_records) for name, (wall, cpu) in best.items()}


def _child_rates(path: str, files: list[str], num_records: int, rounds: int,
                 png_path: str | None, jpeg: str | None = None,
                 worker_sessions: bool = False) -> dict[str, tuple[float, float]]:
    """The NumPy and PyTorch modes, timed in a child process without TensorFlow (see the module docstring)."""
    request = json.dumps({"path": path, "files": files, "records": num_records, "rounds": rounds,
                          "png_path": png_path, "jpeg": jpeg, "worker_sessions": worker_sessions})
    output = subprocess.run([sys.executable, __file__, "--child", request], check=True, capture_output=True,
                            text=True).stdout
    return {name: (rate, cpu) for name, (rate, cpu) in json.loads(output.splitlines()[-1]).items()}


def _child(request: str) -> None:
    args = json.loads(request)
    if args.get("jpeg"):
        images, smalls = litdata_modes(args["path"], args["jpeg"], args["worker_sessions"])
        rates = measure(images, JPEG_IMAGES, args["rounds"])
        rates.update(measure(smalls, args["records"], args["rounds"]))
        print(json.dumps(rates))
        return
    from beam_tfrecord.reader.numpy_reader import read_numpy

    modes: dict[str, Callable[[], Iterable[Any]]] = {"n": lambda: read_numpy(args["path"])}
    modes.update(torch_modes(args["path"], args["files"]))
    rates = measure(modes, args["records"], args["rounds"])
    if args["png_path"]:  # fewer records (PNG decoding is slow): timed apart, i2/i0 from the same rounds
        import torch.utils.data

        from beam_tfrecord.reader.options import ImageDecoding
        from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

        def decoding(workers: int) -> Iterable[Any]:
            dataset = TFRecordIterableDataset(args["png_path"], batch_size=TORCH_BATCH, image_decoding=ImageDecoding())
            return torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)

        rates.update(measure({"i0": lambda: decoding(0), "i2": lambda: decoding(2)},
                             load_manifest(args["png_path"]).num_written, args["rounds"]))
    print(json.dumps(rates))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--dir", default="/tmp/bt_read_bench")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip_torch", action="store_true", help="time only the tf.data readers")
    parser.add_argument("--images", action="store_true",
                        help="also time the PyTorch reader decoding PNG images (a fifth of the records)")
    parser.add_argument("--litdata", action="store_true",
                        help="ours against LitData's StreamingDataset on images and small records (needs litdata)")
    parser.add_argument("--jpeg_dir", default="/tmp/bt_read_jpeg", help="--litdata: our dataset of the JPEGs")
    parser.add_argument("--worker_sessions", action="store_true",
                        help="--litdata: each DataLoader worker in a session of its own (see _own_session)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the NumPy/PyTorch timing process
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return
    if args.litdata:
        versus_litdata(args.dir, args.records, args.jpeg_dir, args.rounds, args.worker_sessions)
        return

    build(args.dir, args.records)
    manifest = load_manifest(args.dir)
    files = [str(p) for p in shard_paths(args.dir, manifest, "train")]
    split = manifest.split("train")
    import tensorflow as tf

    from beam_tfrecord import read_dataset

    print(f"{split.num_records} records of {split.num_bytes / split.num_records / 1000:.2f} KB "
          f"in {len(files)} shards ({split.num_bytes / 1e6:.0f} MB), {os.cpu_count()} CPUs, TF {tf.__version__}")
    rates = measure({
        "a": lambda: tutorial(files),
        "b": lambda: raw(files, 1024),
        "b32": lambda: raw(files, 32),
        "c1024": lambda: read_dataset(args.dir, batch_size=1024),
        "c32": lambda: read_dataset(args.dir, batch_size=32),
    }, split.num_records, args.rounds)
    if not args.skip_torch:
        png_path = f"{args.dir}-png" if args.images else None
        if png_path:
            build(png_path, args.records // 5, png=True)
        rates.update(_child_rates(args.dir, files, split.num_records, args.rounds, png_path))
    labels = {"a": "(a) tutorial map(parse_single_example).batch(32)", "b": "(b) raw TFRecordDataset.batch(1024)",
              "b32": "(b) raw TFRecordDataset.batch(32)",
              "c1024": "(c) read_dataset(batch_size=1024)", "c32": "(c) read_dataset(batch_size=32)",
              "n": "(n) read_numpy, per example",
              "t0": f"(t) TFRecordIterableDataset(batch_size={TORCH_BATCH}), 0 workers",
              "t2": f"(t) TFRecordIterableDataset(batch_size={TORCH_BATCH}), 2 workers",
              "te0": f"(t) TFRecordIterableDataset, DataLoader(batch_size={TORCH_BATCH}), 0 w.",
              "p0": "(p) tfrecord package, 0 workers", "p2": "(p) tfrecord package, 2 workers",
              "h2": f"(h) handoff only: ready batches of {TORCH_BATCH}, 2 workers",
              "i0": "(i) PNG images decoded, batch_size=256, 0 workers",
              "i2": "(i) PNG images decoded, batch_size=256, 2 workers"}
    for name, label in labels.items():
        if name in rates:
            print(f"{label:<58} {rates[name][0]:>10,.0f} records/s  {rates[name][1]:5.2f} CPU us/record")
    a, b, b32, c1024, c32 = (rates[n][0] for n in ("a", "b", "b32", "c1024", "c32"))
    print(f"c/a = {c1024 / a:.2f} (batch 1024), {c32 / a:.2f} (batch 32)")
    print(f"c/b = {c1024 / b:.2f} (batch 1024), {c32 / b:.2f} (batch 32); raw batch(32) / raw batch(1024) = "
          f"{b32 / b:.2f}; c/b both at batch 32 = {c32 / b32:.2f}")
    if not args.skip_torch:
        t0, t2, te0, p0, p2, h2 = (rates[n][0] for n in ("t0", "t2", "te0", "p0", "p2", "h2"))
        print(f"t/p = {t0 / p0:.2f} (0 workers), {t2 / p2:.2f} (2 workers); per-example API / p = {te0 / p0:.2f}")
        print(f"t 2 workers / t 0 workers = {t2 / t0:.2f}; p 2 workers / p 0 workers = {p2 / p0:.2f}; "
              f"handoff only (h) / t 0 workers = {h2 / t0:.2f}")
    if "i0" in rates:
        print(f"PNG images decoded: 2 workers / 0 workers = {rates['i2'][0] / rates['i0'][0]:.2f}")
    print(f"load average during the run: {os.getloadavg()[1]:.1f} (5 min) on {os.cpu_count()} CPUs")


def versus_litdata(small: str, num_records: int, jpeg: str, rounds: int, worker_sessions: bool = False) -> None:
    """Prints ours and LitData's rates side by side, and the issue's ratios (issue 49)."""
    from image_folder_build import LITDATA_INSTALL, litdata_installed

    if not litdata_installed():
        sys.exit(f"--litdata needs litdata (for this benchmark only, in its own venv: {LITDATA_INSTALL})")
    build_versus_litdata(small, num_records, jpeg)
    rates = _child_rates(small, [], num_records, rounds, None, jpeg, worker_sessions)
    print(f"DataLoader batch {TORCH_BATCH}, best of {rounds} epochs, {os.cpu_count()} CPUs; records/s "
          "(CPU us/record of the main process)")
    rows = {"j": f"{JPEG_IMAGES} JPEGs 128 px, bytes", "d": f"{JPEG_IMAGES} JPEGs 128 px, decoded",
            "s": f"{num_records} records 32x32x3 uint8"}
    print(f"  {'':<34} {'workers':>7} {'ours':>18} {'LitData':>18} {'ours/LitData':>13}")
    for kind, label in rows.items():
        for workers in (0, 2):
            (o, o_cpu), (lit, l_cpu) = rates[f"o{kind}{workers}"], rates[f"l{kind}{workers}"]
            print(f"  {label:<34} {workers:>7} {o:>10,.0f} ({o_cpu:4.1f}) {lit:>10,.0f} ({l_cpu:4.1f}) "
                  f"{o / lit:>12.2f}x")
    from beam_tfrecord.reader.decode.jpeg import simplejpeg

    print(f"JPEGs decoded by {'simplejpeg' if simplejpeg is not None else 'Pillow'} in both readers")
    print(f"decoded images, ours 2 workers / ours 0 workers = {rates['od2'][0] / rates['od0'][0]:.2f} "
          f"(LitData: {rates['ld2'][0] / rates['ld0'][0]:.2f})")
    print(f"load average during the run: {os.getloadavg()[1]:.1f} (5 min) on {os.cpu_count()} CPUs; workers "
          f"{'each in a session of its own' if worker_sessions else 'in the loader session'}")


if __name__ == "__main__":
    main()

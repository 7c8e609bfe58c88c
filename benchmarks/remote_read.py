"""Remote read benchmark: each reader on gs:// behind a slow object store, against its local-disk speed.

A fake-gcs-server emulator holds the datasets; every request reaches it through the shaping proxy
of ``tests/gcs/flaky_proxy.py`` (its own process, 127.0.0.1 only): ``--latency_ms`` before each
answer's first byte and ``--connection_mb_s`` per connection, what a real bucket gives one
connection. Two workloads, built once locally with the project's writer (16 shards each):

  small:  ``--records`` CIFAR-like records (3.1 KB: a 32x32x3 uint8 Tensor and a ClassLabel)
  images: ``--images`` records of one ~``--image_kb`` KB encoded image (random bytes, not decoded) and a label

For each workload and reader (read_numpy per example; TFRecordIterableDataset with ready batches of
256, DataLoader(batch_size=None, num_workers=0)'s loop; read_dataset(batch_size=256)), in
interleaved rounds after a warm-up round (best pass kept), it times one epoch (the reader is made
before: its manifest read is not an epoch's cost; read_numpy, one call per epoch, is called untimed):

  local:   the reader on the local copy (page cache warm)
  gs:      the reader on gs:// through the proxy (default ``RemoteReads``: 16 connections, 8 MiB
           ranges, 256 MiB in flight)
  cached:  the reader on gs:// with ``cache_dir`` already filled by an earlier epoch (the warm-up)
  ranges:  16 threads reading the same objects in 8 MiB ranges through the proxy, no parsing
           (what the store gives; as records/s of the workload)

and prints records/s and the targets of issue 29: gs >= 0.8 x min(local, ranges) and
cached >= 0.9 x local; and the CPU seconds of each best epoch, in this process and in the store's
(proxy and emulator) processes, which share this machine's cores with the reader.

Run: python benchmarks/remote_read.py [--records 100000] [--images 2000] [--image_kb 150] [--rounds 3]
     [--latency_ms 40] [--connection_mb_s 50] [--dir /tmp/bt_remote_read]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "gcs")]

import numpy as np
import psutil
from measure import already_built

from beam_tfrecord import ClassLabel, DType, Sample, Scalar, Schema
from beam_tfrecord.core.units import MiB

IMAGE_SCHEMA = Schema(features={"image": Scalar(DType.BYTES), "label": ClassLabel(tuple(f"c{i}" for i in range(10)))})
READERS = ("numpy", "torch", "tf")
_PROXY = """
import sys, time
sys.path.insert(0, sys.argv[1])
from flaky_proxy import FlakyProxy
FlakyProxy(sys.argv[2], fault_fraction=0.0, seed=0, port=int(sys.argv[3]), lifetime_seconds=7200,
           latency_seconds=float(sys.argv[4]), bytes_per_second=float(sys.argv[5])).start()
time.sleep(7200)
"""


def build_images(path: str, count: int, image_bytes: int) -> None:
    """``count`` records of ~``image_bytes`` random bytes (+-10%) and a label, in 16 shards (once)."""
    if already_built(path, count):
        return
    import apache_beam as beam

    from beam_tfrecord import ShardingConfig, WriteTFRecordDataset

    def chunk(start: int) -> list[Sample]:
        rng = np.random.default_rng(start)
        return [Sample(f"{i:08d}", {"image": rng.bytes(int(image_bytes * rng.uniform(0.9, 1.1))), "label": i % 10})
                for i in range(start, min(start + 100, count))]

    with beam.Pipeline() as pipeline:
        _ = (pipeline
             | beam.Create(list(range(0, count, 100)))
             | beam.Map(chunk)
             | WriteTFRecordDataset(path, schema=IMAGE_SCHEMA, sharding=ShardingConfig(num_shards=16)))


def start_store(work: Path, *, latency_s: float, bytes_per_s: float) -> tuple[list[subprocess.Popen], str, str]:
    """The emulator and the shaping proxy in front of it (each its own process): (processes, emulator, proxy URL)."""
    from fixtures_gcs import free_port, launch_fake_gcs
    from flaky_proxy import wait_until_listening

    emulator_port, proxy_port = free_port(), free_port()
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    emulator = launch_fake_gcs(work, port=emulator_port, external_url=proxy_url)
    proxy = subprocess.Popen([sys.executable, "-c", _PROXY, os.path.join(ROOT, "tests", "gcs"),
                              f"http://127.0.0.1:{emulator_port}", str(proxy_port), str(latency_s), str(bytes_per_s)])
    wait_until_listening(proxy_url, timeout_seconds=20)
    return [proxy, emulator], f"http://127.0.0.1:{emulator_port}", proxy_url


def point_at(work: Path, url: str) -> None:
    """Points this process's Google Cloud clients at ``url`` (the emulator or the proxy)."""
    from fixtures_gcs import emulator_env

    from beam_tfrecord.storage import gcs

    os.environ.update(emulator_env(work, url))
    gcs.client.cache_clear()


def upload(local: str, remote: str) -> None:
    from beam_tfrecord import storage

    files = [p for p in sorted(Path(local).rglob("*")) if p.is_file()]

    def put(path: Path) -> None:
        with storage.open_write(f"{remote}/{path.relative_to(local).as_posix()}") as out:
            out.write(path.read_bytes())

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))


def reader_epochs(reader: str, path: str, **options: object) -> Callable[[], Iterable[Any]]:
    """A function giving one epoch of ``reader`` over the train split (opened once: the manifest is read
    when the reader is made, as in training, and only epochs are timed; ``read_numpy`` is one call per epoch)."""
    if reader == "numpy":
        from beam_tfrecord.reader.numpy_reader import read_numpy

        return lambda: read_numpy(path, **options)  # type: ignore[arg-type]
    if reader == "torch":
        from beam_tfrecord.reader.torch_dataset import TFRecordIterableDataset

        dataset = TFRecordIterableDataset(path, batch_size=256, **options)  # type: ignore[arg-type]
        return lambda: dataset
    from beam_tfrecord.reader.tf_data import read_dataset

    batches = read_dataset(path, batch_size=256, **options)  # type: ignore[arg-type]
    return lambda: batches


def count(reader: str, epoch: Iterable[Any]) -> int:
    """Records in one pass over ``epoch`` (bytes for ``Ranges``)."""
    if reader == "bytes":
        return sum(epoch)
    if reader == "numpy":
        return sum(1 for _ in epoch)
    if reader == "torch":
        return sum(len(batch["label"]) for batch in epoch)
    return sum(int(batch["label"].shape[0]) for batch in epoch)


class Ranges:
    """The store's own rate: every object in 8 MiB ranges on 16 threads, nothing kept (an "epoch" of bytes)."""

    def __init__(self, objects: list[tuple[str, int]]) -> None:
        self.objects = objects

    def __iter__(self) -> Iterator[int]:
        yield parallel_ranges(self.objects)


def parallel_ranges(paths: list[tuple[str, int]], *, connections: int = 16, range_bytes: int = 8 * MiB) -> int:
    """Reads every object in ``range_bytes`` ranges on ``connections`` threads, keeping nothing; the bytes read."""
    from beam_tfrecord.storage import gcs

    client = gcs.pooled_client(connections)
    ranges = [(path, start, min(start + range_bytes, size))
              for path, size in paths for start in range(0, size, range_bytes)]
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        return sum(pool.map(lambda r: len(gcs.read_range(r[0], r[1], r[2], through=client)), ranges))


def measure(modes: dict[str, tuple[str, Callable[[], Iterable[Any]]]], expected: dict[str, int], rounds: int,
            store: list[Any]) -> dict[str, tuple[float, float, float]]:
    """(seconds, CPU seconds of this process, CPU seconds of the store's processes) of the best epoch of
    each mode (``(reader, epochs)``) over ``rounds`` interleaved rounds, after a warm-up round (which
    also fills the cache); checks the counts. ``store``: the proxy's and the emulator's ``psutil.Process``."""

    def store_cpu() -> float:
        return sum(sum(process.cpu_times()[:2]) for process in store)

    best = {name: (float("inf"), 0.0, 0.0) for name in modes}
    for round_index in range(rounds + 1):
        for name, (reader, epochs) in modes.items():
            epoch = epochs()  # not timed: read_numpy's call reads the manifest
            started, own, theirs = time.perf_counter(), time.process_time(), store_cpu()
            got = count(reader, epoch)
            elapsed = time.perf_counter() - started
            if got != expected[name]:
                raise RuntimeError(f"{name}: {got} instead of {expected[name]}")
            if round_index and elapsed < best[name][0]:
                best[name] = (elapsed, time.process_time() - own, store_cpu() - theirs)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--image_kb", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency_ms", type=float, default=40.0)
    parser.add_argument("--connection_mb_s", type=float, default=50.0)
    parser.add_argument("--dir", default="/tmp/bt_remote_read")
    parser.add_argument("--readers", default=",".join(READERS))
    args = parser.parse_args(argv)
    readers = [r for r in args.readers.split(",") if r]

    from read_benchmark import build as build_small

    from beam_tfrecord.dataset import load_manifest
    from beam_tfrecord.remote_reads.options import COUNTERS

    workloads = {"small": os.path.join(args.dir, f"small-{args.records}"),
                 "images": os.path.join(args.dir, f"images-{args.images}x{args.image_kb}k")}
    build_small(workloads["small"], args.records)
    build_images(workloads["images"], args.images, args.image_kb * 1000)

    work = Path(tempfile.mkdtemp(prefix="bt-remote-read-"))
    processes, emulator_url, proxy_url = start_store(work, latency_s=args.latency_ms / 1000,
                                                     bytes_per_s=args.connection_mb_s * 1e6)
    try:
        from google.cloud import storage as cloud_storage

        point_at(work, emulator_url)  # uploads go straight to the emulator (not timed)
        cloud_storage.Client.create_anonymous_client().create_bucket("remote-read-bench")
        remote = {name: f"gs://remote-read-bench/{name}" for name in workloads}
        for name, local in workloads.items():
            upload(local, remote[name])
        point_at(work, proxy_url)
        print(f"store: fake-gcs-server behind the shaping proxy, {args.latency_ms:g} ms to first byte, "
              f"{args.connection_mb_s:g} MB/s per connection; rounds: {args.rounds} (+1 warm-up), best pass kept")
        for name, local in workloads.items():
            manifest = load_manifest(local)
            num_records = manifest.split("train").num_records
            shard_bytes = sum(s.num_bytes for s in manifest.split("train").shards)
            objects = [(f"{remote[name]}/{s.filename}", s.num_bytes) for s in manifest.split("train").shards]
            cache_dir = str(work / f"cache-{name}")
            ranges = Ranges(objects)
            modes: dict[str, tuple[str, Callable[[], Iterable[Any]]]] = {
                "ranges": ("bytes", lambda ranges=ranges: ranges)}
            expected = {"ranges": shard_bytes}
            for reader in readers:
                modes[f"local {reader}"] = (reader, reader_epochs(reader, local))
                modes[f"gs {reader}"] = (reader, reader_epochs(reader, remote[name]))
                modes[f"cached {reader}"] = (reader, reader_epochs(reader, remote[name], cache_dir=cache_dir))
                expected.update({f"{mode} {reader}": num_records for mode in ("local", "gs", "cached")})
            before = COUNTERS.snapshot()
            best = measure(modes, expected, args.rounds, [psutil.Process(p.pid) for p in processes])
            after = COUNTERS.snapshot()
            seconds = {mode: figures[0] for mode, figures in best.items()}
            rate = {mode: num_records / s for mode, s in seconds.items()}
            hits = after.get("cache_hits", 0) - before.get("cache_hits", 0)
            print(f"\n{name}: {num_records} records, {shard_bytes / 1e6:.0f} MB in {len(objects)} shards; "
                  f"ranges (16 x 8 MiB through the proxy): {shard_bytes / seconds['ranges'] / 1e6:.0f} MB/s "
                  f"= {rate['ranges']:,.0f} records/s; cache hits {hits}")
            for reader in readers:
                local_rate, gs_rate, cached_rate = (rate[f"{m} {reader}"] for m in ("local", "gs", "cached"))
                bound = min(local_rate, rate["ranges"])
                gs_ratio, cached_ratio = gs_rate / bound, cached_rate / local_rate
                print(f"  {reader:5s}  local {local_rate:>10,.0f}/s  gs {gs_rate:>10,.0f}/s  "
                      f"gs/min(local, ranges) {gs_ratio:.3f} ({'met' if gs_ratio >= 0.8 else 'NOT met'}: >= 0.8)  "
                      f"cached {cached_rate:>10,.0f}/s  cached/local {cached_ratio:.3f} "
                      f"({'met' if cached_ratio >= 0.9 else 'NOT met'}: >= 0.9)")
            print("  CPU seconds of the best epoch (this process / the proxy and emulator): " + ", ".join(
                f"{mode} {best[mode][1]:.2f}/{best[mode][2]:.2f}" for mode in modes))
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

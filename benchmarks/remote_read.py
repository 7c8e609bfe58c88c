"""Remote read benchmark: each reader on each object store behind a slow link, against its local-disk speed.

Each store of ``--stores`` (gs: fake-gcs-server; s3: moto's server; az: Azurite) holds the datasets in
turn; every request reaches it through the shaping proxy of ``tests/storage/flaky_proxy.py`` (its own
process, 127.0.0.1 only): ``--latency_ms`` before each answer's first byte and ``--connection_mb_s``
per connection, what a real bucket gives one connection. Three workloads, built once locally with the
project's writer (16 shards each):

  small:  ``--records`` CIFAR-like records (3.1 KB: a 32x32x3 uint8 Tensor and a ClassLabel)
  images: ``--images`` records of one ~``--image_kb`` KB encoded image (random bytes, not decoded) and a label
  array:  the small records in ArrayRecord shards (each reader waits for a whole fetched shard)

For each workload and reader (read_numpy per example; TFRecordIterableDataset with ready batches of
256, DataLoader(batch_size=None, num_workers=0)'s loop; read_dataset(batch_size=256)), in
interleaved rounds after a warm-up round (best pass kept), it times one epoch:

  local:   the reader on the local copy (page cache warm), made before (its manifest read untimed)
  remote:  the reader on the store through the proxy (default ``RemoteReads``), made before
  opened:  the reader made and read on the local copy, the open timed with the epoch
  cached:  the reader made and read on the store with ``cache_dir`` filled by the warm-up, the open timed
  ranges:  16 threads reading the same objects in 8 MiB ranges with the backend's ``ranged_reader``
           (obstore), no parsing (what the store gives)
  sdk:     the same ranges through the store's Python SDK (gs: google-cloud-storage; s3: boto3;
           az: azure-storage-blob)

and prints the targets of issue 46 per store and reader: remote / min(local, ranges) >= 0.8; the reader's
CPU seconds (this process) of the remote epoch / the local one <= 1.5; cached / opened >= 0.9; and this
process's CPU seconds per GB of each ranges client; then every store's figures side by side, with the most
remote / min(local, ranges) this machine allows: the remote epoch cannot be shorter than the reader's and the
store's (emulator and proxy) CPU seconds over all cores, and here the store shares the reader's cores.

With ``--roots``, real stores are measured instead (``gs://bucket/prefix,s3://bucket/prefix,az://container/prefix``,
their clients configured by the environment as for any job): the workloads are uploaded under each root once (a
later run reuses them), read over the real network with no proxy, and the store's CPU is not on this machine,
so the floor column is the reader's own. This is the run that settles issue 46's ratios; on a machine whose
emulators share the reader's cores, the floor column says which cells the cores allow.

Run: python benchmarks/remote_read.py [--stores gs,s3,az | --roots URI,...] [--records 100000] [--images 2000]
     [--image_kb 150] [--workloads small,images,array] [--rounds 3] [--readers numpy,torch,tf] [--latency_ms 40]
     [--connection_mb_s 50] [--dir /tmp/bt_remote_read]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
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
sys.path[:0] = [HERE, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "storage")]

import numpy as np
import psutil
from measure import already_built

from beam_tfrecord import ClassLabel, DType, Sample, Scalar, Schema
from beam_tfrecord.core.file_format import FileFormat
from beam_tfrecord.core.units import MiB
from beam_tfrecord.storage.backend import RangedRead

IMAGE_SCHEMA = Schema(features={"image": Scalar(DType.BYTES), "label": ClassLabel(tuple(f"c{i}" for i in range(10)))})
READERS = ("numpy", "torch", "tf")
STORES = ("gs", "s3", "az")
STORE_SERVERS = {"gs": "fake-gcs-server", "s3": "moto's S3 server", "az": "Azurite"}
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


def start_store(store: str, work: Path, *, latency_s: float,
                bytes_per_s: float) -> tuple[list[subprocess.Popen], str, str]:
    """The emulator and the shaping proxy in front of it (each its own process): (processes, emulator, proxy URL)."""
    from fixtures_gcs import free_port, launch_fake_gcs
    from fixtures_stores import launch_azurite, launch_moto
    from flaky_proxy import wait_until_listening

    emulator_port, proxy_port = free_port(), free_port()
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    if store == "gs":  # the proxy's address: its XML API (obstore's reads) answered through the proxy
        emulator = launch_fake_gcs(work, port=emulator_port, external_url=proxy_url)
    else:
        emulator = (launch_moto if store == "s3" else launch_azurite)(work, emulator_port)
    proxy = subprocess.Popen([sys.executable, "-c", _PROXY, os.path.join(ROOT, "tests", "storage"),
                              f"http://127.0.0.1:{emulator_port}", str(proxy_port), str(latency_s), str(bytes_per_s)])
    wait_until_listening(proxy_url, timeout_seconds=20)
    return [proxy, emulator], f"http://127.0.0.1:{emulator_port}", proxy_url


def point_at(store: str, work: Path, url: str) -> None:
    """Points this process's clients of ``store`` at ``url`` (the emulator or the proxy)."""
    from fixtures_gcs import emulator_env
    from fixtures_stores import azure_env, s3_env

    os.environ.update({"gs": lambda: emulator_env(work, url), "s3": lambda: s3_env(url),
                       "az": lambda: azure_env(url)}[store]())  # every store's clients are made per endpoint


def create_bucket(store: str, name: str) -> str:
    """A new bucket (container) on the store the clients point at: its root path."""
    if store == "gs":
        from google.cloud import storage as cloud_storage

        cloud_storage.Client.create_anonymous_client().create_bucket(name)
    elif store == "s3":
        from beam_tfrecord.storage import s3

        s3.client().create_bucket(Bucket=name)
    else:
        from beam_tfrecord.storage import azure_blob

        azure_blob.service(None).create_container(name)
    return f"{store}://{name}"


def upload(local: str, remote: str) -> None:
    """The dataset at ``local`` copied to ``remote``, its manifest last (a dataset only once whole)."""
    from beam_tfrecord import storage

    files = [p for p in sorted(Path(local).rglob("*")) if p.is_file()]

    def put(path: Path) -> None:
        with storage.open_write(f"{remote}/{path.relative_to(local).as_posix()}") as out:
            out.write(path.read_bytes())

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, [p for p in files if p.name != "manifest.json"]))
    put(Path(local, "manifest.json"))


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

    def __init__(self, objects: list[tuple[str, int]], *, client: str = "backend") -> None:
        self.objects = objects
        self.client = client

    def __iter__(self) -> Iterator[int]:
        read = {"backend": backend_reader, "sdk": sdk_reader}[self.client]
        yield parallel_ranges(self.objects, read(self.objects[0][0], 16))


def backend_reader(path: str, connections: int) -> RangedRead:
    """The storage backend's ranged reads, as the readers fetch (obstore on every store)."""
    from beam_tfrecord import storage

    return storage.backend_for(path).ranged_reader(connections)


def sdk_reader(path: str, connections: int) -> RangedRead:
    """Ranged reads through the store's Python SDK (gs: google-cloud-storage; s3: boto3; az: azure-storage-blob),
    for the comparison."""
    if path.startswith("gs://"):
        return gcs_sdk_ranges(connections)
    from beam_tfrecord.storage import azure_blob, s3

    return (s3 if path.startswith("s3://") else azure_blob).sdk_ranges(connections)


def gcs_sdk_ranges(connections: int) -> RangedRead:
    """google-cloud-storage's ranged reads as the readers made them before obstore: ``connections`` pooled,
    the answer read in one call (``single_shot_download``), no checksum, the stored bytes."""
    import io

    import requests.adapters
    from google.cloud.storage import Client

    from beam_tfrecord.storage import gcs

    client = Client()
    client._http.mount("http://", requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=connections))
    client._http.mount("https://", requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=connections))

    def read(path: str, start: int, stop: int) -> bytes:
        bucket, name = gcs.split(path)
        out = io.BytesIO()
        client.bucket(bucket).blob(name).download_to_file(out, start=start, end=stop - 1, raw_download=True,
                                                          checksum=None, single_shot_download=True)
        return out.getbuffer()  # type: ignore[return-value]  # a view, not a copy

    return read


def parallel_ranges(paths: list[tuple[str, int]], read: RangedRead, *, connections: int = 16,
                    range_bytes: int = 8 * MiB) -> int:
    """Reads every object in ``range_bytes`` ranges on ``connections`` threads, keeping nothing; the bytes read."""
    ranges = [(path, start, min(start + range_bytes, size))
              for path, size in paths for start in range(0, size, range_bytes)]
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        return sum(pool.map(lambda r: len(memoryview(read(*r))), ranges))


Mode = tuple[str, Callable[[], Iterable[Any]], bool]  # (reader, one epoch's iterable, the call timed)


def measure(modes: dict[str, Mode], expected: dict[str, int], rounds: int,
            store: list[Any]) -> dict[str, tuple[float, float, float]]:
    """(seconds, CPU seconds of this process, CPU seconds of the store's processes) of the best epoch of
    each mode (``(reader, epochs, open_timed)``) over ``rounds`` interleaved rounds, after a warm-up round (which
    also fills the cache); checks the counts. ``store``: the proxy's and the emulator's ``psutil.Process``."""

    def store_cpu() -> float:
        return sum(sum(process.cpu_times()[:2]) for process in store)

    best = {name: (float("inf"), 0.0, 0.0) for name in modes}
    for round_index in range(rounds + 1):
        for name, (reader, epochs, open_timed) in modes.items():
            epoch = None if open_timed else epochs()  # untimed: the reader made before (its manifest read)
            started, own, theirs = time.perf_counter(), time.process_time(), store_cpu()
            got = count(reader, epochs() if epoch is None else epoch)
            elapsed = time.perf_counter() - started
            if got != expected[name]:
                raise RuntimeError(f"{name}: {got} instead of {expected[name]}")
            if round_index and elapsed < best[name][0]:
                best[name] = (elapsed, time.process_time() - own, store_cpu() - theirs)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--image_kb", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency_ms", type=float, default=40.0)
    parser.add_argument("--connection_mb_s", type=float, default=50.0)
    parser.add_argument("--dir", default="/tmp/bt_remote_read")
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--workloads", default="small,images,array")
    parser.add_argument("--roots", default="", help="real stores' roots to measure instead of the emulators "
                        "(gs://bucket/prefix,s3://...,az://...; credentials from the environment)")
    args = parser.parse_args(argv)
    readers = [r for r in args.readers.split(",") if r]

    from read_benchmark import build as build_small

    workloads = {"small": os.path.join(args.dir, f"small-{args.records}"),
                 "images": os.path.join(args.dir, f"images-{args.images}x{args.image_kb}k"),
                 "array": os.path.join(args.dir, f"array-{args.records}")}
    workloads = {name: path for name, path in workloads.items() if name in args.workloads.split(",")}
    if "small" in workloads:
        build_small(workloads["small"], args.records)
    if "images" in workloads:
        build_images(workloads["images"], args.images, args.image_kb * 1000)
    if "array" in workloads:
        build_small(workloads["array"], args.records, FileFormat.ARRAY_RECORD)
    shaping = (f"proxy: {args.latency_ms:g} ms to first byte, {args.connection_mb_s:g} MB/s per connection"
               if not args.roots else "real stores, no proxy")
    print(f"{shaping}; rounds: {args.rounds} (+1 warm-up), best pass kept")
    table: list[str] = []
    stores = [s for s in args.stores.split(",") if s]
    for store in [r.rstrip("/") for r in args.roots.split(",") if r] or stores:
        work = Path(tempfile.mkdtemp(prefix="bt-remote-read-"))
        try:
            where = real(store, workloads) if "://" in store else emulated(store, work, workloads, args)
            table += measure_store(store, where, workloads, readers, args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print("\nside by side: remote/min(local, ranges) (>= 0.8) | CPU remote/local (<= 1.5) | "
          "cached+open/local+open (>= 0.9) | the most remote/min(...) this machine's cores allow, from the CPU "
          "seconds of the reader and the store")
    print("\n".join(table))


def _verdict(value: float, target: float, *, at_most: bool = False) -> str:
    met = value <= target if at_most else value >= target
    return f"{value:.2f}{'' if met else ' (NOT met)'}"


@contextlib.contextmanager
def emulated(store: str, work: Path, workloads: dict[str, str],
             args: argparse.Namespace) -> Iterator[tuple[str, list[psutil.Process]]]:
    """``store``'s emulator behind the shaping proxy (started here, stopped at the end) holding the workloads:
    (the root they are under, the emulator's and the proxy's processes)."""
    processes, emulator_url, proxy_url = start_store(store, work, latency_s=args.latency_ms / 1000,
                                                     bytes_per_s=args.connection_mb_s * 1e6)
    try:
        point_at(store, work, emulator_url)  # uploads go straight to the emulator (not timed)
        bucket = create_bucket(store, "remote-read-bench")
        for local in workloads.values():
            upload(local, f"{bucket}/{os.path.basename(local)}")
        point_at(store, work, proxy_url)
        print(f"\n== {store}: {STORE_SERVERS[store]} behind the shaping proxy")
        yield bucket, [psutil.Process(p.pid) for p in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def real(root: str, workloads: dict[str, str]) -> Iterator[tuple[str, list[psutil.Process]]]:
    """A real store's ``root`` (its clients configured by the environment, as for any job), the workloads
    uploaded under it unless a run did before: (``root``, no process of this machine)."""
    from beam_tfrecord import storage

    for local in workloads.values():
        remote = f"{root}/{os.path.basename(local)}"
        if not storage.exists(f"{remote}/manifest.json"):
            print(f"uploading {local} to {remote}")
            upload(local, remote)
    print(f"\n== {root}: a real store, its own network (no proxy), its CPU not on this machine")
    yield root, []


def measure_store(store: str, where: contextlib.AbstractContextManager[tuple[str, list[psutil.Process]]],
                  workloads: dict[str, str], readers: list[str], args: argparse.Namespace, work: Path) -> list[str]:
    """Every workload and reader on ``store`` (its scheme, or a real store's root) as ``where`` gives it: its
    lines of the side-by-side table."""
    from beam_tfrecord.dataset import load_manifest
    from beam_tfrecord.remote_reads.options import COUNTERS

    table = []
    with where as (root, store_processes):
        remote = {name: f"{root}/{os.path.basename(local)}" for name, local in workloads.items()}
        for name, local in workloads.items():
            manifest = load_manifest(local)
            num_records = manifest.split("train").num_records
            shard_bytes = sum(s.num_bytes for s in manifest.split("train").shards)
            objects = [(f"{remote[name]}/{s.filename}", s.num_bytes) for s in manifest.split("train").shards]
            cache_dir = str(work / f"cache-{name}")
            clients = {"ranges": Ranges(objects), "sdk": Ranges(objects, client="sdk")}
            modes: dict[str, Mode] = {mode: ("bytes", lambda ranges=ranges: ranges, False)
                                      for mode, ranges in clients.items()}
            expected = dict.fromkeys(clients, shard_bytes)
            for reader in readers:
                modes[f"local {reader}"] = (reader, reader_epochs(reader, local), False)
                modes[f"remote {reader}"] = (reader, reader_epochs(reader, remote[name]), False)
                modes[f"opened {reader}"] = (reader, lambda r=reader, at=local: reader_epochs(r, at)(), True)
                modes[f"cached {reader}"] = (reader, lambda r=reader, at=remote[name], cache=cache_dir:
                                             reader_epochs(r, at, cache_dir=cache)(), True)
                expected.update({f"{mode} {reader}": num_records for mode in ("local", "remote", "opened", "cached")})
            before = COUNTERS.snapshot()
            best = measure(modes, expected, args.rounds, store_processes)
            after = COUNTERS.snapshot()
            seconds = {mode: figures[0] for mode, figures in best.items()}
            rate = {mode: num_records / s for mode, s in seconds.items()}
            hits = after.get("cache_hits", 0) - before.get("cache_hits", 0)
            print(f"\n{store} {name}: {num_records} records, {shard_bytes / 1e6:.0f} MB in {len(objects)} shards; "
                  f"cache hits {hits}")
            for mode in clients:
                print(f"  {mode:8s} (16 x 8 MiB, no parsing): {shard_bytes / seconds[mode] / 1e6:.0f} MB/s = "
                      f"{rate[mode]:,.0f} records/s; {best[mode][1] / shard_bytes * 1e9:.2f} CPU s/GB in this process")
            for reader in readers:
                local_rate, remote_rate = rate[f"local {reader}"], rate[f"remote {reader}"]
                remote_ratio = remote_rate / min(local_rate, rate["ranges"])
                cpu_ratio = best[f"remote {reader}"][1] / best[f"local {reader}"][1]
                cached_ratio = rate[f"cached {reader}"] / rate[f"opened {reader}"]
                # The most remote_ratio this machine allows: the epoch cannot be shorter than the reader's and the
                # store's CPU seconds spread over every core (a real store's CPU is not on the reader's machine).
                floor_s = (best[f"remote {reader}"][1] + best[f"remote {reader}"][2]) / (os.cpu_count() or 1)
                ceiling = num_records / floor_s / min(local_rate, rate["ranges"])
                print(f"  {reader:5s}  local {local_rate:>9,.0f}/s  {store} {remote_rate:>9,.0f}/s  "
                      f"cached+open {rate[f'cached {reader}']:>9,.0f}/s  local+open {rate[f'opened {reader}']:>9,.0f}/s"
                      f"  CPU s local {best[f'local {reader}'][1]:.2f} {store} {best[f'remote {reader}'][1]:.2f}")
                table.append(f"  {store} {name:6s} {reader:5s}  {_verdict(remote_ratio, 0.8):>14s} | "
                             f"{_verdict(cpu_ratio, 1.5, at_most=True):>14s} | {_verdict(cached_ratio, 0.9):>14s} | "
                             f"{ceiling:.2f}")
            print("  CPU seconds of the best epoch (this process / the proxy and emulator): " + ", ".join(
                f"{mode} {best[mode][1]:.2f}/{best[mode][2]:.2f}" for mode in modes))
    return table


if __name__ == "__main__":
    main()

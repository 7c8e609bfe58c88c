"""Forked DataLoader workers on object stores: an epoch under fork against one under forkserver, after the main
process read the dataset (a training script's validation pass).

Each store of ``--stores`` (gs: fake-gcs-server; s3: moto's server; az: Azurite) holds the images workload of
``benchmarks/remote_read.py`` (``--images`` records of ~``--image_kb`` KB, 16 shards) behind its shaping proxy
(``--latency_ms`` before each answer, ``--connection_mb_s`` per connection). The main process reads it once with
``read_numpy``; then three DataLoaders of ``TFRecordIterableDataset(batch_size=256)`` with 2 persistent workers
read it, in interleaved rounds:

  fork:         PyTorch's default start method: the workers load a private copy of obstore's extension
                (``storage/obstore_runtime.py``), the fix kept
  fork+sdk:     the other fork-safe option measured: the workers read ranges through the store's Python SDK
                (google-cloud-storage, boto3, azure-storage-blob: made per process) instead of obstore
  forkserver:   workers forked from a server that imported torch and beam_tfrecord first (the reference)

It prints, per store and start method, the first epoch (the workers' start inside it) and the median of the later
epochs, and fork / forkserver of the later epochs (issue 64's target: within 10%).

Run: python benchmarks/forked_readers.py [--stores gs,s3,az] [--images 1000] [--image_kb 150] [--rounds 4]
     [--latency_ms 40] [--connection_mb_s 50] [--dir /tmp/bt_forked_readers]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from remote_read import build_images, emulated

VARIANTS = ("fork", "fork+sdk", "forkserver")


def sdk_ranges_in_worker(worker_id: int) -> None:
    """A DataLoader worker's ``worker_init_fn`` for ``fork+sdk``: every store's ranged reads through its SDK client
    (the base class's ``read_range``), as a child that could not use obstore would read."""
    del worker_id
    from beam_tfrecord.storage.azure_blob import AzureBlobBackend
    from beam_tfrecord.storage.backend import StorageBackend
    from beam_tfrecord.storage.gcs_backend import GcsBackend
    from beam_tfrecord.storage.s3 import S3Backend

    for backend in (GcsBackend, S3Backend, AzureBlobBackend):
        backend.ranged_reader = StorageBackend.ranged_reader  # type: ignore[method-assign]


def loader(path: str, variant: str) -> object:
    import torch.utils.data

    from beam_tfrecord import TFRecordIterableDataset

    return torch.utils.data.DataLoader(
        TFRecordIterableDataset(path, split="train", batch_size=256), batch_size=None, num_workers=2,
        persistent_workers=True, multiprocessing_context=variant.split("+")[0], timeout=120,
        worker_init_fn=sdk_ranges_in_worker if variant == "fork+sdk" else None)


def epoch_seconds(reader: object, expected: int) -> float:
    start = time.perf_counter()
    count = sum(len(batch["label"]) for batch in reader)  # type: ignore[attr-defined]
    if count != expected:
        raise RuntimeError(f"an epoch gave {count} records, expected {expected}")
    return time.perf_counter() - start


def measure(path: str, rounds: int) -> dict[str, list[float]]:
    """Per variant, the seconds of each epoch (the first one with the workers' start), rounds interleaved."""
    from beam_tfrecord import read_numpy

    expected = sum(1 for _ in read_numpy(path, split="train"))  # the main process's read: obstore starts here
    readers = {variant: loader(path, variant) for variant in VARIANTS}
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(rounds):
        for variant, reader in readers.items():
            seconds[variant].append(epoch_seconds(reader, expected))
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="gs,s3,az")
    parser.add_argument("--images", type=int, default=1_000)
    parser.add_argument("--image_kb", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--latency_ms", type=float, default=40.0)
    parser.add_argument("--connection_mb_s", type=float, default=50.0)
    parser.add_argument("--dir", default="/tmp/bt_forked_readers")
    args = parser.parse_args(argv)
    multiprocessing.set_forkserver_preload(["torch", "beam_tfrecord"])
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    images = str(work / "images")
    build_images(images, args.images, args.image_kb * 1000)
    stores = args.stores.split(",")
    if len(stores) > 1:
        print(f"images: {args.images} records of ~{args.image_kb} KB; 2 persistent DataLoader workers; "
              f"{args.rounds} epochs each, interleaved", flush=True)
        for store in stores:  # one process per store: a forkserver keeps the environment (the store's) it started with
            subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                            "--stores", store], check=True)
        return
    store = stores[0]
    with emulated(store, work, {"images": images}, args) as (bucket, _):
        seconds = measure(f"{bucket}/images", args.rounds)
    later = {variant: statistics.median(values[1:]) for variant, values in seconds.items()}
    for variant, values in seconds.items():
        print(f"  {store} {variant:<11} first epoch {values[0]:6.2f} s   later epochs (median) {later[variant]:6.2f} "
              f"s   all: {' '.join(f'{v:.2f}' for v in values)}")
    ratio = later["fork"] / later["forkserver"]
    print(f"  {store} fork / forkserver (later epochs): {ratio:.2f} {'(within 10%)' if ratio <= 1.1 else '(NOT met)'}"
          f"; fork+sdk / forkserver: {later['fork+sdk'] / later['forkserver']:.2f}", flush=True)


if __name__ == "__main__":
    main()

"""The CPU that new files cost the kernel, by the size of each write: what a build's spill runs pay.

    python benchmarks/page_cache_writes.py                          # 1.5 GB, 64 KiB and 1 MiB writes, 3 rounds
    python benchmarks/page_cache_writes.py --gb 3 --sizes 65536,262144,1048576 --pause 6

Each variant writes ``--gb`` GB of new 64 MiB files (as a build's spill runs: ``core.runs.write_run`` through
``storage.open_write``), then deletes them; the variants alternate, each after ``--pause`` seconds, so that
the memory the previous one freed has gone back to a VM's host (free page reporting) and every variant
starts on the same kind of memory. The size ``storage`` uses goes through ``storage.open_write`` itself,
the others through ``os.write`` calls of that size. Prints each variant's CPU seconds per GB (the process's
user + system time: the copy into the page cache is the kernel's), median of the rounds, and its ratio to
``storage.open_write``'s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time

from beam_tfrecord import storage
from beam_tfrecord.storage.local import WRITE_BYTES

FILE_BYTES = 64 << 20
CHUNK_BYTES = 1 << 20  # what a caller hands over at once (``write_run`` joins entries into 1 MiB)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _write_files(folder: str, total_bytes: int, write_bytes: int, chunk: bytes) -> None:
    for number in range(total_bytes // FILE_BYTES):
        path = os.path.join(folder, f"run-{number:04d}")
        if write_bytes == WRITE_BYTES:
            with storage.open_write(path) as handle:
                for _ in range(FILE_BYTES // len(chunk)):
                    handle.write(chunk)
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(chunk)
            for _ in range(FILE_BYTES // len(chunk)):
                for at in range(0, len(view), write_bytes):
                    os.write(fd, view[at:at + write_bytes])
        finally:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.5, help="GB of new files per variant and round")
    parser.add_argument("--sizes", default=f"{WRITE_BYTES},{CHUNK_BYTES}", help="bytes per write system call")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=6.0, help="seconds before each variant")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the files go (a local disk)")
    args = parser.parse_args()

    sizes = [int(size) for size in args.sizes.split(",")]
    total = int(args.gb * 1e9) // FILE_BYTES * FILE_BYTES
    chunk = os.urandom(CHUNK_BYTES)
    costs: dict[int, list[float]] = {size: [] for size in sizes}
    for round_number in range(args.rounds):
        for size in sizes if round_number % 2 == 0 else sizes[::-1]:
            folder = tempfile.mkdtemp(prefix="page-cache-writes-", dir=args.dir)
            try:
                time.sleep(args.pause)
                start = _cpu_seconds()
                _write_files(folder, total, size, chunk)
                costs[size].append((_cpu_seconds() - start) / (total / 1e9))
            finally:
                shutil.rmtree(folder)
            print(f"  round {round_number + 1}, {size:>8} B writes: {costs[size][-1]:.2f} CPU-s per GB", flush=True)
    base = statistics.median(costs[WRITE_BYTES]) if WRITE_BYTES in costs else None
    print(f"\n{total / 1e9:.2f} GB of new {FILE_BYTES >> 20} MiB files per variant, median of {args.rounds} rounds:")
    for size in sizes:
        median = statistics.median(costs[size])
        ratio = f"  {median / base:.2f}x storage.open_write's" if base else ""
        used = "  (storage.open_write)" if size == WRITE_BYTES else ""
        print(f"  {size:>8} B writes: {median:.2f} CPU-s per GB{ratio}{used}")


if __name__ == "__main__":
    main()

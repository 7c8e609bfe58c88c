"""The benchmark workloads: the same data for every variant, generated deterministically.

small: N records of a 32x32x3 uint8 image (raw bytes) + an int64 label, generated in chunks.
blobs: files of ~200 KB random bytes on disk, one record per file (bytes + label).
"""

from __future__ import annotations

import os

import numpy as np

CHUNK = 1_000
IMAGE_SHAPE = (32, 32, 3)


def small_chunk(index: int, total: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Keys, images [n, 32, 32, 3] uint8 and labels [n] of chunk ``index`` of a ``total``-record workload."""
    start = index * CHUNK
    n = max(0, min(CHUNK, total - start))
    rng = np.random.default_rng(index)
    images = rng.integers(0, 256, size=(n, *IMAGE_SHAPE), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n)
    return [f"small/{start + i:08d}" for i in range(n)], images, labels


def num_chunks(total: int) -> int:
    return (total + CHUNK - 1) // CHUNK


def make_blob_files(root: str, count: int, size_bytes: int) -> list[str]:
    """Writes ``count`` random files of ``size_bytes`` (+-10%) under root (once); returns their paths."""
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(7)
    paths = []
    for i in range(count):
        path = os.path.join(root, f"blob-{i:06d}.bin")
        if not os.path.exists(path):
            size = int(size_bytes * rng.uniform(0.9, 1.1))
            with open(path, "wb") as handle:
                handle.write(rng.bytes(size))
        else:
            rng.uniform(0.9, 1.1)
        paths.append(path)
    return paths

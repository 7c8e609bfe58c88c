"""Seeded files of random bytes for the writer's tests: the same files on every machine and in every run."""

from __future__ import annotations

import os

import numpy as np


def write_random_files(root: str, count: int, min_bytes: int, max_bytes: int, *, seed: int,
                       name: str = "blob-{:03d}.bin") -> list[str]:
    """``count`` files under ``root`` named ``name.format(i)``, each of a size drawn in ``[min_bytes, max_bytes)``
    then of that many random bytes (one seeded generator for all); their paths, in order."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = os.path.join(root, name.format(i))
        with open(path, "wb") as handle:
            handle.write(rng.bytes(int(rng.integers(min_bytes, max_bytes))))
        paths.append(path)
    return paths

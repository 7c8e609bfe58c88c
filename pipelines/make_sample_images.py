"""Writes a small labelled image folder (ROOT/<class>/<n>.jpg) for demos and tests. Deterministic."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence

import numpy as np
from PIL import Image

CLASSES = ("circle", "square", "stripes")


def _image(kind: str, rng: np.random.Generator, size: int) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size]
    color = rng.integers(64, 256, size=3)
    noise = rng.integers(0, 40, size=(size, size, 3))
    cx, cy, r = rng.integers(size // 4, 3 * size // 4, size=3) // 1
    if kind == "circle":
        mask = (x - cx) ** 2 + (y - cy) ** 2 < (r // 2 + 4) ** 2
    elif kind == "square":
        mask = (abs(x - cx) < r // 2 + 4) & (abs(y - cy) < r // 2 + 4)
    else:
        mask = ((x + y) // 6) % 2 == 0
    pixels = noise + mask[..., None] * color
    return np.clip(pixels, 0, 255).astype(np.uint8)


def write_sample_images(root: str, *, per_class: int = 100, size: int = 64, seed: int = 0) -> int:
    """Writes ``per_class`` JPEGs for each class under root; returns the number of files written."""
    rng = np.random.default_rng(seed)
    count = 0
    for kind in CLASSES:
        os.makedirs(os.path.join(root, kind), exist_ok=True)
        for i in range(per_class):
            buffer = io.BytesIO()
            Image.fromarray(_image(kind, rng, size)).save(buffer, format="JPEG", quality=90)
            with open(os.path.join(root, kind, f"{i:04d}.jpg"), "wb") as handle:
                handle.write(buffer.getvalue())
            count += 1
    return count


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True, help="folder to write ROOT/<class>/<n>.jpg into")
    parser.add_argument("--per_class", type=int, default=100)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    count = write_sample_images(args.output, per_class=args.per_class, size=args.size, seed=args.seed)
    print(f"wrote {count} sample images in {len(CLASSES)} classes under {args.output}")
    return count


if __name__ == "__main__":
    run(sys.argv[1:])

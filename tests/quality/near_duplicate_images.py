"""Distinct natural-looking images and planted copies of them (re-encoded, resized, cropped), seeded.

Used by tests/quality and benchmarks/near_duplicates.py. Distinct images are random smooth colour fields
with random shapes and noise: no two alike, unlike pipelines.make_sample_images' shapes (alike by design).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

COPY_KINDS = ("jpeg_quality", "resize", "crop")


def distinct_image(rng: np.random.Generator, size: tuple[int, int] = (160, 120)) -> Image.Image:
    """A random smooth RGB field (a few low-frequency waves per channel), 3-8 random shapes, pixel noise."""
    width, height = size
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    pixels = np.zeros((height, width, 3))
    for channel in range(3):
        for _ in range(3):
            fx, fy = rng.uniform(0.3, 4.0, size=2)
            phase = rng.uniform(0, 2 * np.pi)
            pixels[..., channel] += rng.uniform(20, 60) * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
        pixels[..., channel] += rng.uniform(60, 200)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 9))):
        x0, x1 = sorted(rng.integers(0, width, size=2))
        y0, y1 = sorted(rng.integers(0, height, size=2))
        fill = tuple(int(c) for c in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1 + 8, y1 + 8), fill=fill)
        else:
            draw.polygon([tuple(int(v) for v in rng.integers(0, (width, height))) for _ in range(3)], fill=fill)
    noisy = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, size=(height, width, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def planted_copy(image: Image.Image, kind: str, rng: np.random.Generator) -> bytes:
    """A copy of ``image`` (JPEG): re-encoded at quality 30-70, resized by 0.5x-2x, or cropped by up to 5%."""
    width, height = image.size
    if kind == "jpeg_quality":
        return jpeg(image, int(rng.integers(30, 71)))
    if kind == "resize":
        scale = float(2 ** rng.uniform(-1, 1))
        return jpeg(image.resize((max(8, round(width * scale)), max(8, round(height * scale))),
                                 Image.Resampling.BILINEAR))
    if kind == "crop":
        cut_x, cut_y = (int(rng.integers(0, max(1, int(side * 0.05)) + 1)) for side in (width, height))
        left, top = int(rng.integers(0, cut_x + 1)), int(rng.integers(0, cut_y + 1))
        return jpeg(image.crop((left, top, width - (cut_x - left), height - (cut_y - top))))
    raise ValueError(f"copy kind {kind!r}: expected one of {COPY_KINDS}")

"""Image folders: ``root/<label>/<file>`` -> samples ``{"image": <bytes>, "label": <class>}``.

Class names are the sub-folder names, sorted; they are listed when the pipeline is built (so
they can go into the schema and manifest), and files are listed again by the pipeline itself.
Image bytes are passed through unchanged by default: each sample carries a FileRef that the encoder
reads. To decode, resize and re-encode instead, give the writer ``feature_transforms={"image":
ResizeImage(...)}`` and build the schema with ``image_folder_schema(..., resize=...)``.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterator

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.core.image_ops import ResizeImage
from beam_tfrecord.core.samples import FileRef, Sample
from beam_tfrecord.core.schema import ClassLabel, Image, ImageFormat, Schema
from beam_tfrecord.errors import SchemaError

IMAGE_EXTENSIONS: dict[str, ImageFormat] = {".jpg": ImageFormat.JPEG, ".jpeg": ImageFormat.JPEG,
                                            ".png": ImageFormat.PNG, ".gif": ImageFormat.GIF,
                                            ".bmp": ImageFormat.BMP, ".webp": ImageFormat.WEBP}


def _root(root: str) -> str:
    return root.rstrip("/") + "/"


def list_image_files(root: str) -> list[tuple[str, str]]:
    """(relative path 'label/file', absolute path) of every file two levels below root."""
    base = _root(root)
    files = []
    for path, _ in storage.list_files(base + "*/*"):
        relative = path[len(base):] if path.startswith(base) else posixpath.relpath(path, base)
        if relative.count("/") == 1 and not relative.split("/")[1].startswith("."):
            files.append((relative, path))
    return files


def class_names(root: str) -> tuple[str, ...]:
    """Sorted sub-folder names of root that hold at least one file."""
    names = sorted({relative.split("/")[0] for relative, _ in list_image_files(root)})
    if not names:
        raise SchemaError(f"no class folders with files under {root!r}; expected root/<label>/<file>")
    return tuple(names)


def image_folder_schema(root: str, image_format: ImageFormat, *, resize: ResizeImage | None = None,
                        check_decode: bool = False) -> Schema:
    """Schema of an image folder: one image feature and a class label with the folder names.

    Args:
        root: the folder (its sub-folders are the classes).
        image_format: the format of the files (passed through unchanged).
        resize: when images are decoded, resized and re-encoded (pass the same object as the
            writer's ``feature_transforms={"image": resize}``), the schema records its output
            format and decoded shape instead.
        check_decode: decode every image in full while validating (catches truncated files).
    """
    image = resize.feature() if resize is not None else Image(image_format)
    if check_decode:
        image = dataclasses.replace(image, check_decode=True)
    return Schema({"image": image, "label": ClassLabel(class_names(root))})


def _samples(root: str) -> Iterator[Sample]:
    for relative, path in list_image_files(root):
        label = relative.split("/")[0]
        yield Sample(key=relative, values={"image": FileRef(path), "label": label})


class ReadImageFolder(beam.PTransform):
    """Lists ``root/<label>/<file>`` at run time and emits one Sample per file.

    The key is the path relative to root ('cats/001.jpg'): stable across machines and buckets.
    Files whose extension is not an image are still emitted, so that the encoder rejects them
    with a reason instead of dropping them silently.
    """

    def __init__(self, root: str) -> None:
        super().__init__()
        self._root = root

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pipeline
            | "Root" >> beam.Create([self._root])
            | "ListFiles" >> beam.FlatMap(_samples)
            | "Spread" >> beam.Reshuffle()
        )


def guess_format(root: str, default: ImageFormat = ImageFormat.JPEG) -> ImageFormat:
    """The most common image extension under root (the schema needs one format)."""
    counts: dict[ImageFormat, int] = {}
    for relative, _ in list_image_files(root):
        fmt = IMAGE_EXTENSIONS.get(posixpath.splitext(relative)[1].lower())
        if fmt is not None:
            counts[fmt] = counts.get(fmt, 0) + 1
    return max(counts, key=lambda f: (counts[f], f.value)) if counts else default

"""Image folders: ``root/<label>/<file>`` -> samples ``{"image": <bytes>, "label": <class>}``.

Class names are the sub-folder names, sorted; they are listed when the pipeline is built (so
they can go into the schema and manifest), and files are listed again by the pipeline itself.
Image bytes are passed through unchanged by default: each sample carries a FileRef that the encoder
reads. To decode, resize and re-encode instead, give the writer ``feature_transforms={"image":
ResizeImage(...)}`` and build the schema with ``image_folder_schema(..., resize=...)``.

Every file under the root is accounted for. A file in a class folder with an image extension is a
sample, even a dangling symbolic link or an unreadable file: reading it fails and it becomes a
dead letter with the reason. Anything else is skipped and reported (``FolderListing.skipped``,
recorded in the manifest's metadata and printed in the summary): files whose extension is not an
image's, hidden files, files directly in the root and files nested deeper than ``<label>/<file>``.
"""

from __future__ import annotations

import collections
import dataclasses
import posixpath
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.core.image_ops import ResizeImage
from beam_tfrecord.core.samples import FileRef, Sample
from beam_tfrecord.core.schema import IMAGE_EXTENSIONS, ClassLabel, Image, ImageFormat, Schema
from beam_tfrecord.errors import SchemaError


def _root(root: str) -> str:
    return root.rstrip("/") + "/"


@dataclasses.dataclass(frozen=True)
class FolderListing:
    """What a listing of an image folder found.

    Attributes:
        images: (relative path 'label/file', full path) of every sample, sorted.
        skipped: (relative path, reason) of every other file, sorted.
    """

    images: tuple[tuple[str, str], ...]
    skipped: tuple[tuple[str, str], ...]

    def skipped_report(self) -> dict[str, Any]:
        """Counts of skipped files by reason and by extension, for the manifest and the summary."""
        reasons = collections.Counter(reason for _, reason in self.skipped)
        extensions = collections.Counter(posixpath.splitext(path)[1].lower() or "(none)" for path, _ in self.skipped)
        return {"count": len(self.skipped), "by_reason": dict(sorted(reasons.items())),
                "by_extension": dict(sorted(extensions.items())),
                "examples": [path for path, _ in self.skipped[:5]]}


def _skip_reason(relative: str) -> str | None:
    parts = relative.split("/")
    if any(part.startswith(".") for part in parts):
        return "hidden file"
    if len(parts) == 1:
        return "not in a class folder (ROOT/<label>/<file>)"
    if len(parts) > 2:
        return "nested deeper than ROOT/<label>/<file>"
    if posixpath.splitext(parts[1])[1].lower() not in IMAGE_EXTENSIONS:
        return f"extension is not one of {sorted(IMAGE_EXTENSIONS)}"
    return None


def list_folder(root: str) -> FolderListing:
    """Every file under ``root`` (dangling links included), sorted into samples and skipped files."""
    base = _root(root)
    images, skipped = [], []
    for path, _ in storage.list_files(base + "**", include_broken=True):
        relative = path[len(base):] if path.startswith(base) else posixpath.relpath(path, base)
        reason = _skip_reason(relative)
        if reason is None:
            images.append((relative, path))
        else:
            skipped.append((relative, reason))
    return FolderListing(tuple(images), tuple(skipped))


def list_image_files(root: str) -> list[tuple[str, str]]:
    """(relative path 'label/file', full path) of every sample of the folder."""
    return list(list_folder(root).images)


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


def image_sample(relative: str, path: str) -> Sample:
    """The sample of one image file: key 'label/file', the file's bytes (read by the encoder), the label."""
    return Sample(key=relative, values={"image": FileRef(path), "label": relative.split("/")[0]})


def _samples(root: str) -> Iterator[Sample]:
    for relative, path in list_image_files(root):
        yield image_sample(relative, path)


class ReadImageFolder(beam.PTransform):
    """Lists ``root/<label>/<file>`` at run time and emits one Sample per image file.

    The key is the path relative to root ('cats/001.jpg'): stable across machines and buckets.
    Files that are not samples are skipped (see the module docstring); ``list_folder(root)``
    reports them.
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
    """The image format of the folder's files, from their extensions: ANY when they mix formats."""
    formats = {IMAGE_EXTENSIONS[posixpath.splitext(relative)[1].lower()] for relative, _ in list_image_files(root)}
    if len(formats) > 1:
        return ImageFormat.ANY
    return formats.pop() if formats else default

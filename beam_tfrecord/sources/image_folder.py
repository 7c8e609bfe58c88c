"""Image folders: ``root/<label>/<file>`` -> samples ``{"image": <bytes>, "label": <class>}``.

Every file under the root is a sample or a reported skip. See docs/inputs.md, "Image folders", and
docs/command-line.md for what is skipped.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import posixpath
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from beam_tfrecord import storage
from beam_tfrecord.core.image_ops import ResizeImage
from beam_tfrecord.core.samples import FileRef, Sample
from beam_tfrecord.core.schema import IMAGE_EXTENSIONS, ClassLabel, Image, ImageFormat, Schema
from beam_tfrecord.errors import InputsMismatchError, SchemaError
from beam_tfrecord.spill.resume import ReusedKeys
from beam_tfrecord.storage import StoredFile


def _root(root: str) -> str:
    return root.rstrip("/") + "/"


@dataclasses.dataclass(frozen=True)
class FolderListing:
    """What a listing of an image folder found.

    Attributes:
        images: (relative path 'label/file', full path) of every sample, sorted.
        skipped: (relative path, reason) of every other file, sorted.
        files: every file found, as storage listed it (size and update time; size -1: it could not be
            sized), sorted by path: what the inputs' fingerprint is taken from without listing again.
    """

    images: tuple[tuple[str, str], ...]
    skipped: tuple[tuple[str, str], ...]
    files: tuple[StoredFile, ...] = ()

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
    files = storage.list_details(base + "**", include_broken=True)
    for path in (found.path for found in files):
        relative = path[len(base):] if path.startswith(base) else posixpath.relpath(path, base)
        reason = _skip_reason(relative)
        if reason is None:
            images.append((relative, path))
        else:
            skipped.append((relative, reason))
    return FolderListing(tuple(images), tuple(skipped), tuple(files))


def class_names(root: str, listing: FolderListing | None = None) -> tuple[str, ...]:
    """Sorted sub-folder names of root that hold at least one image (from ``listing`` when given)."""
    images = (listing or list_folder(root)).images
    names = sorted({relative.split("/")[0] for relative, _ in images})
    if not names:
        raise SchemaError(f"no class folders with files under {root!r}; expected root/<label>/<file>")
    return tuple(names)


def image_folder_schema(root: str, image_format: ImageFormat, *, resize: ResizeImage | None = None,
                        check_decode: bool = False, listing: FolderListing | None = None) -> Schema:
    """Schema of an image folder: one image feature and a class label with the folder names.

    Args:
        root: the folder (its sub-folders are the classes).
        image_format: the format of the files (passed through unchanged).
        resize: when images are decoded, resized and re-encoded (pass the same object as the
            writer's ``feature_transforms={"image": resize}``), the schema records its output
            format and decoded shape instead.
        check_decode: decode every image in full while validating (catches truncated files).
        listing: ``list_folder(root)`` when the caller has it (one listing plans a job); listed here otherwise.
    """
    image = resize.feature() if resize is not None else Image(image_format)
    if check_decode:
        image = dataclasses.replace(image, check_decode=True)
    return Schema({"image": image, "label": ClassLabel(class_names(root, listing))})


def image_sample(relative: str, path: str) -> Sample:
    """The sample of one image file: key 'label/file', the file's bytes (read by the encoder), the label."""
    return Sample(key=relative, values={"image": FileRef(path), "label": relative.split("/")[0]})


_EXAMPLE_KEYS = 32  # client keys a ListingCheck carries, evenly spaced: what a mismatch can name


@dataclasses.dataclass(frozen=True)
class ListingCheck:
    """What the client's listing of an image folder found, for the workers' listing to match.

    The client lists the folder to plan (class names, the image format, the input count); the
    workers list it again at run time, so that a job graph never carries a million paths. When
    the workers do not see the client's folder (a local path on workers of other machines) or
    the folder changed in between, the two differ: ``verify`` fails the job before anything is
    encoded instead of letting it publish fewer records (issue 35 saw 0 of 600).

    Attributes:
        count: images the client listed.
        digest: SHA-256 of their sorted relative paths.
        examples: up to ``_EXAMPLE_KEYS`` of those paths, evenly spaced (what a mismatch names).
    """

    count: int
    digest: str
    examples: tuple[str, ...]

    @classmethod
    def of(cls, listing: FolderListing) -> "ListingCheck":
        keys = [relative for relative, _ in listing.images]
        step = max(1, len(keys) // _EXAMPLE_KEYS)
        return cls(len(keys), _keys_digest(keys), tuple(keys[::step][:_EXAMPLE_KEYS]))

    def verify(self, root: str, listing: FolderListing) -> None:
        """Raises InputsMismatchError when ``listing`` (the workers') is not the client's."""
        keys = [relative for relative, _ in listing.images]
        if len(keys) == self.count and _keys_digest(keys) == self.digest:
            return
        seen = set(keys)
        missing = [key for key in self.examples if key not in seen]
        detail = f"e.g. {missing[0]!r} is missing" if missing else "other files under the same count"
        if len(keys) < self.count:
            detail = f"{self.count - len(keys)} missing, " + detail
        raise InputsMismatchError(f"image folder {root!r}", self.count, len(keys), f" ({detail})")


def _keys_digest(keys: list[str]) -> str:
    return hashlib.sha256("\n".join(keys).encode("utf-8")).hexdigest()


# Images a element between the listing and the workers: the runner regroups each element of the Reshuffle
# in Python (~20 us each, both workers waiting: ~0.3 s for 15,000 images, one at a time); 64 images encode in
# ~40 ms, small enough to spread evenly.
_IMAGES_PER_CHUNK = 64


def _chunks(root: str, check: ListingCheck | None, skip: ReusedKeys | None = None
            ) -> Iterator[list[tuple[str, str]]]:
    """The images to read, (relative, path) in listing order, ``_IMAGES_PER_CHUNK`` a list."""
    listing = list_folder(root)
    if check is not None:
        check.verify(root, listing)
    held = skip.held([relative for relative, _ in listing.images]).tolist() if skip is not None else None
    images = [image for number, image in enumerate(listing.images) if held is None or not held[number]]
    for start in range(0, len(images), _IMAGES_PER_CHUNK):
        yield images[start:start + _IMAGES_PER_CHUNK]


def _chunk_samples(chunk: list[tuple[str, str]]) -> list[Sample]:
    return [image_sample(relative, path) for relative, path in chunk]


class ReadImageFolder(beam.PTransform):
    """Lists ``root/<label>/<file>`` at run time and emits one Sample per image file.

    The key is the path relative to root ('cats/001.jpg'): stable across machines and buckets.
    Files that are not samples (hidden, not an image's extension, not in ``<label>/<file>``) are
    skipped; ``list_folder(root)`` reports them. Given ``check`` (``ListingCheck.of`` the listing the
    schema was planned from), the job fails with ``InputsMismatchError`` when the workers list other
    images. Given ``skip`` (a resumed build's reused samples, ``skipping``), those are left out before
    the samples are spread over the workers, so the images left to encode are spread evenly.
    """

    def __init__(self, root: str, *, check: ListingCheck | None = None, skip: ReusedKeys | None = None) -> None:
        super().__init__()
        self._root = root
        self._check = check
        self._skip = skip

    def skipping(self, reused: ReusedKeys) -> "ReadImageFolder":
        """This source, leaving out the samples of ``reused`` (a resumed build encodes only the rest)."""
        return ReadImageFolder(self._root, check=self._check, skip=reused)

    def expand(self, pipeline: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pipeline
            | "Root" >> beam.Create([self._root])
            | "ListFiles" >> beam.FlatMap(_chunks, self._check, self._skip)  # [(relative, path)], 64 at most
            | "Spread" >> beam.Reshuffle()
            | "Samples" >> beam.FlatMap(_chunk_samples)
        )


def guess_format(root: str, default: ImageFormat = ImageFormat.JPEG, *,
                 listing: FolderListing | None = None) -> ImageFormat:
    """The image format of the folder's files (listed, or ``listing``), from their extensions: ANY when they mix."""
    images = (listing or list_folder(root)).images
    formats = {IMAGE_EXTENSIONS[posixpath.splitext(relative)[1].lower()] for relative, _ in images}
    if len(formats) > 1:
        return ImageFormat.ANY
    return formats.pop() if formats else default

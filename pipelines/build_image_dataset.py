"""Image folder (root/<label>/<file>) -> TFRecord dataset. ``python -m pipelines.build_image_dataset``."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.image_ops import ResizeImage, ResizeMethod
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import ImageFormat, Schema
from beam_tfrecord.describe import SKIPPED_INPUTS_KEY
from beam_tfrecord.engine.dask_cluster import DaskClusterOptions
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings
from beam_tfrecord.sources.image_folder import (
    FolderListing,
    ListingCheck,
    ReadImageFolder,
    guess_format,
    image_folder_schema,
    list_folder,
)
from pipelines.common import (
    DatasetOutputOptions,
    ProgressOptions,
    build_dataset,
    parse_job,
    require_worker_paths,
    run_as_command,
)
from pipelines.job_options import JobCommand
from pipelines.source_options import QualityOptions, SchemaOptions, parse_bool, quality_writer_options


class ImageFolderOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--input", help="image folder root: ROOT/<label>/<file> (local or gs://)")
        parser.add_argument("--image_format", default=None, choices=[f.value for f in ImageFormat],
                            help="image encoding every file must have, or 'any' for a folder mixing encodings "
                                 "(default: from the extensions: their one format, or any when they mix)")
        parser.add_argument("--resize", default=None, metavar="HEIGHTxWIDTH",
                            help="decode, resize to HEIGHTxWIDTH and re-encode (default: pass bytes through)")
        parser.add_argument("--channels", type=int, default=3, choices=[1, 3, 4],
                            help="with --resize: output channels (4 needs --encode png)")
        parser.add_argument("--encode", default="jpeg", choices=["jpeg", "png"], help="with --resize: output format")
        parser.add_argument("--jpeg_quality", type=int, default=90, help="with --resize --encode jpeg: quality 1-95")
        parser.add_argument("--resize_method", default="bilinear", choices=[m.value for m in ResizeMethod],
                            help="with --resize: resampling filter")
        parser.add_argument("--reduced_decode", type=parse_bool, nargs="?", const=True, default=True,
                            help="with --resize: decode a JPEG at least twice the target size at 1/2, 1/4 or 1/8 "
                                 "scale first (libjpeg's DCT scaling, as Pillow's thumbnail does; ~2x less CPU, "
                                 "pixels a few levels off a full decode); --reduced_decode=false decodes it whole")
        parser.add_argument("--near_duplicates", type=parse_bool, nargs="?", const=True, default=False,
                            help="also search the images for near duplicates (perceptual hash, re-encoded, resized "
                                 "or slightly cropped copies) within and across splits: the summary and the "
                                 "manifest's metadata (near_duplicates) report the pairs; see docs/quality.md")


def resize_from_options(source: ImageFolderOptions) -> ResizeImage | None:
    """The ResizeImage transform the options ask for, or None to pass bytes through."""
    if not source.resize:
        return None
    try:
        height, width = (int(part) for part in source.resize.lower().split("x"))
    except ValueError as err:
        raise SystemExit(f"--resize must be HEIGHTxWIDTH, e.g. 224x224; got {source.resize!r}") from err
    return ResizeImage(height, width, channels=source.channels, output_format=ImageFormat(source.encode),
                       jpeg_quality=source.jpeg_quality, method=ResizeMethod(source.resize_method),
                       reduced_decode=source.reduced_decode)


@dataclasses.dataclass(frozen=True)
class ImageFolderBuild:
    """What a job writing an image folder needs, read from the folder and the options.

    Attributes:
        schema: from the class folders (and the image format, and the resize if any).
        feature_transforms: the resize of ``image``, if asked for.
        listing: the client's listing of the folder (what the workers' listing must match).
        metadata: manifest metadata: the report of skipped files, when there were any.
    """

    schema: Schema
    feature_transforms: Mapping[str, ResizeImage]
    listing: FolderListing
    metadata: Mapping[str, Any]

    @property
    def num_images(self) -> int:
        """Image files found (the progress line's expected inputs, and the count the workers must read)."""
        return len(self.listing.images)

    def read(self, root: str) -> ReadImageFolder:
        """The source of the folder, failing the job when the workers list other images (``ListingCheck``)."""
        return ReadImageFolder(root, check=ListingCheck.of(self.listing))

    @classmethod
    def of(cls, source: ImageFolderOptions, *, check_decode: bool) -> "ImageFolderBuild":
        if not source.input:
            raise SystemExit("--input is required: an image folder ROOT/<label>/<file>")
        listing = list_folder(source.input)  # the one listing the job plans from (the workers' must match)
        image_format = (ImageFormat(source.image_format) if source.image_format
                        else guess_format(source.input, listing=listing))
        resize = resize_from_options(source)
        schema = image_folder_schema(source.input, image_format, resize=resize, check_decode=check_decode,
                                     listing=listing)
        return cls(schema, {"image": resize} if resize is not None else {}, listing,
                   {SKIPPED_INPUTS_KEY: listing.skipped_report()} if listing.skipped else {})


COMMAND = JobCommand(
    prog="python -m pipelines.build_image_dataset",
    description="Builds a dataset from an image folder ROOT/<label>/<file>: the label is the folder name.",
    groups=(("input", ImageFolderOptions), ("output and sharding", DatasetOutputOptions),
            ("schema checks", SchemaOptions), ("duplicates and splits", QualityOptions), ("progress", ProgressOptions),
            ("Dask cluster", DaskClusterOptions)),
    refused=(("schema", "the schema comes from the folder names"),
             ("chunk_size", "images are one sample per Beam element")),
)


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> Manifest:
    """Builds the dataset, prints what was written and returns the manifest."""
    options, argv = parse_job(COMMAND, argv, prog=prog)
    source = options.view_as(ImageFolderOptions)
    shared = require_worker_paths(options, {"--input": source.input})
    build = ImageFolderBuild.of(source, check_decode=options.view_as(SchemaOptions).check_decode)
    return build_dataset(options, build.read(source.input), build.schema, ["build_image_dataset", *argv],
                         shared_filesystem=shared, input_patterns=[source.input.rstrip("/") + "/*/*"],
                         feature_transforms=build.feature_transforms,
                         expected_inputs=build.num_images,
                         metadata=dict(build.metadata) or None,
                         near_duplicates=(NearDuplicateSettings.for_images(build.num_images)
                                          if source.near_duplicates else None),
                         **quality_writer_options(options, build.schema))


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown

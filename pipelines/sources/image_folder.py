"""An image folder ``ROOT/<label>/<file>`` as a source: the label is the folder name; a refresh's input is an
image file (the same path, size and update time: unchanged). See docs/inputs.md, "Image folders"."""

from __future__ import annotations

import argparse

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.image_ops import ResizeImage, ResizeMethod
from beam_tfrecord.core.schema import ImageFormat
from beam_tfrecord.describe import SKIPPED_INPUTS_KEY
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings
from beam_tfrecord.sources.image_folder import (
    ListingCheck,
    ReadImageFolder,
    guess_format,
    image_folder_schema,
    image_sample,
    list_folder,
)
from beam_tfrecord.versions.input_index import IndexedInput, content_tokens, index_inputs
from beam_tfrecord.versions.refresh import fingerprint_listed
from pipelines.source_options import SchemaOptions, parse_bool
from pipelines.sources import source_named
from pipelines.sources.spec import InputsIndex, SourcePlan, SourceSpec, add_input_option

ENTRY = source_named("image-folder")


class ImageFolderOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_input_option(parser, ENTRY)
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


def _inputs_glob(root: str) -> str:
    return root.rstrip("/") + "/*/*"


def _plan(options: PipelineOptions, *, job: str) -> SourcePlan:
    source = options.view_as(ImageFolderOptions)
    listing = list_folder(source.input)  # the one listing the job plans from (the workers' must match)
    image_format = ImageFormat(source.image_format) if source.image_format else guess_format(source.input,
                                                                                            listing=listing)
    resize = resize_from_options(source)
    schema = image_folder_schema(source.input, image_format, resize=resize, listing=listing,
                                 check_decode=options.view_as(SchemaOptions).check_decode)
    return SourcePlan(schema=schema, read=ReadImageFolder(source.input, check=ListingCheck.of(listing)),
                      files=listing.images, expected_inputs=len(listing.images),
                      feature_transforms={"image": resize} if resize is not None else {},
                      metadata={SKIPPED_INPUTS_KEY: listing.skipped_report()} if listing.skipped else {},
                      near_duplicates=(NearDuplicateSettings.for_images(len(listing.images))
                                       if source.near_duplicates else None),
                      inputs=fingerprint_listed([_inputs_glob(source.input)], listing.files))


def _index(options: PipelineOptions, plan: SourcePlan) -> InputsIndex:
    """An input per image, its token from one listing of the folder."""
    folder = options.view_as(ImageFolderOptions).input
    return InputsIndex(index_inputs(plan.files, content_tokens(folder), "").inputs, _read_fresh)


def _read_fresh(pipeline: beam.Pipeline, fresh: tuple[IndexedInput, ...]) -> beam.PCollection:
    return (pipeline
            | "FreshInputs" >> beam.Create([(i.key, i.path) for i in fresh])
            | "FreshSamples" >> beam.MapTuple(image_sample)
            | "SpreadFresh" >> beam.Reshuffle())


SPEC = SourceSpec(
    entry=ENTRY, options=ImageFolderOptions,
    description="Builds a dataset from an image folder ROOT/<label>/<file>: the label is the folder name.",
    plan=_plan, index=_index, inputs_glob=_inputs_glob,
    refused=(("schema", "the schema comes from the folder names"),
             ("chunk_size", "images are one sample per Beam element")))

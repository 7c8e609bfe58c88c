"""Image folder (root/<label>/<file>) -> TFRecord dataset. ``python -m pipelines.build_image_dataset``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.core.schema import ImageFormat
from beam_tfrecord.dataset import load_manifest
from beam_tfrecord.sources.image_folder import ReadImageFolder, guess_format, image_folder_schema
from beam_tfrecord.summary import describe
from pipelines.common import DatasetOutputOptions, make_writer, quiet_logging


class ImageFolderOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--input", help="image folder root: ROOT/<label>/<file> (local or gs://)")
        parser.add_argument("--image_format", default=None, choices=[f.value for f in ImageFormat],
                            help="image encoding every file must have (default: the most common extension)")


def run(argv: Sequence[str] | None = None) -> Manifest:
    """Builds the dataset, prints what was written and returns the manifest."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options = PipelineOptions(argv)
    source = options.view_as(ImageFolderOptions)
    output = options.view_as(DatasetOutputOptions)
    if not source.input:
        raise SystemExit("--input is required: an image folder ROOT/<label>/<file>")
    image_format = ImageFormat(source.image_format) if source.image_format else guess_format(source.input)
    schema = image_folder_schema(source.input, image_format)
    quiet_logging()
    with beam.Pipeline(options=options) as pipeline:
        _ = (pipeline
             | "ReadImageFolder" >> ReadImageFolder(source.input)
             | "WriteDataset" >> make_writer(output, schema, ["build_image_dataset", *argv]))
    manifest = load_manifest(output.output)
    print(describe(manifest, output.output))
    return manifest


if __name__ == "__main__":
    run()

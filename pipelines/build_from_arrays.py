"""NumPy files (.npy / .npz) -> TFRecord dataset. ``python -m pipelines.build_from_arrays``.

Without ``--schema`` the schema is inferred from the first file (dtypes and per-sample shapes)
and printed as JSON so that it can be pinned with ``--schema FILE``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.infer import infer_array_schema
from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.engine.dask_cluster import DaskClusterOptions
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.sources.arrays import ReadNumpyFiles, count_samples, peek_arrays
from beam_tfrecord.sources.chunks import list_inputs
from pipelines.common import (
    DatasetOutputOptions,
    ProgressOptions,
    build_dataset,
    parse_job,
    require_worker_paths,
    run_as_command,
)
from pipelines.job_options import JobCommand
from pipelines.source_options import QualityOptions, SchemaOptions, pinned_or_inferred, quality_writer_options


class ArrayOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--arrays", help=".npy / .npz file or glob (local or gs://); axis 0 indexes samples")
        parser.add_argument("--npy_feature", default="x", help="feature name of a .npy file's array")


COMMAND = JobCommand(
    prog="python -m pipelines.build_from_arrays",
    description="Builds a dataset from .npy / .npz files (axis 0 indexes samples).",
    groups=(("input", ArrayOptions), ("output and sharding", DatasetOutputOptions),
            ("schema checks", SchemaOptions), ("duplicates and splits", QualityOptions), ("progress", ProgressOptions),
            ("Dask cluster", DaskClusterOptions)),
)


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> Manifest:
    """Builds the dataset, prints what was written and returns the manifest."""
    options, argv = parse_job(COMMAND, argv, prog=prog)
    source = options.view_as(ArrayOptions)
    checks = options.view_as(SchemaOptions)
    if not source.arrays:
        raise SystemExit("--arrays is required: .npy / .npz files (file or glob)")
    shared = require_worker_paths(options, {"--arrays": source.arrays})
    files = [path for _, path in list_inputs(source.arrays)]
    schema = pinned_or_inferred(checks, lambda: infer_array_schema(
        peek_arrays(files[0], npy_feature=source.npy_feature)), job="build_from_arrays")
    read = ReadNumpyFiles(source.arrays, npy_feature=source.npy_feature, chunk_size=checks.chunk_size)
    return build_dataset(options, read, schema, ["build_from_arrays", *argv], shared_filesystem=shared,
                         input_patterns=[source.arrays], samples_at_most=count_samples(files),
                         **quality_writer_options(options, schema))


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown

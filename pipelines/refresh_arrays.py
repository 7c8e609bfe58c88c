"""Scheduled refresh of a ``.npy`` / ``.npz`` dataset into a versioned root.

``beam-tfrecord refresh --arrays=... --dataset_root=...``. A file is the unit of change: the samples of a new
or changed file (another size or update time, as the store lists it) are encoded, those of unchanged files
are kept from LATEST. See docs/operations.md, "Scheduled refresh: versioned dataset roots".
"""

from __future__ import annotations

import functools
import os
import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.infer import infer_array_schema
from beam_tfrecord.job.process_exit import run_and_exit
from beam_tfrecord.sources.arrays import (
    ReadNumpyFiles,
    count_samples,
    peek_arrays,
    read_numpy_file,
    row_ranges,
    sample_keys,
)
from beam_tfrecord.sources.chunks import list_inputs
from beam_tfrecord.sources.kept_records import ReadFreshInputs
from beam_tfrecord.versions.input_index import IndexedInput, listed_tokens
from beam_tfrecord.versions.refresh import RefreshPlan
from pipelines.build_from_arrays import ArrayOptions
from pipelines.common import DatasetOutputOptions, parse_job, require_worker_paths, run_as_command
from pipelines.drift_options import DriftOptions
from pipelines.job_options import JobCommand
from pipelines.refresh_driver import (
    REFRESH_REJECTED_OPTIONS,
    PreparedSource,
    RefreshOptions,
    RefreshSource,
    recorded_command,
    refresh_groups,
    run_refresh,
    validated_refresh,
)
from pipelines.source_options import QualityOptions, SchemaOptions, pinned_or_inferred

ARRAYS_JOB = "refresh_arrays"
ARRAYS_OPTION_CLASSES: tuple[type[PipelineOptions], ...] = (
    ArrayOptions, SchemaOptions, DatasetOutputOptions, RefreshOptions, DriftOptions, QualityOptions)
ARRAYS_REJECTED_OPTIONS: dict[str, str] = {
    **REFRESH_REJECTED_OPTIONS,
    "check_decode": "arrays hold no encoded images",
}

COMMAND = JobCommand(
    prog="beam-tfrecord refresh",
    description="Refreshes a .npy / .npz dataset into a versioned root: builds ROOT/versions/<id> when the files "
                "changed (encoding only the samples of new and changed files), then moves ROOT/LATEST to it and "
                "deletes old versions.",
    groups=refresh_groups(("input", ArrayOptions)),
    refused=tuple(ARRAYS_REJECTED_OPTIONS.items()),
)


def run(argv: Sequence[str] | None = None, *, prog: str | None = None) -> RefreshPlan:
    """Refreshes the dataset (or does nothing when the files are unchanged); returns the decision taken."""
    options, _ = parse_job(COMMAND, argv, prog=prog)
    source = options.view_as(ArrayOptions)
    refresh = validated_refresh(options, input_flag="--arrays", input_value=source.arrays,
                                what=".npy / .npz files (file or glob)")
    shared = require_worker_paths(options, {"--arrays": source.arrays, "--dataset_root": refresh.dataset_root})
    command = recorded_command(options, ARRAYS_JOB, ARRAYS_OPTION_CLASSES, ARRAYS_REJECTED_OPTIONS)
    return run_refresh(options, RefreshSource(patterns=[source.arrays], command=command,
                                              prepare=lambda: _prepare(source, options.view_as(SchemaOptions))),
                       shared_filesystem=shared)


def _prepare(source: ArrayOptions, checks: SchemaOptions) -> PreparedSource:
    files = list_inputs(source.arrays)
    schema = pinned_or_inferred(checks, lambda: infer_array_schema(
        peek_arrays(files[0][1], npy_feature=source.npy_feature)), job=ARRAYS_JOB)
    pattern = source.arrays if "://" in source.arrays else os.path.abspath(source.arrays)
    tokens = listed_tokens(pattern)
    inputs = [IndexedInput(key, path, tokens.get(path, "")) for name, path in files
              for key in sample_keys(name, 0, _rows(name, path, source.npy_feature))]
    read = ReadNumpyFiles(source.arrays, npy_feature=source.npy_feature, chunk_size=checks.chunk_size)
    return PreparedSource(
        schema=schema, feature_transforms={}, metadata={}, inputs=inputs, expected_inputs=len(inputs),
        source_options={"npy_feature": source.npy_feature},
        read_all=lambda pipeline: pipeline | "ReadArrays" >> read,
        read_fresh=functools.partial(_read_fresh, files=files, npy_feature=source.npy_feature,
                                     chunk_size=checks.chunk_size))


def _rows(name: str, path: str, npy_feature: str) -> int:
    """The samples of one file: a .npy's from its header, a .npz's by reading it."""
    if posixpath.splitext(path)[1].lower() == ".npy":
        counted = count_samples([path])
        if counted is not None:
            return counted
    return sum(len(chunk) for chunk in read_numpy_file(name, path, npy_feature=npy_feature))


def _read_part(element: tuple[str, str, tuple[int, int | None]], *, npy_feature: str,
               chunk_size: int) -> Iterator[list[Any]]:
    name, path, rows = element
    return read_numpy_file(name, path, npy_feature=npy_feature, chunk_size=chunk_size, rows=rows)


def _read_fresh(pipeline: beam.Pipeline, fresh: tuple[IndexedInput, ...], *, files: Sequence[tuple[str, str]],
                npy_feature: str, chunk_size: int) -> beam.PCollection:
    """The samples of ``fresh`` only, read from the files that hold one, in the ranges a full build reads."""
    holding = {i.path for i in fresh}
    parts = [part for name, path in files if path in holding
             for part in row_ranges((name, path), chunk_size=chunk_size)]
    read = functools.partial(_read_part, npy_feature=npy_feature, chunk_size=chunk_size)
    return pipeline | "ReadFreshArrays" >> ReadFreshInputs(parts, read, [i.key for i in fresh])


if __name__ == "__main__":
    run_and_exit(lambda: run_as_command(run, prog=COMMAND.prog))  # ended without the interpreter's teardown

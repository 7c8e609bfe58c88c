"""NumPy files (.npy / .npz) as a source: axis 0 indexes samples; a refresh's unit of change is a file (another
size or update time, as the store lists it: its samples are encoded again). Without ``--schema`` the schema is
inferred from the first file and printed. See docs/inputs.md, "NumPy: files, in-memory arrays, generators".
"""

from __future__ import annotations

import argparse
import functools
import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.infer import infer_array_schema
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
from beam_tfrecord.versions.input_index import IndexedInput
from pipelines.source_options import SchemaOptions, pinned_or_inferred
from pipelines.sources import source_named
from pipelines.sources.spec import InputsIndex, SourcePlan, SourceSpec, add_input_option, file_inputs, tokens_of

ENTRY = source_named("arrays")


class ArrayOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_input_option(parser, ENTRY)
        parser.add_argument("--npy_feature", default="x", help="feature name of a .npy file's array")


def _plan(options: PipelineOptions, *, job: str) -> SourcePlan:
    source = options.view_as(ArrayOptions)
    checks = options.view_as(SchemaOptions)
    files = list_inputs(source.arrays)
    schema = pinned_or_inferred(checks, lambda: infer_array_schema(
        peek_arrays(files[0][1], npy_feature=source.npy_feature)), job=job)
    read = ReadNumpyFiles(source.arrays, npy_feature=source.npy_feature, chunk_size=checks.chunk_size)
    return SourcePlan(schema=schema, read=read, files=files, samples_at_most=count_samples(p for _, p in files))


def _index(options: PipelineOptions, plan: SourcePlan) -> InputsIndex:
    source = options.view_as(ArrayOptions)
    inputs = file_inputs(plan.files, lambda name, path: sample_keys(name, 0, _rows(name, path, source.npy_feature)),
                         tokens_of(source.arrays))
    return InputsIndex(inputs, functools.partial(_read_fresh, files=plan.files, npy_feature=source.npy_feature,
                                                 chunk_size=options.view_as(SchemaOptions).chunk_size))


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


SPEC = SourceSpec(
    entry=ENTRY, options=ArrayOptions, description="Builds a dataset from .npy / .npz files (axis 0 indexes samples).",
    plan=_plan, index=_index, sample_options=("npy_feature",),
    refresh_refused=(("check_decode", "arrays hold no encoded images"),))

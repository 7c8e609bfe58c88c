"""Text files as a source: a sample ``{"text": str}`` per file or per non-empty line; a refresh's unit of change
is a file (a changed file encodes all its samples again). See docs/inputs.md, "Text, with an optional tokenizer"."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterable

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.sources.chunks import list_inputs, per_file
from beam_tfrecord.sources.text import ReadTextFiles, TextUnit, read_text_file, text_schema
from pipelines.source_options import SchemaOptions
from pipelines.sources import source_named
from pipelines.sources.spec import (
    InputsIndex,
    SourcePlan,
    SourceSpec,
    add_input_option,
    file_inputs,
    fresh_files,
    lines_at_most,
    tokens_of,
)

ENTRY = source_named("text")


class TextOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_input_option(parser, ENTRY)
        parser.add_argument("--text_unit", default=TextUnit.FILE.value, choices=[u.value for u in TextUnit],
                            help="a sample per file (key: its path below the glob's folder) or per non-empty line "
                                 "(key: FILE:LINE_NUMBER, --chunk_size lines per Beam element)")


def _plan(options: PipelineOptions, *, job: str) -> SourcePlan:
    source = options.view_as(TextOptions)
    unit = TextUnit(source.text_unit)
    files = list_inputs(source.text)
    return SourcePlan(schema=text_schema(), files=files,
                      read=ReadTextFiles(source.text, unit=unit, chunk_size=options.view_as(SchemaOptions).chunk_size),
                      expected_inputs=len(files) if unit is TextUnit.FILE else None,
                      samples_at_most=None if unit is TextUnit.FILE else lines_at_most(source.text))


def _keys(name: str, path: str, *, unit: TextUnit) -> Iterable[str]:
    """A file's sample keys: its name, or one per non-empty line (the file read as a build reads it)."""
    if unit is TextUnit.FILE:
        return [name]
    return [sample.key for chunk in read_text_file(name, path, unit=unit) for sample in chunk]


def _index(options: PipelineOptions, plan: SourcePlan) -> InputsIndex:
    source = options.view_as(TextOptions)
    unit = TextUnit(source.text_unit)
    read = functools.partial(per_file, read=functools.partial(
        read_text_file, unit=unit, chunk_size=options.view_as(SchemaOptions).chunk_size))
    return InputsIndex(file_inputs(plan.files, functools.partial(_keys, unit=unit), tokens_of(source.text)),
                       fresh_files(plan.files, read, "ReadFreshText"))


SPEC = SourceSpec(
    entry=ENTRY, options=TextOptions, description="Builds a dataset from text files, a sample per file or per line.",
    plan=_plan, index=_index, sample_options=("text_unit",),
    refused=(("schema", "the schema is {text: string}"), ("check_decode", "text holds no encoded images")))

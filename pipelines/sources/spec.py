"""What a source declares once (``SourceSpec``), and what it gives a build (``SourcePlan``) and a refresh
(``InputsIndex``). ``pipelines/source_jobs.py`` turns a spec into its build and refresh jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord import storage
from beam_tfrecord.core.schema import Schema
from beam_tfrecord.engine.local_workers import SMALL_JOB_MAX_INPUT_BYTES
from beam_tfrecord.quality.near_duplicates import NearDuplicateSettings
from beam_tfrecord.sources.kept_records import ReadFreshInputs
from beam_tfrecord.versions.input_index import IndexedInput, listed_tokens
from beam_tfrecord.versions.refresh import InputFingerprint
from pipelines.sources import SourceEntry

# (pipeline, the inputs to encode again) -> their samples: how an incremental refresh reads the fresh inputs.
ReadFresh = Callable[[beam.Pipeline, tuple[IndexedInput, ...]], beam.PCollection]


@dataclasses.dataclass(frozen=True)
class SourcePlan:
    """A source read from its options, ready to build.

    Attributes:
        schema: the feature spec.
        read: PBegin -> samples (or chunks of them).
        files: (name, path) of every input file the client listed (what a refresh indexes).
        expected_inputs: samples the source emits, when the client counted them exactly.
        samples_at_most: an upper bound of them, when it knows one (decides a small job).
        feature_transforms: the writer's feature transforms (an image resize).
        metadata: manifest metadata of the source (skipped files...).
        key_feature: a feature holding the key, left out of the duplicates' content hash.
        near_duplicates: the near-duplicate search, when asked for.
        inputs: the fingerprint of the files ``SourceSpec.inputs_glob`` matches, when the plan's own listing
            gave it (None: the build lists them).
    """

    schema: Schema
    read: beam.PTransform
    files: Sequence[tuple[str, str]]
    expected_inputs: int | None = None
    samples_at_most: int | None = None
    feature_transforms: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    key_feature: str | None = None
    near_duplicates: NearDuplicateSettings | None = None
    inputs: InputFingerprint | None = None


@dataclasses.dataclass(frozen=True)
class InputsIndex:
    """How a refresh identifies a source's inputs: every sample's (key, path, content token), and how to read
    only the fresh ones. ``expected_inputs``: the samples a full build emits (default: one per input)."""

    inputs: Sequence[IndexedInput]
    read_fresh: ReadFresh
    expected_inputs: int | None = None


class PlanSource(Protocol):
    """options -> the source's plan; ``job`` names the job in errors (``build_from_arrays: SchemaError: ...``)."""

    def __call__(self, options: PipelineOptions, *, job: str) -> SourcePlan: ...


class IndexInputs(Protocol):
    """(options, the plan) -> the index of its inputs; called by a refresh that builds a version."""

    def __call__(self, options: PipelineOptions, plan: SourcePlan) -> InputsIndex: ...


def _same(value: str) -> str:
    return value


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """A source, declared once.

    Attributes:
        entry: its row in ``pipelines.sources.SOURCES`` (name, commands, input option).
        options: its options class (the input option added by ``add_input_option``).
        description: what its build does, first in ``--help``.
        plan: the transform factory: options -> ``SourcePlan``.
        index: how a refresh identifies its inputs: (options, plan) -> ``InputsIndex``.
        inputs_glob: the input option's value -> a glob of every input file (fingerprinted by a refresh,
            identifying a build that ``--resume`` may take over).
        path_options: its other options naming paths the workers read (refused when they cannot see them).
        sample_options: its options that shape samples besides the schema (a refresh's encoding digest).
        refused: shared options it does not take, with the reason (its build and refresh refuse them).
        refresh_refused: more that only its refresh refuses (its build took them before there was a refresh).
    """

    entry: SourceEntry
    options: type[PipelineOptions]
    description: str
    plan: PlanSource
    index: IndexInputs
    inputs_glob: Callable[[str], str] = _same
    path_options: tuple[str, ...] = ()
    sample_options: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    refresh_refused: tuple[tuple[str, str], ...] = ()

    def input_value(self, options: PipelineOptions) -> str | None:
        """The input option's value."""
        value: str | None = getattr(options.view_as(self.options), self.entry.input_option)
        return value

    def worker_paths(self, options: PipelineOptions) -> dict[str, str | None]:
        """{option: path} of the paths the workers read (``require_worker_paths``)."""
        source = options.view_as(self.options)
        return {self.entry.input_flag: self.input_value(options),
                **{f"--{name}": getattr(source, name) for name in self.path_options}}

    def sample_values(self, options: PipelineOptions) -> dict[str, Any]:
        """{option: value} of ``sample_options``."""
        source = options.view_as(self.options)
        return {name: getattr(source, name) for name in self.sample_options}


def spec_of(entry: SourceEntry) -> SourceSpec:
    """The source's declaration: its module's ``SPEC`` (imported on first use)."""
    spec = importlib.import_module(entry.module).SPEC
    if not isinstance(spec, SourceSpec) or spec.entry != entry:
        raise TypeError(f"{entry.module}.SPEC must be the SourceSpec of {entry.name!r}, got {spec!r}")
    return spec


def add_input_option(parser: argparse.ArgumentParser, entry: SourceEntry) -> None:
    """The source's input option, as its row declares it."""
    parser.add_argument(entry.input_flag, help=f"{entry.what} (local or gs://)")


def tokens_of(pattern: str) -> dict[str, str]:
    """{path: content token} of the files matching ``pattern`` (a local one made absolute, as ``list_inputs``)."""
    return listed_tokens(pattern if "://" in pattern else os.path.abspath(pattern))


def lines_at_most(pattern: str) -> int | None:
    """An upper bound of the samples of text files matching ``pattern``, their lines (what decides a small job,
    ``beam_tfrecord.engine.local_workers.InputSize``); None, not counted, beyond
    ``SMALL_JOB_MAX_INPUT_BYTES``: such a job is not small whatever its lines."""
    files = storage.list_files(pattern)
    if sum(size for _, size in files) > SMALL_JOB_MAX_INPUT_BYTES:
        return None
    return sum(storage.read_bytes(path).count(b"\n") + 1 for path, _ in files)


def file_inputs(files: Sequence[tuple[str, str]], keys: Callable[[str, str], Iterable[str]],
                tokens: Mapping[str, str]) -> list[IndexedInput]:
    """The inputs of sources whose unit of change is a file: each key ``keys(name, path)`` gives, with its file's
    token (a changed file encodes all its samples again)."""
    return [IndexedInput(key, path, tokens.get(path, "")) for name, path in files for key in keys(name, path)]


def fresh_files(files: Sequence[tuple[str, str]], read: Callable[[tuple[str, str]], Iterable[list[Any]]],
                label: str) -> ReadFresh:
    """``ReadFresh`` of such a source: the files holding a fresh input, read whole by ``read`` ((name, path) ->
    chunks of samples, as a full build reads them; picklable), their fresh samples kept."""
    def read_fresh(pipeline: beam.Pipeline, fresh: tuple[IndexedInput, ...]) -> beam.PCollection:
        holding = {i.path for i in fresh}
        return pipeline | label >> ReadFreshInputs([f for f in files if f[1] in holding], read, [i.key for i in fresh])
    return read_fresh

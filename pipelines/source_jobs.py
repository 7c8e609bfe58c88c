"""Every source's build and refresh jobs, derived from its ``SourceSpec`` (``pipelines/sources/``), and the
command-line dispatch of ``beam-tfrecord COMMAND`` and ``beam-tfrecord refresh [SOURCE]``.

A job is parse options, check the input option, refuse paths the workers cannot see, plan the source, run the
one build (``common.build_dataset``) or refresh (``refresh_driver.run_refresh``). See docs/command-line.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecord.core.manifest import Manifest
from beam_tfrecord.engine.dask_cluster import DaskClusterOptions
from beam_tfrecord.versions.refresh import RefreshPlan
from pipelines.common import DatasetOutputOptions, ProgressOptions, build_dataset, parse_job, require_worker_paths
from pipelines.drift_options import DriftOptions
from pipelines.job_options import JobCommand, option_actions
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
from pipelines.source_options import QualityOptions, SchemaOptions, quality_writer_options
from pipelines.sources import SOURCES, source_named
from pipelines.sources.spec import SourcePlan, SourceSpec, spec_of


def _required_input(spec: SourceSpec, options: PipelineOptions) -> str:
    value = spec.input_value(options)
    if not value:
        raise SystemExit(f"{spec.entry.input_flag} is required: {spec.entry.what}")
    return value


@dataclasses.dataclass(frozen=True)
class BuildJob:
    """A source's build: its inputs -> a dataset at ``--output``. ``prog``: how it is run, for usage lines."""

    spec: SourceSpec
    prog: str

    @property
    def command(self) -> JobCommand:
        return JobCommand(prog=self.prog, description=self.spec.description,
                          groups=(("input", self.spec.options), ("output and sharding", DatasetOutputOptions),
                                  ("schema checks", SchemaOptions), ("duplicates and splits", QualityOptions),
                                  ("progress", ProgressOptions), ("Dask cluster", DaskClusterOptions)),
                          refused=self.spec.refused)

    def run(self, argv: Sequence[str] | None = None, *, prog: str | None = None) -> Manifest:
        """Builds the dataset, prints what was written and returns the manifest."""
        spec, job = self.spec, self.spec.entry.build_job
        options, argv = parse_job(self.command, argv, prog=prog)
        value = _required_input(spec, options)
        shared = require_worker_paths(options, spec.worker_paths(options))
        plan = spec.plan(options, job=job)
        return build_dataset(options, plan.read, plan.schema, [job, *argv], shared_filesystem=shared,
                             input_patterns=[spec.inputs_glob(value)], inputs=plan.inputs,
                             expected_inputs=plan.expected_inputs,
                             samples_at_most=plan.samples_at_most,
                             feature_transforms=dict(plan.feature_transforms) or None,
                             metadata=dict(plan.metadata) or None, near_duplicates=plan.near_duplicates,
                             **quality_writer_options(options, plan.schema, key_feature=plan.key_feature))


@dataclasses.dataclass(frozen=True)
class RefreshJob:
    """A source's scheduled refresh into a versioned root (``refresh_driver``). ``prog``: as ``BuildJob``'s."""

    spec: SourceSpec
    prog: str

    @property
    def option_classes(self) -> tuple[type[PipelineOptions], ...]:
        """The option classes the job reads, in the order its recorded command (and the Flex Template) lists them."""
        return (self.spec.options, SchemaOptions, DatasetOutputOptions, RefreshOptions, DriftOptions, QualityOptions)

    @property
    def refused(self) -> dict[str, str]:
        """Options of those classes the job does not take, with the reason (passing one is an error)."""
        return {**REFRESH_REJECTED_OPTIONS, **dict(self.spec.refused), **dict(self.spec.refresh_refused)}

    @property
    def command(self) -> JobCommand:
        return JobCommand(prog=self.prog, description=(
            f"Refreshes a dataset of {self.spec.entry.what} into a versioned root: builds ROOT/versions/<id> when "
            "the inputs changed (encoding only new and changed ones), then moves ROOT/LATEST to it and deletes old "
            "versions."), groups=refresh_groups(("input", self.spec.options)), refused=tuple(self.refused.items()))

    def option_actions(self) -> list[argparse.Action]:
        """The argparse actions of the options a user passes to this job (besides runner options)."""
        return [action for options_class in self.option_classes for action in option_actions(options_class)
                if action.dest not in self.refused]

    def run(self, argv: Sequence[str] | None = None, *, prog: str | None = None) -> RefreshPlan | None:
        """Refreshes the dataset (or does nothing when the inputs are unchanged); returns the decision taken (with
        ``--watch``: the last interval's; None when stopped before the first)."""
        spec, entry = self.spec, self.spec.entry
        options, _ = parse_job(self.command, argv, prog=prog)
        value = spec.input_value(options)
        refresh = validated_refresh(options, input_flag=entry.input_flag, input_value=value, what=entry.what)
        shared = require_worker_paths(options, {**spec.worker_paths(options), "--dataset_root": refresh.dataset_root})
        command = recorded_command(options, entry.refresh_job, self.option_classes, self.refused)
        return run_refresh(options, RefreshSource(patterns=[spec.inputs_glob(str(value))], command=command,
                                                  prepare=lambda: self._prepare(options)), shared_filesystem=shared)

    def _prepare(self, options: PipelineOptions) -> PreparedSource:
        plan: SourcePlan = self.spec.plan(options, job=self.spec.entry.refresh_job)
        index = self.spec.index(options, plan)
        return PreparedSource(
            schema=plan.schema, feature_transforms=plan.feature_transforms, metadata=plan.metadata,
            inputs=index.inputs, expected_inputs=len(index.inputs) if index.expected_inputs is None
            else index.expected_inputs, source_options=self.spec.sample_values(options),
            read_all=lambda pipeline: pipeline | "ReadInputs" >> plan.read, read_fresh=index.read_fresh,
            key_feature=plan.key_feature)


REFRESH_PROG = "beam-tfrecord refresh"
REFRESH_USAGE = f"""usage: {REFRESH_PROG} [SOURCE] --dataset_root=ROOT INPUT_OPTION=... [job and runner options]

Refreshes a versioned dataset root (ROOT/LATEST, ROOT/versions/<id>/) from its inputs: nothing to do when
they are unchanged since LATEST; else a new version whose records of unchanged inputs are kept from LATEST
and only new or changed ones are encoded; LATEST moves to it; old versions are deleted (--keep_versions,
--min_version_age); a killed refresh is resumed by the next one.

sources (named first, or told by the input option given):
""" + "".join(f"  {s.name:<13} {s.input_flag:<11} {s.what}\n" for s in SOURCES) + f"""
`{REFRESH_PROG} SOURCE --help` lists the options of a source."""


def source_of(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the source's name, the job's own arguments): the first argument when it names a source, else the one
    whose input option is given; None when neither says (or more than one input option is given)."""
    if argv and argv[0] in {s.name for s in SOURCES}:
        return argv[0], list(argv[1:])
    given = [s.name for s in SOURCES if any(arg == s.input_flag or arg.startswith(s.input_flag + "=") for arg in argv)]
    return (given[0] if len(given) == 1 else None), list(argv)


def refresh_any(argv: Sequence[str] | None = None, *, prog: str | None = None) -> RefreshPlan | None:
    """Runs the refresh of the source the arguments name; exits 2 with the usage when they name none."""
    args = list(sys.argv[1:] if argv is None else argv)
    source, job_args = source_of(args)
    if source is None:
        if any(arg in ("-h", "--help") for arg in args):
            print(REFRESH_USAGE)
            raise SystemExit(0)
        print(REFRESH_USAGE, file=sys.stderr)
        raise SystemExit(f"{prog or REFRESH_PROG}: name the source first ({', '.join(s.name for s in SOURCES)}) or "
                         f"give exactly one of {', '.join(s.input_flag for s in SOURCES)}")
    return RefreshJob(spec_of(source_named(source)), prog or REFRESH_PROG).run(job_args)


FEATURE_COMMANDS = ("add-features", "drop-features", "rename-features")


def job_of_command(command: str) -> Callable[..., object]:
    """The ``run`` of ``beam-tfrecord COMMAND``: a source's build, the refresh of any source, or ``compact``."""
    if command == "refresh":
        return refresh_any
    if command == "compact":
        from pipelines.compact import run  # a job of its own, with no source

        return run
    if command in FEATURE_COMMANDS:
        from pipelines import add_features  # jobs of their own: features of a version

        return {"add-features": add_features.run, "drop-features": add_features.run_drop,
                "rename-features": add_features.run_rename}[command]
    [source] = [s for s in SOURCES if s.command == command]
    return BuildJob(spec_of(source), f"beam-tfrecord {command}").run

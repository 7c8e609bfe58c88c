"""``--dry_run=True``: build the Dataflow job, submit nothing, and say so.

Ends with ``DryRunFinished`` (exit 0); on any other runner, which would run the job for real, it is refused.
See docs/operations.md, "Dataflow".
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions, TestOptions

from beam_tfrecord.engine.table import runner_name, runner_name_of, traits_of_options


class DryRunFinished(SystemExit):
    """The runner built the job and submitted nothing; the job ends here with exit status 0.

    Attributes:
        job: Beam's Dataflow ``Job``: ``proto_pipeline`` (what would be staged as ``pipeline.pb``),
            ``options`` (the pipeline options the service would be given) and ``proto``.
    """

    def __init__(self, job: Any) -> None:
        super().__init__(0)
        self.job = job


def is_dry_run(options: PipelineOptions) -> bool:
    return bool(options.view_as(TestOptions).dry_run)


def check_dry_run(options: PipelineOptions) -> None:
    """Refuses, before the pipeline is built, a dry run that would run the job or reach Cloud Storage.

    Raises:
        SystemExit: with the reason, when the runner ignores ``--dry_run`` or the temp and staging
            locations are both unusable (not valid ``gs://`` paths: Beam would spend 120 s of retries looking up a
            default bucket).
    """
    if not is_dry_run(options):
        return
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.runner import create_runner

    if not traits_of_options(options).dry_run:
        raise SystemExit(f"--dry_run=True is honoured only by the DataflowRunner; the {runner_name_of(options)} would "
                         "run the job (drop --dry_run, or add --runner=DataflowRunner)")
    cloud = options.view_as(GoogleCloudOptions)
    validator = PipelineOptionsValidator(options, create_runner(options.view_as(StandardOptions).runner))
    problems = [problem for location in ("temp_location", "staging_location")
                for problem in validator.validate_gcs_path(cloud, location)]
    if len(problems) == 2:  # Beam uses either one when the other is bad; with both bad it creates a bucket
        raise SystemExit("a dry run needs a valid gs:// --temp_location or --staging_location (Beam would "
                         f"otherwise create a default bucket in the project, which needs the network): {problems[0]}")


def end_if_dry_run(pipeline: beam.Pipeline) -> None:
    """After the runner returned: on a dry run, prints what was built and raises ``DryRunFinished``."""
    if not is_dry_run(pipeline.options):
        return
    result: Any = pipeline.result
    job = result.job  # the DataflowRunner's dry-run result carries the Job it built
    cloud = job.options.view_as(GoogleCloudOptions)
    print(f"dry run: the {runner_name(pipeline)} built job {cloud.job_name!r} for project {cloud.project!r} in "
          f"{cloud.region!r} ({len(job.proto_pipeline.components.transforms)} transforms); nothing was staged or "
          "submitted")
    raise DryRunFinished(job)

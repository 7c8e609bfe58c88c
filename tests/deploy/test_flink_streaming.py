"""deploy/flink/submit-stream.sh (issue 62): a streaming write on Flink, checked as far as this machine allows.

No Flink job server here: the script's options are checked to be Beam's (or the Flink job server's own), and a
streaming write is built with them, short of submitting it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse

from beam_tfrecord import WriteBalancedTFRecord
from beam_tfrecord.beam.tuning import WriterTuning
from beam_tfrecord.engine import traits_of_options
from beam_tfrecord.errors import LocalPathError

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "flink" / "submit-stream.sh"
# Options the Flink job server describes to the PortableRunner when it connects (Beam's Python SDK has none of them).
FLINK_JOB_SERVER_OPTIONS = {"checkpointing_interval"}


def _options() -> list[str]:
    """The script's options to the pipeline, shell defaults filled in."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith('python -m "${PIPELINE}"'))
    args = shlex.split(line)[3:]
    return [re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", a) for a in args if a != "$@"]


def test_the_script_runs_a_streaming_job_on_the_portable_runner_with_real_options():
    args = _options()
    names = {a[2:].split("=", 1)[0] for a in args}
    assert names - FLINK_JOB_SERVER_OPTIONS <= set(PipelineOptions([]).get_all_options())
    options = PipelineOptions(args)
    assert options.view_as(StandardOptions).streaming and options.view_as(StandardOptions).runner == "PortableRunner"
    assert traits_of_options(options).streams


def test_a_streaming_write_builds_with_the_scripts_options(tmp_path):
    """The pipeline a user submits with the script: built (not run); a local prefix is refused before submission."""
    options = PipelineOptions(_options())

    def build(tuning: WriterTuning | None) -> beam.Pipeline:
        pipeline = beam.Pipeline(options=options)
        _ = (pipeline | PeriodicImpulse(fire_interval=1) | beam.Map(lambda t: str(t).encode())
             | WriteBalancedTFRecord(str(tmp_path / "events"), triggering_frequency=60, tuning=tuning))
        return pipeline

    with pytest.raises(LocalPathError):  # the task managers' workers would not see this machine's folder
        build(None)
    built = build(WriterTuning(shared_filesystem=True))  # a folder every task manager mounts at the same path
    labels = {t.full_label for t in built.transforms_stack[0].parts[-1].parts}
    assert labels == {"WriteBalancedTFRecord/WritePanes"}
    assert list(tmp_path.iterdir()) == []

"""deploy/dask: the cluster manifest parses and is wired to the job, every option in its commands exists."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.dask.dask_runner import DaskOptions

from pipelines.build_image_dataset import ImageFolderOptions
from pipelines.common import DatasetOutputOptions
from pipelines.refresh_image_dataset import RefreshOptions

DASK = Path(__file__).resolve().parents[2] / "deploy" / "dask"


def _launcher():
    spec = importlib.util.spec_from_file_location("slurm_launch", DASK / "slurm_launch.py")
    module = importlib.util.module_from_spec(spec)
    # Without a __pycache__ in deploy/: test_deploy_files takes any other file there for a stray one, so the
    # suite's second run in the same checkout failed.
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)  # imports without dask_jobqueue
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


def _readme_commands() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", (DASK / "README.md").read_text(), re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    commands = []
    for words in map(shlex.split, lines):  # the job's own arguments: after `beam-tfrecord` or `-m pipelines.X`
        starts = [i for i, w in enumerate(words) if w == "beam-tfrecord" or w.startswith("pipelines.")]
        if starts:
            commands.append(words[starts[0]:])
    return commands


def test_the_cluster_is_a_dask_kubernetes_resource_whose_workers_join_its_scheduler():
    cluster = yaml.safe_load((DASK / "dask-cluster.yaml").read_text())
    assert (cluster["apiVersion"], cluster["kind"]) == ("kubernetes.dask.org/v1", "DaskCluster")
    worker = cluster["spec"]["worker"]["spec"]["containers"][0]
    scheduler = cluster["spec"]["scheduler"]["spec"]["containers"][0]
    assert worker["args"][:2] == ["dask", "worker"] and scheduler["args"] == ["dask", "scheduler"]
    assert worker["args"][worker["args"].index("--nthreads") + 1] == "1"
    assert worker["image"] == scheduler["image"]
    ports = {p["name"]: p["port"] for p in cluster["spec"]["scheduler"]["service"]["ports"]}
    assert ports["tcp-comm"] == 8786
    assert "tcp://beam-tfrecord-scheduler:8786" in (DASK / "README.md").read_text()  # the operator's service name
    assert cluster["metadata"]["name"] + "-scheduler" == "beam-tfrecord-scheduler"


def _known_flags() -> set[str]:
    """Every flag of Beam's standard and Dask options and of the jobs' own option groups."""
    flags = set()
    for options in (PipelineOptions, DaskOptions, DatasetOutputOptions, ImageFolderOptions, RefreshOptions,
                    *PipelineOptions.__subclasses__()):
        parser = argparse.ArgumentParser()
        options._add_argparse_args(parser)
        flags |= {flag for action in parser._actions for flag in action.option_strings}
    return flags


def test_every_option_in_the_readme_commands_is_an_option_of_the_job_or_of_beam():
    commands = _readme_commands()
    assert len(commands) >= 4
    known = _known_flags()
    for command in commands:
        for arg in command:
            if arg.startswith("--"):
                assert arg.split("=", 1)[0] in known, (" ".join(command[:2]), arg)
    dask_flags = {arg.split("=", 1)[0] for arg in re.findall(r"--dask_\w+", (DASK / "README.md").read_text())}
    assert dask_flags <= known and len(dask_flags) == 5


def test_the_slurm_launcher_adds_the_runner_and_the_scheduler_address():
    launcher = _launcher()
    argv = launcher.job_argv("tcp://10.0.0.5:8786", ["build", "--input", "in", "--output", "out"])
    assert argv == ["build", "--input", "in", "--output", "out",
                    "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                    "--dask_client_address=tcp://10.0.0.5:8786"]
    with pytest.raises(SystemExit, match="are set by this launcher"):
        launcher.job_argv("tcp://x:1", ["build", "--runner=DirectRunner"])


def test_the_image_installs_the_writer_and_dask_extras():
    dockerfile = (DASK / "Dockerfile").read_text()
    extras = re.search(r'pip install [^\n]*"\.\[([a-z_,]+)\]"', dockerfile).group(1).split(",")
    assert {"beam", "dask", "array_record"} <= set(extras)
    assert "FROM python:3.11" in dockerfile

"""deploy/ is configuration only; these tests check it against the job as far as this machine allows.

No Docker engine, no Google Cloud and no Flink here: files are parsed, and every option they
pass is checked to be a real option of the job or of Beam's runners, with the same values in
every scheduler.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import apache_beam
import pytest
import yaml
from apache_beam.options.pipeline_options import FlinkRunnerOptions, PipelineOptions

from pipelines import refresh, refresh_image_dataset
from pipelines.refresh_image_dataset import job_option_actions, job_option_names

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
REPO = DEPLOY.parent
BEAM_VERSION = apache_beam.__version__
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
REQUIRED = {"input", "dataset_root"}


def _metadata() -> dict:
    return json.loads((DEPLOY / "dataflow" / "metadata.json").read_text())


def _beam_option_names() -> set[str]:
    return set(PipelineOptions([]).get_all_options())


SHELL_EXAMPLES = {"INPUT": "gs://my-bucket/raw/images", "DATASET_ROOT": "gs://my-bucket/datasets/images",
                  "BUCKET": "my-bucket", "IMAGE": "europe-west1-docker.pkg.dev/p/r/i:latest", "KEEP_VERSIONS": "3"}


def _expand(value: str) -> str:
    """Shell ``${NAME:-default}`` / ``${NAME}`` in a script's arguments, with example values."""
    def one(match: re.Match) -> str:
        name, default = match.group(1), match.group(3)
        return default if default is not None else SHELL_EXAMPLES[name]
    return re.sub(r"\$\{([A-Z_]+)(:-([^}]*))?\}", one, value)


def _flags(args: list[str]) -> dict[str, str]:
    """``--name=value`` arguments as a dict (the form every deploy file uses)."""
    flags = {}
    for arg in args:
        match = re.fullmatch(r"--([a-z_]+)=(.*)", arg)
        if match:
            flags[match.group(1)] = _expand(match.group(2))
    return flags


def _refresh_command(script: Path) -> list[str]:
    """The arguments of the ``beam-tfrecord refresh`` command in a shell script."""
    text = script.read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("beam-tfrecord refresh "))
    return shlex.split(line.split("beam-tfrecord refresh", 1)[1])


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "flink" / "docker-compose.yaml").read_text())


def _cronjob_args() -> list[str]:
    cronjob = yaml.safe_load((DEPLOY / "schedule" / "k8s-cronjob-flink.yaml").read_text())
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["beam-tfrecord", "refresh"]
    return container["args"]


def _scheduler_parameters() -> dict[str, str]:
    body = json.loads((DEPLOY / "schedule" / "cloud_scheduler_launch_request.json").read_text())
    return body["launchParameter"]["parameters"]


def _airflow_parameters() -> dict[str, str]:
    tree = ast.parse((DEPLOY / "schedule" / "airflow_refresh_dag.py").read_text())
    assign = next(node for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "JOB_PARAMETERS" for t in node.targets))
    return ast.literal_eval(assign.value)


def _launch_parameters() -> dict[str, str]:
    text = (DEPLOY / "dataflow" / "launch.sh").read_text()
    spec = re.search(r'--parameters="\^~\^([^"]+)"', text).group(1)
    return {name: _expand(value) for name, value in (item.split("=", 1) for item in spec.split("~"))}


# --- Dataflow Flex Template -------------------------------------------------------------------

def test_metadata_parameters_are_exactly_the_job_options() -> None:
    names = [p["name"] for p in _metadata()["parameters"]]
    assert len(names) == len(set(names)), "duplicate parameters"
    assert set(names) == set(job_option_names())
    for parameter in _metadata()["parameters"]:
        assert parameter["label"] and parameter["helpText"], parameter
        assert parameter.get("isOptional", False) is (parameter["name"] not in REQUIRED), parameter


def test_metadata_regexes_agree_with_option_choices() -> None:
    regexes = {p["name"]: p.get("regexes", []) for p in _metadata()["parameters"]}
    for action in job_option_actions():
        for value in [str(c) for c in action.choices or []] + ([str(action.default)] if action.type is int
                                                               and action.default is not None else []):
            assert all(re.fullmatch(r, value) for r in regexes[action.dest]), (action.dest, value)
        if action.choices:
            assert not any(re.fullmatch(r, "bogus") for r in regexes[action.dest]), action.dest


def _example(action: argparse.Action) -> str:
    if action.choices:
        return str(action.choices[-1])
    if action.type is int:
        return "7"
    if action.type is float:
        return "0.25"
    if action.const is True:  # a flag that also takes =true|false
        return "true"
    return "gs://bucket/some/path"


@pytest.mark.parametrize("action", [pytest.param(a, id=a.dest) for a in job_option_actions()])
def test_template_parameter_form_parses(action: argparse.Action) -> None:
    """Flex Templates pass every parameter as ``--name=value``; the job must accept that form."""
    value = _example(action)
    parsed = PipelineOptions([f"--{action.dest}={value}"]).get_all_options()[action.dest]
    assert str(parsed).lower() == value.lower()


def test_dockerfile_matches_the_installed_sdk_and_the_job() -> None:
    text = (DEPLOY / "dataflow" / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", text, flags=re.M)
    assert f"apache/beam_python{PYTHON_VERSION}_sdk:{BEAM_VERSION}" in bases
    assert any(b.startswith(f"gcr.io/dataflow-templates-base/python{PYTHON_VERSION.replace('.', '')}-template-launcher")
               for b in bases)
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", text, flags=re.M):
        for path in source.split():
            assert (REPO / path).exists(), f"Dockerfile copies missing {path}"
    py_file = re.search(r'FLEX_TEMPLATE_PYTHON_PY_FILE="\$\{WORKDIR\}/(\S+)"', text).group(1)
    assert py_file == "pipelines/refresh.py"  # `beam-tfrecord refresh` as a file: the input option names the source
    last = (REPO / py_file).read_text().rstrip().splitlines()[-2:]  # the job runs when the launcher runs the file
    assert last[0] == 'if __name__ == "__main__":' and "run_as_command(run, prog=PROG)" in last[1], last
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text  # the image is also the workers' SDK container


def test_cloudbuild_builds_the_dockerfile() -> None:
    build = yaml.safe_load((DEPLOY / "dataflow" / "cloudbuild.yaml").read_text())
    assert "deploy/dataflow/Dockerfile" in build["steps"][0]["args"]


# --- Flink ------------------------------------------------------------------------------------

def test_flink_versions_are_consistent_with_beam() -> None:
    services = _compose()["services"]
    job_server = re.fullmatch(r"apache/beam_flink(\d+\.\d+)_job_server:(\S+)", services["job-server"]["image"])
    flink_version, beam_version = job_server.groups()
    assert flink_version in FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS and beam_version == BEAM_VERSION
    assert services["jobmanager"]["image"].startswith(f"flink:{flink_version}")
    docs = list(yaml.safe_load_all((DEPLOY / "flink" / "k8s" / "flink-session.yaml").read_text()))
    flink = next(d for d in docs if d["kind"] == "FlinkDeployment")
    assert flink["spec"]["flinkVersion"] == "v" + flink_version.replace(".", "_")
    assert flink["spec"]["image"].startswith(f"flink:{flink_version}")
    server = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert server["image"] == services["job-server"]["image"]
    assert f"--flink-master={flink['metadata']['name']}-rest:8081" in server["args"]


def test_worker_pool_shares_the_task_manager_network() -> None:
    services = _compose()["services"]
    assert services["beam-worker-pool"]["network_mode"] == "service:taskmanager"
    assert services["beam-worker-pool"]["build"]["dockerfile"] == "deploy/dataflow/Dockerfile"
    assert _flags(services["submit"]["command"])["environment_config"] == "localhost:50000"


# --- every command passes real options ----------------------------------------------------------

COMMANDS = {
    "flink/docker-compose.yaml": lambda: _flags(_compose()["services"]["submit"]["command"]),
    "flink/submit.sh": lambda: _flags(_refresh_command(DEPLOY / "flink" / "submit.sh")),
    "schedule/k8s-cronjob-flink.yaml": lambda: _flags(_cronjob_args()),
    "dataflow/launch.sh": _launch_parameters,
    "schedule/cloud_scheduler_launch_request.json": _scheduler_parameters,
    "schedule/airflow_refresh_dag.py": _airflow_parameters,
}


@pytest.mark.parametrize("where", COMMANDS)
def test_commands_pass_only_real_options(where: str) -> None:
    flags = COMMANDS[where]()
    unknown = set(flags) - set(job_option_names()) - _beam_option_names()
    assert not unknown, f"{where} passes options that exist neither in the job nor in Beam: {unknown}"
    assert set(flags) >= REQUIRED, f"{where} lacks {REQUIRED - set(flags)}"
    options = PipelineOptions([f"--{k}={v}" for k, v in flags.items()])  # values parse with the options' types
    assert options.view_as(refresh_image_dataset.RefreshOptions).dataset_root == flags["dataset_root"]


def test_schedulers_pass_the_same_job_options() -> None:
    job = set(job_option_names())
    scheduler = {k: v for k, v in _scheduler_parameters().items() if k in job}
    airflow = {k: v for k, v in _airflow_parameters().items() if k in job}
    cronjob = {k: v for k, v in _flags(_cronjob_args()).items() if k in job}
    assert scheduler == airflow == cronjob


def test_every_command_is_beam_tfrecord_refresh_of_the_image_folder() -> None:
    """The deploy files run ``beam-tfrecord refresh``; the input option they pass tells the image-folder source."""
    assert _compose()["services"]["submit"]["entrypoint"] == ["beam-tfrecord", "refresh"]
    for where, flags in COMMANDS.items():
        assert refresh.source_of([f"--{k}={v}" for k, v in flags().items()])[0] == "image-folder", where


def test_flink_runs_through_the_portable_runner_with_external_workers() -> None:
    for where in ("flink/docker-compose.yaml", "flink/submit.sh", "schedule/k8s-cronjob-flink.yaml"):
        flags = COMMANDS[where]()
        assert flags["runner"] == "PortableRunner" and flags["environment_type"] == "EXTERNAL", where


# --- syntax -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(p.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*") if p.is_file()))
def test_deploy_file_parses(path: str) -> None:
    file = DEPLOY / path
    if file.suffix in (".yaml", ".yml"):
        assert all(doc is not None for doc in yaml.safe_load_all(file.read_text()))
    elif file.suffix == ".json":
        json.loads(file.read_text())
    elif file.suffix == ".sh":
        subprocess.run(["bash", "-n", str(file)], check=True)
        assert file.stat().st_mode & 0o111, f"{path} is not executable"
    elif file.suffix == ".py":
        compile(file.read_text(), str(file), "exec")
    elif file.name == "Dockerfile" or file.suffix == ".md":
        assert file.read_text().strip()
    else:
        pytest.fail(f"unexpected file in deploy/: {path}")

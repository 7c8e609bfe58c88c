"""A job's command line parsed without the Dask runner's module unless an option needs it: the
Dask options still pass through, and a typo of one is still refused.

One fresh interpreter (what this process has imported is not the question) parses three command lines
in turn, each printing one line: none naming a Dask option, then the option itself, then a typo of it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_PARSE = """
import contextlib, io, sys
from pipelines.build_image_dataset import COMMAND

def parse(argv):
    options = COMMAND.parse(argv)
    address = options.get_all_options().get("address")  # the dest of --dask_client_address
    print("parsed", address, "apache_beam.runners.dask.dask_runner" in sys.modules)

parse(["--input", "IMGS", "--output", "OUT"])
parse(["--input", "IMGS", "--output", "OUT", "--dask_client_address=tcp://10.0.0.5:8786"])
refused = io.StringIO()
with contextlib.redirect_stderr(refused):
    try:
        parse(["--input", "IMGS", "--dask_client_adress=x"])
    except SystemExit as ended:
        print("exit", ended.code, refused.getvalue().splitlines()[0])
"""


@pytest.fixture(scope="module")
def parsed() -> list[str]:
    done = subprocess.run([sys.executable, "-c", _PARSE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.parametrize("line, address, dask_imported", [
    pytest.param(0, "None", "False", id="no-dask-option-no-dask-import"),
    pytest.param(1, "tcp://10.0.0.5:8786", "True", id="dask-option-passes-through"),
])
def test_the_dask_runners_options_are_imported_only_when_named(parsed, line, address, dask_imported):
    assert parsed[line].split() == ["parsed", address, dask_imported]


def test_a_typo_of_a_dask_option_is_still_refused(parsed):
    assert parsed[2] == "exit 2 python -m pipelines.build_image_dataset: unknown option --dask_client_adress"

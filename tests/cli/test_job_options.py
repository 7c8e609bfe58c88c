"""A job's command line parsed without the Dask runner's module unless an option needs it: the
Dask options still pass through, and a typo of one is still refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PARSE = """
import sys
from pipelines.build_image_dataset import COMMAND
options = COMMAND.parse(sys.argv[1:])
print(options.get_all_options().get("address"))  # the dest of --dask_client_address
print("apache_beam.runners.dask.dask_runner" in sys.modules)
"""


@pytest.mark.parametrize("argv, address, dask_imported", [
    pytest.param(["--input", "IMGS", "--output", "OUT"], "None", "False", id="no-dask-option-no-dask-import"),
    pytest.param(["--input", "IMGS", "--output", "OUT", "--dask_client_address=tcp://10.0.0.5:8786"],
                 "tcp://10.0.0.5:8786", "True", id="dask-option-passes-through"),
])
def test_the_dask_runners_options_are_imported_only_when_named(argv, address, dask_imported):
    done = subprocess.run([sys.executable, "-c", _PARSE, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [address, dask_imported]


def test_a_typo_of_a_dask_option_is_still_refused():
    done = subprocess.run([sys.executable, "-c", _PARSE, "--input", "IMGS", "--dask_client_adress=x"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == "python -m pipelines.build_image_dataset: unknown option --dask_client_adress"

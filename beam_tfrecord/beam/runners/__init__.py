"""Beam runners as the writer sees them.

- ``table``: what the writer must know of each runner (``RunnerTraits``), one row per runner.
- ``local_engine``: ``LocalBatchRunner``, the DirectRunner's batch engine the jobs run on, which
  raises a worker process's beam-tfrecord error as that error.
- ``local_workers``: how many local worker processes a build gets (every core by default, one
  in-memory worker for a small job) and setting a pipeline up to run in them.
- ``worker_main``: the local worker processes' entry point (Beam's harness, ended without the
  interpreter's teardown); imported by nothing, run with ``-m`` (``local_engine.WORKER_COMMAND``).
- ``forked_workers``: those worker processes forked from the launching process (its imports done)
  instead of started as fresh interpreters (``worker_main``), where that is safe.

The Dask runner and cluster stay beside this package (``beam/dask_runner.py``, ``dask_cluster.py``,
``dask_sizeof.py``): ``beam_tfrecord.beam.dask_runner.DaskRunner`` is a dotted runner path users
pass to ``--runner`` and deploy configurations name. The names below are importable from here too.
"""

from beam_tfrecord.beam.runners.local_engine import LocalBatchRunner, error_from_worker, local_batch_runner_for
from beam_tfrecord.beam.runners.local_workers import (
    LOCAL_WORKERS_ENV,
    SMALL_JOB_MAX_INPUT_BYTES,
    SMALL_JOB_MAX_SAMPLES,
    WORKER_LOG_RELAY,
    InputSize,
    LocalWorkersChoice,
    available_cores,
    choose_local_workers,
    local_workers_for,
    local_workers_of,
    runner_parallelism_chosen,
    use_local_workers,
)
from beam_tfrecord.beam.runners.table import (
    BEAM_DASK_RUNNER,
    FIXED_DASK_RUNNER,
    RunnerTraits,
    runner_name_of,
    runs_on_direct_runner,
    traits_of,
    traits_of_name,
    traits_of_options,
    use_fixed_dask_runner,
    uses_dask_runner,
)

__all__ = [
    "BEAM_DASK_RUNNER", "FIXED_DASK_RUNNER", "LOCAL_WORKERS_ENV", "SMALL_JOB_MAX_INPUT_BYTES", "SMALL_JOB_MAX_SAMPLES",
    "WORKER_LOG_RELAY", "InputSize", "LocalBatchRunner", "LocalWorkersChoice", "RunnerTraits", "available_cores",
    "choose_local_workers", "error_from_worker", "local_batch_runner_for", "local_workers_for", "local_workers_of",
    "runner_name_of", "runner_parallelism_chosen", "runs_on_direct_runner", "traits_of", "traits_of_name",
    "traits_of_options", "use_fixed_dask_runner", "use_local_workers", "uses_dask_runner",
]

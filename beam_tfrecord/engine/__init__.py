"""The execution engine, one floor below the Beam transforms: each runner's traits (``table.py``), the local batch
engine and its worker processes, the Dask runner and cluster, and where workers run (``worker_placement.py``).

Invariant: no module outside this package names a runner (``tests/test_layers.py``); a runner's difference is a trait.
"""

from beam_tfrecord.engine.local_engine import (
    LocalBatchRunner,
    error_from_worker,
    job_runner_for,
    local_batch_runner_for,
)
from beam_tfrecord.engine.local_workers import (
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
    quiet_worker_start_up,
    runner_parallelism_chosen,
    use_local_workers,
)
from beam_tfrecord.engine.table import (
    BEAM_DASK_RUNNER,
    FIXED_DASK_RUNNER,
    RunnerTraits,
    Workers,
    runner_name,
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
    "WORKER_LOG_RELAY", "InputSize", "LocalBatchRunner", "LocalWorkersChoice", "RunnerTraits", "Workers",
    "available_cores", "choose_local_workers", "error_from_worker", "job_runner_for", "local_batch_runner_for",
    "local_workers_for", "local_workers_of", "quiet_worker_start_up", "runner_name", "runner_name_of",
    "runner_parallelism_chosen", "runs_on_direct_runner", "traits_of", "traits_of_name", "traits_of_options",
    "use_fixed_dask_runner", "use_local_workers", "uses_dask_runner",
]

"""A user's script whose Beam workers read object stores after its own process did.

Run as a script: ``python runner_workers.py OUT RUNNER[,RUNNER...] PATH [PATH ...]``. The process reads every
dataset with ``read_numpy`` first (obstore's runtime and the SDK clients start here), then runs, on each runner in
turn, a pipeline whose DoFn reads one dataset per element with ``read_numpy`` in a worker and writes
``OUT/RUNNER-INDEX.json``: the records it read and whether its process was forked from this one (it holds a mark
this process set on a module; a fresh interpreter does not). Runners:

- ``direct-forked``: the DirectRunner's 2 worker processes (``multi_processing``), forked from this process through
  the project's fork server (``LocalBatchRunner``), as the project's jobs run;
- ``portable-loopback``: the portable runner with LOOPBACK workers (the Fn API path of Flink and Dataflow: the SDK
  harness runs in this process);
- ``dask``: Beam's DaskRunner on a ``LocalCluster`` of 2 worker processes with a ``memory_limit``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

THREADS_END_SECONDS = 30
MARK = "beam-tfrecord runner_workers"  # set on ``json`` by the launching process: a forked worker has it


def read_one(element: tuple[int, str], *, out: str, runner: str) -> int:
    from beam_tfrecord import read_numpy

    index, path = element
    count = sum(1 for _ in read_numpy(path, split="train"))
    result = {"path": path, "records": count, "forked": getattr(json, "runner_workers_mark", None) == MARK,
              "pid": os.getpid()}
    with open(os.path.join(out, f"{runner}-{index}.json"), "w") as file:
        json.dump(result, file)
    return count


def run_on(runner: str, paths: list[str], out: str) -> None:
    import functools

    import apache_beam as beam

    elements = list(enumerate(paths))
    step = functools.partial(read_one, out=out, runner=runner)
    if runner == "direct-forked":
        from beam_tfrecord.engine.local_engine import LocalBatchRunner

        deadline = time.monotonic() + THREADS_END_SECONDS
        while threading.active_count() > 1 and time.monotonic() < deadline:  # the readers' fetch threads end after
            time.sleep(0.01)                                                   # their read: then workers are forked
        if threading.active_count() > 1:
            raise SystemExit(f"threads still running, workers would not be forked: {threading.enumerate()}")
        with beam.Pipeline(runner=LocalBatchRunner(), argv=["--direct_running_mode=multi_processing",
                                                            "--direct_num_workers=2"]) as pipeline:
            _ = pipeline | beam.Create(elements) | beam.Reshuffle() | beam.Map(step)
    elif runner == "portable-loopback":
        with beam.Pipeline(argv=["--runner=PortableRunner", "--job_endpoint=embed",
                                 "--environment_type=LOOPBACK"]) as pipeline:
            _ = pipeline | beam.Create(elements) | beam.Map(step)
    elif runner == "dask":
        from distributed import LocalCluster

        from beam_tfrecord.beam.dask_runner import DaskRunner

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                          dashboard_address=None) as cluster, \
                beam.Pipeline(runner=DaskRunner(), argv=[f"--dask_client_address={cluster.scheduler_address}"]) \
                as pipeline:
            _ = pipeline | beam.Create(elements) | beam.Map(step)
    else:
        raise SystemExit(f"unknown runner {runner!r}")


def main() -> None:
    from beam_tfrecord import read_numpy

    out, runners, paths = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
    json.runner_workers_mark = MARK  # type: ignore[attr-defined]
    main_counts = {path: sum(1 for _ in read_numpy(path, split="train")) for path in paths}
    for runner in runners:
        run_on(runner, paths, out)
    print(json.dumps({"main": main_counts, "pid": os.getpid()}))


if __name__ == "__main__":
    main()

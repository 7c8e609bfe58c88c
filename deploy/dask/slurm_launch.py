"""Runs a beam-tfrecord job on a Slurm cluster: dask-jobqueue starts Dask workers as batch jobs,
then the job runs on Beam's DaskRunner against their scheduler.

    python deploy/dask/slurm_launch.py --queue normal --workers 16 --cores 4 --memory 16GB -- \\
        build --input /shared/raw/images --output /shared/datasets/images

Everything after ``--`` is the ``beam-tfrecord`` command (``build``, ``build-manifest``,
``build-arrays``). Outputs must be on a filesystem every node sees, or gs://. Needs
``pip install dask-jobqueue`` beside ``beam-tfrecord[dask]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def job_argv(scheduler_address: str, job_args: Sequence[str]) -> list[str]:
    """The beam-tfrecord command line that runs ``job_args`` on the scheduler at ``scheduler_address``."""
    if not job_args:
        raise SystemExit("give the beam-tfrecord command after --, e.g. -- build --input DIR --output DIR")
    taken = [a for a in job_args if a.split("=", 1)[0] in ("--runner", "--dask_client_address")]
    if taken:
        raise SystemExit(f"{taken} are set by this launcher; leave them out")
    return [*job_args, f"--runner={DASK_RUNNER}", f"--dask_client_address={scheduler_address}"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queue", required=True, help="Slurm partition")
    parser.add_argument("--workers", type=int, default=8, help="Dask worker processes")
    parser.add_argument("--cores", type=int, default=2, help="cores per worker job")
    parser.add_argument("--memory", default="8GB", help="memory per worker job")
    parser.add_argument("--walltime", default="04:00:00")
    parser.add_argument("job_args", nargs=argparse.REMAINDER, help="-- then the beam-tfrecord command")
    args = parser.parse_args(argv)
    job_args = args.job_args[1:] if args.job_args[:1] == ["--"] else args.job_args

    from dask_jobqueue import SLURMCluster  # imported here: only the launch needs it
    from distributed import Client

    from beam_tfrecord.cli import main as beam_tfrecord_main

    # One thread per worker process: encoding holds the GIL.
    with SLURMCluster(queue=args.queue, cores=args.cores, processes=args.cores, memory=args.memory,
                      walltime=args.walltime) as cluster, Client(cluster) as client:
        cluster.scale(jobs=max(1, args.workers // args.cores))
        client.wait_for_workers(1)
        return beam_tfrecord_main(job_argv(cluster.scheduler_address, job_args))


if __name__ == "__main__":
    raise SystemExit(main())

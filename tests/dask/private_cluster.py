"""A Dask cluster whose workers share no disk with the client: each ``dask worker`` runs in its own mount
namespace with an empty tmpfs over the client's test folder, as on separate hosts.

Everything the client writes under pytest's base temp folder (its image folders, its outputs) does not
exist for the workers; what they share with the client is what real hosts share: the network (the
scheduler, the GCS emulator on 127.0.0.1) and the installed code. Needs Linux, root (or the right
capabilities) and ``unshare``; ``private_cluster_skip_reason`` says why not where they are missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

WORKER_MEMORY_LIMIT = "1GiB"  # real clusters' workers have one


def private_cluster_skip_reason(hidden: Path) -> str | None:
    """Why workers cannot be given a private view of ``hidden`` here (None: they can)."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux and unshare (util-linux) to give each Dask worker its own mount namespace"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            f'mount -t tmpfs -o size=1m tmpfs "{hidden}" && test ! -e "{hidden}/.probe"'],
                           capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    if probe.returncode != 0:
        return f"mounting a private tmpfs in a new mount namespace is not allowed here: {probe.stderr.strip()}"
    return None


@dataclasses.dataclass(frozen=True)
class PrivateCluster:
    """A running scheduler and workers that cannot see ``hidden``.

    Attributes:
        address: the scheduler's address (``--dask_client_address``).
        hidden: the client's folder that is an empty tmpfs for every worker.
    """

    address: str
    hidden: Path


def _worker_env(side: Path) -> dict[str, str]:
    """This process's environment, with the emulator's placeholder credentials copied where workers see them."""
    env = dict(os.environ)
    credentials = env.get("GOOGLE_APPLICATION_CREDENTIALS")
    if credentials:
        copy = side / "placeholder-adc.json"
        shutil.copyfile(credentials, copy)
        env["GOOGLE_APPLICATION_CREDENTIALS"] = str(copy)
    return env


def _wait_for_file(path: Path, processes: list[subprocess.Popen], timeout_seconds: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not path.exists():
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"a cluster process exited with {process.returncode} while starting")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_seconds} s")
        time.sleep(0.1)


@contextlib.contextmanager
def private_cluster(hidden: Path, *, workers: int = 2) -> Iterator[PrivateCluster]:
    """Starts ``dask scheduler`` and ``workers`` ``dask worker`` processes (with nannies, ``--nthreads 1``,
    ``--memory-limit``), each worker with an empty tmpfs mounted over ``hidden``; stops them after."""
    from distributed import Client

    side = Path(tempfile.mkdtemp(prefix="bt-private-cluster-"))  # outside ``hidden``: both sides see it
    scheduler_file = side / "scheduler.json"
    dask = str(Path(sys.executable).with_name("dask"))
    env = _worker_env(side)
    logs = (side / "cluster.log").open("wb")
    processes = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(scheduler_file)], env=env, stdout=logs, stderr=logs)]
    try:
        _wait_for_file(scheduler_file, processes)
        worker = (f'mount -t tmpfs -o size=16m tmpfs "{hidden}" && exec "{dask}" worker --scheduler-file '
                  f'"{scheduler_file}" --nthreads 1 --memory-limit {WORKER_MEMORY_LIMIT} --no-dashboard '
                  f'--local-directory "{side}"')
        processes += [subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", worker],
                                       env=env, stdout=logs, stderr=logs) for _ in range(workers)]
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(workers, timeout=90)
            try:
                yield PrivateCluster(client.scheduler.address, hidden)
            finally:
                client.shutdown()  # the scheduler closes its workers at once (SIGTERM's nannies take seconds each)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        logs.close()
        shutil.rmtree(side, ignore_errors=True)

"""The local worker processes reuse the memory they free (``engine/worker_memory.py``) rather
than give it back and fault fresh pages in again: counted as the minor page faults of a loop that
allocates and frees big blocks, in a worker process (forked or started with a command line) and in
a plain process with and without ``keep_freed_memory``. The same workers report their collector's frozen
objects and their state sampler's period (``engine/state_sampling.py``)."""

import platform
import subprocess
import sys
import textwrap

import pytest

from beam_tfrecord.engine.forked_workers import fork_workers_enabled

# Allocates and frees 8 MiB in four 2 MiB blocks, ROUNDS times, touching every page; prints the
# minor page faults of the rounds after the first. Freed, 8 MiB at the top of the heap is more than
# glibc keeps by default, so it is given back each round and faulted in again the next.
CHURN = textwrap.dedent("""
    import resource

    ROUNDS = 40

    def churn_faults():
        blocks = [b"x" * (2 << 20) for _ in range(4)]
        del blocks
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(ROUNDS):
            blocks = [b"x" * (2 << 20) for _ in range(4)]
            del blocks
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
""")
PAGES_CHURNED = 40 * (8 << 20) // 4096  # ROUNDS x 8 MiB

needs_glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def _python(script: str, *args: str, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@needs_glibc
def test_a_process_that_keeps_freed_memory_does_not_fault_it_in_again():
    script = CHURN + textwrap.dedent("""
        from beam_tfrecord.engine.worker_memory import keep_freed_memory
        print(churn_faults())  # the default first, then in the same process after keep_freed_memory
        assert keep_freed_memory()
        print(churn_faults())
    """)
    given_back, kept = map(int, _python(script).split())
    assert given_back > PAGES_CHURNED // 2  # the default gives the memory back, and faults it in again
    assert kept < PAGES_CHURNED // 50


PIPELINE = CHURN + textwrap.dedent("""
    import os
    import sys
    import apache_beam as beam
    from beam_tfrecord.engine.forked_workers import FORK_WORKERS_ENV
    from beam_tfrecord.engine.local_engine import LocalBatchRunner
    from beam_tfrecord.engine.local_workers import use_local_workers

    def report(_):
        import gc  # in the worker
        import os
        from apache_beam.runners.worker import statesampler
        return (f"{os.getpid()} {churn_faults()} {gc.get_freeze_count()} "
                f"{statesampler.get_current_tracker().sampling_period_ms}")

    for fork, out in zip(sys.argv[1::2], sys.argv[2::2]):  # one run per (forking, output)
        os.environ[FORK_WORKERS_ENV] = fork
        pipeline = beam.Pipeline(runner=LocalBatchRunner())
        use_local_workers(pipeline, 2)
        with pipeline:
            (pipeline | beam.Create(range(4)) | beam.Reshuffle() | beam.Map(report)
             | beam.io.WriteToText(out, shard_name_template="", num_shards=1))
    import gc
    from apache_beam.runners.worker import statesampler
    print(os.getpid(), gc.get_freeze_count(), statesampler.StateSampler("launcher", None).sampling_period_ms)
""")


@pytest.fixture(scope="module")
def worker_faults(tmp_path_factory) -> tuple[list[int], dict[str, list[list[str]]]]:
    """One launching process runs the pipeline with its workers forked (where Linux allows), then
    started with a command line (one interpreter start for both); its pid, frozen objects and state samplers'
    period, and each run's reports (a worker's pid, page faults, frozen objects and state sampler's period)."""
    folder = tmp_path_factory.mktemp("worker-memory")
    runs = {"forked": "1", "started": "0"} if fork_workers_enabled() else {"started": "0"}
    args = [arg for name, fork in runs.items() for arg in (fork, str(folder / f"{name}.txt"))]
    client = [int(word) for word in _python(PIPELINE, *args).split()[-3:]]
    return client, {name: [line.split() for line in (folder / f"{name}.txt").read_text().splitlines()]
                    for name in runs}


@needs_glibc
@pytest.mark.parametrize("fork", [
    pytest.param("forked", marks=pytest.mark.skipif(not fork_workers_enabled(), reason="forking needs Linux")),
    "started",
])
def test_the_local_worker_processes_keep_freed_memory(worker_faults, fork):
    (client, _, _), runs = worker_faults
    reports = runs[fork]
    assert len(reports) == 4
    assert client not in {int(pid) for pid, _, _, _ in reports}  # run by worker processes
    assert all(int(faults) < PAGES_CHURNED // 50 for _, faults, _, _ in reports), reports


@pytest.mark.parametrize("fork", [
    pytest.param("forked", marks=pytest.mark.skipif(not fork_workers_enabled(), reason="forking needs Linux")),
    "started",
])
def test_the_local_worker_processes_freeze_the_heap_they_start_with(worker_faults, fork):
    """A full collection in a worker skips the modules it started with; the launching process is left as it was."""
    (_, client_frozen, _), runs = worker_faults
    assert client_frozen == 0
    assert all(int(frozen) > 50_000 for _, _, frozen, _ in runs[fork]), runs[fork]  # Beam's modules, at least


@pytest.mark.parametrize("fork", [
    pytest.param("forked", marks=pytest.mark.skipif(not fork_workers_enabled(), reason="forking needs Linux")),
    "started",
])
def test_the_local_worker_processes_sample_their_states_often(worker_faults, fork):
    """A bundle's state sampler in a worker notes its step every 10 ms, so the bundle's end waits at most that
    long for it; the launching process keeps Beam's 200 ms."""
    from apache_beam.runners.worker.statesampler import DEFAULT_SAMPLING_PERIOD_MS

    from beam_tfrecord.engine.state_sampling import SAMPLING_PERIOD_MS

    (_, _, client_period), runs = worker_faults
    assert client_period == DEFAULT_SAMPLING_PERIOD_MS == 200
    assert {int(period) for _, _, _, period in runs[fork]} == {SAMPLING_PERIOD_MS}, runs[fork]

"""Run a command and measure its wall time and the peak RSS of its whole process tree."""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import time

import psutil


@dataclasses.dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_bytes: int
    stdout: str
    stderr: str


def run_measured(command: list[str], *, env: dict[str, str] | None = None, interval_s: float = 0.05) -> Measured:
    """Runs ``command``, sampling the RSS of it and all its descendants every ``interval_s``.

    Raises:
        RuntimeError: if the command exits non-zero (with the end of its stderr).
    """
    start = time.perf_counter()
    process = psutil.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while process.poll() is None:
        try:
            tree = [process, *process.children(recursive=True)]
            total = 0
            for member in tree:
                try:
                    total += member.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, total)
        except psutil.Error:
            pass
        time.sleep(interval_s)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])}... exited {process.returncode}:\n{stderr[-4000:]}")
    return Measured(time.perf_counter() - start, peak, stdout, stderr)


def already_built(path: str, num_records: int) -> bool:
    """Whether ``path`` holds a published dataset of ``num_records`` records (a benchmark's data,
    kept between runs); False when there is none or it cannot be read (then: rebuild)."""
    from beam_tfrecord import load_manifest
    from beam_tfrecord.errors import BeamTFRecordError

    try:
        return load_manifest(path).num_written == num_records
    except BeamTFRecordError:
        return False


def child_env(*paths: str) -> dict[str, str]:
    """The environment for a benchmark child: quiet TensorFlow, ``paths`` importable (workers too)."""
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                PYTHONPATH=os.pathsep.join(filter(None, [*paths, os.environ.get("PYTHONPATH")])))


def paired_ratios(numerators: list[float], denominators: list[float]) -> str:
    """Each round's ratio of two variants run next to each other, and their median, as a line to print.

    On a machine whose speed drifts between rounds (20-40% on these VMs), a ratio of two medians taken over
    different rounds carries that drift; the ratio within a round, where both variants met the same machine,
    does not, and its median over the rounds is the figure to quote.
    """
    ratios = [n / d for n, d in zip(numerators, denominators)]
    return f"{statistics.median(ratios):.3f} (each round: {', '.join(f'{r:.3f}' for r in ratios)})"

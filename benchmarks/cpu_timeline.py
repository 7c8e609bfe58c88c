"""A per-process CPU timeline of one command: which process of its tree (the runner, each Beam
worker) uses how much of a core in each interval. Shows where a build leaves cores idle (the
runner alone at the start, one worker finishing while the other waits) better than a wall time.

    python benchmarks/cpu_timeline.py -- python -m beam_tfrecord.cli build --input DIR --output OUT --resize 128x128
    python benchmarks/cpu_timeline.py --interval 0.25 -- COMMAND...

Prints one row per interval: seconds since start, then the cores each process used in it (the
command's own process first, then its descendants in order of appearance), then their sum; and at
the end each process's CPU seconds, when it first and last used more than 0.2 of a core, and the
whole tree's cores busy. CPU is ``utime + stime`` from ``/proc`` (psutil), so a process that ends
between two samples loses its last interval's share.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time

import psutil


@dataclasses.dataclass
class Track:
    label: str
    cpu_s: list[float]  # cumulative CPU seconds at each sample (carried forward once it ends)


def _label(process: psutil.Process) -> str:
    try:
        line = " ".join(process.cmdline())
    except psutil.Error:
        return f"pid {process.pid}"
    if "sdk_worker_main" in line or "runners.worker_main" in line:  # Beam's worker entry point, or ours
        return f"worker {process.pid}"
    return f"{line[:40]} ({process.pid})"


def sample(command: list[str], interval_s: float) -> tuple[float, list[float], dict[int, Track]]:
    start = time.perf_counter()
    root = psutil.Popen(command, stdout=subprocess.DEVNULL)
    tracks: dict[int, Track] = {}
    times: list[float] = []
    known: dict[int, psutil.Process] = {}
    while root.poll() is None:
        now = time.perf_counter() - start
        try:
            members = [root, *root.children(recursive=True)]
        except psutil.Error:
            members = [root]
        for member in members:
            known.setdefault(member.pid, member)
        times.append(now)
        for pid, member in known.items():
            track = tracks.get(pid)
            if track is None:
                track = tracks[pid] = Track(_label(member), [0.0] * (len(times) - 1))
            try:
                cpu = member.cpu_times()
                value = cpu.user + cpu.system
            except psutil.Error:
                value = track.cpu_s[-1] if track.cpu_s else 0.0
            track.cpu_s.append(value)
        time.sleep(interval_s)
    wall = time.perf_counter() - start
    if root.returncode:
        raise SystemExit(f"the command exited {root.returncode}")
    return wall, times, tracks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds per row (sampled every 0.05 s)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    wall, times, tracks = sample(command, 0.05)
    busy = [t for t in tracks.values() if t.cpu_s and t.cpu_s[-1] > 0.05]
    print("  s    " + "  ".join(f"P{i}" .rjust(5) for i in range(len(busy))) + "   total")
    rows = int(wall / args.interval) + 1
    for row in range(rows):
        lo, hi = row * args.interval, (row + 1) * args.interval
        i = [k for k, t in enumerate(times) if t <= lo]
        j = [k for k, t in enumerate(times) if t <= hi]
        a, b = (i[-1] if i else 0), (j[-1] if j else 0)
        if b <= a:
            continue
        span = times[b] - times[a]
        cores = [(t.cpu_s[b] - t.cpu_s[a]) / span for t in busy]
        print(f"{lo:5.1f}  " + "  ".join(f"{c:5.2f}" for c in cores) + f"   {sum(cores):5.2f}")
    total = 0.0
    for k, track in enumerate(busy):
        steps = [(times[n], (track.cpu_s[n] - track.cpu_s[n - 1]) / (times[n] - times[n - 1]))
                 for n in range(1, len(times))]
        active = [t for t, c in steps if c > 0.2]
        first = f"{active[0]:.2f}" if active else "-"
        last = f"{active[-1]:.2f}" if active else "-"
        total += track.cpu_s[-1]
        print(f"P{k} {track.label}: {track.cpu_s[-1]:.2f} s CPU, busy from {first} s to {last} s")
    print(f"wall {wall:.2f} s, CPU {total:.2f} s (sampled), {total / wall:.2f} cores busy")


if __name__ == "__main__":
    sys.exit(main())

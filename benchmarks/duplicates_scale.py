"""Scale check of exact duplicates (issue 48): what one finding task and the publication step hold and take
for N records, running their real code on inputs shaped as a build of N records makes them.

    python benchmarks/duplicates_scale.py --records 1000000,10000000,100000000,1000000000 --dup_fraction 0.01

A build of N records writes F = N / BUFFER_DIGESTS digest files (one per encoder buffer); ``FindDuplicates``
runs T = min(F, SECTIONS) tasks, task t reading sections [t/T, (t+1)/T) of every file. Here task 0's share of
each of the F files is written (rows with content hashes in its sections, keys ``k<row>``, a ``--dup_fraction``
of rows repeating an earlier row's content in another file), then the pipeline's ``_find_in_sections`` runs on
them: its CPU time and the peak of memory it allocates (tracemalloc). Publication then counts the groups of all T
tasks (``count_duplicates``, every duplicate member: N x dup_fraction x 2 of them), timed and measured the same
way. One line per N: ``dups-scale: records=N files=F tasks=T task_rows=R task_cpu_s=.. task_mb=..
publish_members=M publish_cpu_s=.. publish_mb=..``; a build's finding work is T tasks like task 0.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
import tracemalloc

import numpy as np

from beam_tfrecord.beam.duplicates import _find_in_sections
from beam_tfrecord.quality.content import DuplicatesMode
from beam_tfrecord.quality.digest_files import BUFFER_DIGESTS, SECTIONS, Digests, write_digest_file
from beam_tfrecord.quality.duplicate_counts import count_duplicates
from beam_tfrecord.quality.groups import DuplicateGroups

_SHIFT = np.uint64(64 - 10)


def _task_files(folder: str, files: int, tasks: int, dup_fraction: float,
                rng: np.random.Generator) -> tuple[list[str], int]:
    """Task 0's share of each digest file: rows whose content hashes fall in its sections; returns (paths, rows)."""
    per_file = max(1, BUFFER_DIGESTS * (SECTIONS // tasks) // SECTIONS)
    sections = SECTIONS // tasks
    paths, previous, row = [], None, 0
    for number in range(files):
        hi = (rng.integers(0, sections, per_file, dtype=np.uint64) << _SHIFT) | rng.integers(
            0, 1 << 54, per_file, dtype=np.uint64)
        lo = rng.integers(0, 2**63, per_file, dtype=np.uint64)
        if previous is not None:  # a fraction of rows repeat the previous file's content: groups across files
            copies = rng.random(per_file) < dup_fraction
            hi[copies], lo[copies] = previous[0][copies], previous[1][copies]
        keys = tuple(f"k{row + i:012d}" for i in range(per_file))
        path = os.path.join(folder, f"{number:06d}.dig")
        write_digest_file(path, Digests(hi, lo, rng.integers(0, 2**63, per_file, dtype=np.uint64), keys))
        paths.append(path)
        previous, row = (hi, lo), row + per_file
    return paths, row


def _measured(call, *args):
    """(result, CPU seconds, peak MiB allocated): CPU, not wall, as this machine is shared; the CPU is
    measured first without tracemalloc (which slows allocation), then the peak on a second run."""
    start = time.process_time()
    result = call(*args)
    seconds = time.process_time() - start
    tracemalloc.start()
    call(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, seconds, peak / 2**20


def _find(paths: list[str], tasks: int) -> list[DuplicateGroups]:
    return list(_find_in_sections((0, [(0, SECTIONS // tasks, tuple(paths))])))


def _count(groups: DuplicateGroups, starts: np.ndarray):
    return count_duplicates(groups, ["train", "validation", "test"],
                            lambda h: np.searchsorted(starts, h, side="right") - 1, mode=DuplicatesMode.REPORT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="1000000,10000000,100000000,1000000000")
    parser.add_argument("--dup_fraction", type=float, default=0.01, help="records that repeat another's content")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for records in (int(r) for r in args.records.split(",")):
        files = max(1, math.ceil(records / BUFFER_DIGESTS))
        tasks = min(files, SECTIONS)
        with tempfile.TemporaryDirectory(prefix="dups-scale-") as folder:
            paths, rows = _task_files(folder, files, tasks, args.dup_fraction, rng)
            found, task_s, task_mb = _measured(_find, paths, tasks)
        members = int(records * args.dup_fraction * 2)  # each duplicate and the record it repeats
        sizes = np.full(members // 2, 2, np.int64)
        groups = DuplicateGroups(sizes, rng.integers(0, 2**63, members, dtype=np.uint64),
                                 tuple(f"k{i:012d}" for i in range(members)))
        starts = np.array([0, int(0.8 * 2**64), int(0.9 * 2**64)], np.uint64)
        _, publish_s, publish_mb = _measured(_count, groups, starts)
        found_groups = sum(g.num_groups for g in found)
        print(f"dups-scale: records={records} files={files} tasks={tasks} task_rows={rows} groups_in_task="
              f"{found_groups} task_cpu_s={task_s:.2f} task_mb={task_mb:.0f} publish_members={members} "
              f"publish_cpu_s={publish_s:.2f} publish_mb={publish_mb:.0f}", flush=True)


if __name__ == "__main__":
    main()

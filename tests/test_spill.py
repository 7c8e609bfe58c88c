"""RunSpiller.add_many spills the same runs as add, entry by entry."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.core.runs import make_record_entry
from beam_tfrecord.spill.run_files import RunSpiller

entries = st.builds(make_record_entry, st.integers(0, 2**64 - 1), st.binary(max_size=30))


def spill(tmp: Path, chunks: list[list[bytes]], *, run_bytes: int, many: bool) -> list[bytes]:
    """The bytes of every run written, in the order they were started."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as writer:
        spiller = RunSpiller(str(tmp), run_bytes=run_bytes, direct=False, writer=writer)
        started = []
        for chunk in chunks:
            if many:
                started += spiller.add_many(chunk)
            else:
                started += [run for run in map(spiller.add, chunk) if run is not None]
        spiller.finish()
    return [Path(run.path).read_bytes() for run in started]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(entries, max_size=12), max_size=6), st.integers(1, 120))
def test_add_many_spills_the_runs_of_add(tmp_path_factory, chunks, run_bytes):
    one_by_one = spill(tmp_path_factory.mktemp("add"), chunks, run_bytes=run_bytes, many=False)
    assert spill(tmp_path_factory.mktemp("many"), chunks, run_bytes=run_bytes, many=True) == one_by_one

"""A spill run the page cache holds is written through it, under a name saying so, and read back
through it; the others bypass it. Either way a shard's merge reads the same entries."""

from __future__ import annotations

import concurrent.futures
import os
import random
from pathlib import Path

import pytest

from beam_tfrecord.core.runs import SpilledRun, make_record_entry
from beam_tfrecord.spill.run_files import RunSpiller, run_page_cache_share, shard_entries, through_page_cache
from beam_tfrecord.storage import direct_io
from tests.storage.test_direct_io import needs_o_direct, resident_fraction

RUN_BYTES = 1 << 20


def _entries(count: int) -> list[bytes]:
    rng = random.Random(5)
    return [make_record_entry(rng.getrandbits(64), rng.randbytes(rng.randrange(1, 30_000))) for _ in range(count)]


def _spill(tmp_path: Path, entries: list[bytes], *, direct: bool, holds: bool) -> tuple[list[SpilledRun], list[int]]:
    """The runs spilled, and the sizes the page cache rule was asked about."""
    asked: list[int] = []

    def page_cache_holds(num_bytes: int) -> bool:
        asked.append(num_bytes)
        return holds

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as writer:
        spiller = RunSpiller(str(tmp_path), run_bytes=RUN_BYTES, direct=direct, writer=writer,
                             page_cache_holds=page_cache_holds)
        runs = spiller.add_many(entries)
        spiller.finish()
    return runs, asked


@needs_o_direct
@pytest.mark.parametrize("holds", [True, False], ids=["page-cache-holds", "page-cache-full"])
def test_a_run_goes_through_the_page_cache_while_it_holds_runs_and_reads_back_the_same(tmp_path, holds):
    entries = _entries(300)  # ~4.5 MB: several runs
    runs, asked = _spill(tmp_path, entries, direct=True, holds=holds)
    assert len(runs) > 2 and asked == [RUN_BYTES] * len(runs)  # asked once, as each run starts
    for run in runs:
        assert run.path.endswith(".run") and through_page_cache(run) is holds
        if holds:
            assert resident_fraction(run.path) == 1.0
        else:
            pages = -(-os.path.getsize(run.path) // os.sysconf("SC_PAGE_SIZE"))
            assert round(resident_fraction(run.path) * pages) <= 1  # O_DIRECT: at most the tail, written buffered
    with shard_entries(runs, 0, 2**64, direct=True) as merged:
        assert [bytes(entry) for entry in merged] == sorted(entries)  # an entry starts with its big-endian hash


def test_without_o_direct_every_run_is_buffered_under_the_plain_name(tmp_path):
    entries = _entries(100)
    runs, asked = _spill(tmp_path, entries, direct=False, holds=True)
    assert asked == [] and runs and not any(map(through_page_cache, runs))
    with shard_entries(runs, 0, 2**64, direct=False) as merged:
        assert [bytes(entry) for entry in merged] == sorted(entries)


@pytest.mark.parametrize("num_bytes, dirty, throttle, takes", [
    (1350, 0, 1.5, True),  # exactly 9/10 of where writers are slowed (1.5 times the level: the default ratios)
    (1351, 0, 1.5, False),
    (350, 1000, 1.5, True),  # what others left dirty counts too
    (351, 1000, 1.5, False),
    (900, 0, 1.0, True),  # writers slowed at the level itself: 9/10 of it
    (901, 0, 1.0, False),
], ids=["nine-tenths-of-the-throttle", "over", "with-others", "others-push-over", "throttle-at-the-level",
        "over-it"])
def test_runs_may_fill_nine_tenths_of_the_page_cache_below_the_throttle(num_bytes, dirty, throttle, takes):
    assert direct_io.fits_before_writeback(num_bytes, dirty, 1000, share=run_page_cache_share(throttle)) is takes

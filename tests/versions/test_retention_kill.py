"""SIGKILL during retention of versions that share shards: after every kill, LATEST's version (the one kept) is whole
(every file it lists, its own and the ones retired versions hold, there with its CRC32C and size) and every version
that looks complete is whole (a retired one never does); a re-run finishes the job (exactly the files a run never
killed leaves). The kills come after each storage write or delete (tests/versions/retention_kill_server.py)."""

from __future__ import annotations

import datetime
import itertools
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from retention_fixtures import (  # noqa: F401  (local_chain, parts: pytest fixtures)
    IDS,
    Parts,
    assert_whole,
    build_chain,
    expected_after,
    listing,
    local_chain,
    parts,
    root_files,
)

from beam_tfrecord.dataset import read_latest
from beam_tfrecord.versions.refresh import VersionListing, apply_retention, list_versions

SERVER = Path(__file__).with_name("retention_kill_server.py")
KEEP = 1  # v3 kept; v1 and v2 retired, each holding files v3 lists
KillAfter = Callable[[str, int], str]  # (root, storage calls) -> "killed" | "finished" | "failed"


@pytest.fixture()
def kill_after() -> Iterator[KillAfter]:
    """Runs retention in a fork of one server process, killed after a number of storage calls. The server starts at
    the first call: it takes the stores' endpoints from this process's environment, which their fixtures set."""
    servers: list[subprocess.Popen] = []

    def run(root: str, calls: int) -> str:
        if not servers:
            servers.append(subprocess.Popen([sys.executable, str(SERVER), str(KEEP)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True))
        stdin, stdout = servers[0].stdin, servers[0].stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{root} {calls}\n")
        stdin.flush()
        return stdout.readline().strip()

    yield run
    for server in servers:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)


def assert_safe(root: str, context: str, *, read: bool) -> None:
    """LATEST is the kept version and whole; whatever looks complete is whole (files read for their CRC32C when
    ``read``, else their sizes checked from one listing)."""
    assert read_latest(root) == IDS[2], context
    listed = None if read else listing(root)
    for version_id in {IDS[2], *list_versions(root).complete}:
        assert_whole(root, IDS.index(version_id), listed=listed)


def test_killed_after_each_storage_call_then_rerun(parts: Parts, local_chain: Path, tmp_path: Path,
                                                   kill_after: KillAfter) -> None:
    """From the same root each time, killed after the 1st, 2nd, ... call, until a run ends before its kill."""
    expected = expected_after(parts, "v1+v2")
    outcomes: list[str] = []
    for calls in itertools.count(1):
        root = str(shutil.copytree(local_chain, tmp_path / f"root-{calls}"))
        outcomes.append(kill_after(root, calls))
        assert outcomes[-1] in ("killed", "finished"), outcomes
        assert_safe(root, f"killed after call {calls}", read=True)
        apply_retention(root, KEEP, min_version_age=datetime.timedelta(0))  # the re-run
        assert root_files(root) == expected, f"re-run after a kill after call {calls}"
        if outcomes[-1] == "finished":
            break
    assert outcomes.count("killed") >= 10, outcomes  # 2 manifests, 2 markers (a write and a rename), 10 deletes


# s3:// and Azure pass too (11 and 14 s here: a fork's client set-up); their retention runs in test_retention_shared.py.
@pytest.mark.parametrize("store", ["local", "gs"])
def test_killed_again_and_again_until_done(parts: Parts, store: str, tmp_path: Path, request: pytest.FixtureRequest,
                                           kill_after: KillAfter) -> None:
    """One root, every run killed after its first storage call (on an object store its third: a fork's first call
    there costs ~0.5 s of client set-up): each run goes on from what the last left."""
    root = str(tmp_path / "root") if store == "local" else f"{request.getfixturevalue('gcs_bucket')}/data/root"
    build_chain(parts, root)
    outcomes: list[str] = []
    calls = 1 if store == "local" else 3
    while not outcomes or outcomes[-1] == "killed":
        outcomes.append(kill_after(root, calls))
        assert outcomes[-1] in ("killed", "finished") and len(outcomes) < 50, outcomes
        assert_safe(root, f"after {len(outcomes)} runs", read=False)
    assert outcomes.count("killed") >= 14 // calls, outcomes
    assert root_files(root) == expected_after(parts, "v1+v2")
    assert_safe(root, "at the end", read=True)
    assert list_versions(root) == VersionListing(complete=(IDS[2],), incomplete=(), retired=(IDS[0], IDS[1]))

"""Retention of versions that share shards (tests/versions/retention_fixtures.py builds the chain v1 <- v2 <- v3): a
retired version loses its manifest and every file no kept version lists; what kept versions list stays, in a retired
directory, until none lists it. Local paths, gs:// (fake-gcs-server), s3:// (moto) and Azure (Azurite)."""

from __future__ import annotations

import datetime
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest
from fixtures_stores import az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)
from retention_fixtures import (  # noqa: F401  (local_chain, parts: pytest fixtures)
    CHAIN,
    DAY,
    FOURTH,
    IDS,
    METADATA,
    T0,
    Parts,
    assert_whole,
    build_chain,
    expected_after,
    expected_values,
    files_of,
    local_chain,
    part_values,
    parts,
    read_version,
    root_files,
    whole,
    write_parts,
    write_version,
)

from beam_tfrecord import storage
from beam_tfrecord.core.manifest import MANIFEST_FILENAME
from beam_tfrecord.dataset import version_dir
from beam_tfrecord.versions.refresh import (
    RETIRED_FILENAME,
    VersionListing,
    apply_retention,
    commit_version,
    list_versions,
)

HOURS_24 = datetime.timedelta(hours=24)
NOW = T0 + 2 * DAY + datetime.timedelta(hours=1)  # v1 stopped being LATEST 25 h before, v2 1 h before
BUCKETS = {"gs": "gcs_bucket", "s3": "s3_bucket", "az": "az_container"}


@pytest.fixture()
def chain(local_chain: Path, tmp_path: Path) -> str:
    return str(shutil.copytree(local_chain, tmp_path / "root"))


def assert_kept(parts: Parts, root: str, kept: Iterable[int]) -> None:
    """The kept versions are whole and read as written; the others are not complete."""
    values = part_values(parts)
    kept = list(kept)
    for number in kept:
        assert_whole(root, number)
        assert read_version(root, number) == expected_values(values, CHAIN[number])
    assert list_versions(root).complete == tuple(IDS[n] for n in kept)


@pytest.mark.parametrize(("keep", "min_age", "retires"), [
    (3, datetime.timedelta(0), "none"), (2, datetime.timedelta(0), "v1"), (1, datetime.timedelta(0), "v1+v2"),
    (3, HOURS_24, "none"), (2, HOURS_24, "v1"), (1, HOURS_24, "v1"),  # v2: LATEST until 1 h ago, kept 24 h
], ids=lambda value: str(value))
def test_retention_keeps_what_kept_versions_list(parts: Parts, chain: str, keep: int,
                                                 min_age: datetime.timedelta, retires: str) -> None:
    gone = {"none": [], "v1": [IDS[0]], "v1+v2": [IDS[0], IDS[1]]}[retires]
    assert apply_retention(chain, keep, min_version_age=min_age, now=NOW) == gone
    assert root_files(chain) == expected_after(parts, retires)
    assert list_versions(chain) == VersionListing(complete=tuple(v for v in IDS[:3] if v not in gone), incomplete=(),
                                                  retired=tuple(gone))
    assert_kept(parts, chain, [n for n in range(3) if IDS[n] not in gone])
    assert apply_retention(chain, keep, min_version_age=min_age, now=NOW) == []  # nothing more to do
    assert root_files(chain) == expected_after(parts, retires)


@pytest.mark.parametrize("store", ["local", "gs", "s3", "az"])
def test_retired_directories_go_once_nothing_lists_them(parts: Parts, store: str, tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    root = str(tmp_path / "root") if store == "local" else f"{request.getfixturevalue(BUCKETS[store])}/data/root"
    build_chain(parts, root)
    assert apply_retention(root, 2, min_version_age=datetime.timedelta(0)) == [IDS[0]]
    assert root_files(root) == expected_after(parts, "v1")
    assert apply_retention(root, 1, min_version_age=datetime.timedelta(0)) == [IDS[1]]
    assert root_files(root) == expected_after(parts, "v1+v2")
    assert_kept(parts, root, [2])
    write_version(parts, root, 3, FOURTH)  # v4 lists nothing of the others: every retired directory goes whole
    commit_version(root, IDS[3])
    assert apply_retention(root, 1, min_version_age=datetime.timedelta(0)) == [IDS[2]]
    assert root_files(root) == {f"3/{name}" for ref in FOURTH for name in files_of(parts, ref)} | {
        f"3/{name}" for name in METADATA}
    assert list_versions(root) == VersionListing(complete=(IDS[3],), incomplete=(), retired=())


def test_an_unfinished_version_older_than_latest_keeps_what_others_list(parts: Parts, chain: str) -> None:
    """v1 without its manifest (a retention killed after deleting it, before retired.json): it looks unfinished,
    and the run that deletes abandoned versions keeps the files v2 and v3 list."""
    storage.delete_if_exists([storage.join(version_dir(chain, IDS[0]), MANIFEST_FILENAME)])
    assert list_versions(chain).incomplete == (IDS[0],)
    assert apply_retention(chain, 3, min_version_age=datetime.timedelta(0)) == [IDS[0]]
    assert root_files(chain) == expected_after(parts, "v1")
    assert list_versions(chain).retired == (IDS[0],)
    assert_kept(parts, chain, [1, 2])


def test_a_kept_manifest_that_cannot_be_read_keeps_every_file(parts: Parts, chain: str) -> None:
    """What a kept version lists is unknown: v1 is retired (its manifest goes) but no other file of it is deleted,
    until a run can read every kept manifest."""
    manifest = storage.join(version_dir(chain, IDS[1]), MANIFEST_FILENAME)
    good = storage.read_bytes(manifest)
    storage.write_bytes_atomic(manifest, good[: len(good) // 2])  # torn by hand: not JSON
    assert apply_retention(chain, 2, min_version_age=datetime.timedelta(0)) == [IDS[0]]
    assert root_files(chain) == (whole(parts, 0, CHAIN[0]) - {f"0/{MANIFEST_FILENAME}"}) | {f"0/{RETIRED_FILENAME}"} \
        | whole(parts, 1, CHAIN[1]) | whole(parts, 2, CHAIN[2])
    storage.write_bytes_atomic(manifest, good)
    assert apply_retention(chain, 2, min_version_age=datetime.timedelta(0)) == []
    assert root_files(chain) == expected_after(parts, "v1")

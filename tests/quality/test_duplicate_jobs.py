"""Exact duplicates and group-keeping splits through a job (issue 48), on the DirectRunner in memory, its
worker processes (through the shuffle fan-in) and Dask: the same bytes everywhere; exact counts; no group in two
splits; ``--duplicates=fail`` publishes nothing."""

from __future__ import annotations

import csv
import os
import pathlib

import pytest

from beam_tfrecord import load_manifest
from beam_tfrecord.core.framing import iter_records
from beam_tfrecord.core.proto import Example
from pipelines import build_from_manifest
from pipelines.common import run_as_command
from tests.dask.dask_fixtures import DASK_RUNNER

USERS, ROWS_PER_USER = 40, 6
COMMON = ["--splits=train=0.6,validation=0.2,test=0.2", "--key_column=row_id", "--target_shard_bytes=3000",
          "--duplicates_exclude=user", "--split_by=user", "--progress=none"]


@pytest.fixture(scope="module")
def rows_csv(tmp_path_factory) -> tuple[str, list[dict[str, str]]]:
    """240 distinct rows of 40 users, then copies of their content (payload and label) under new row ids:
    every 8th row's under the next user (a copy in another split, often), every 24th's under its own user."""
    rows = [{"row_id": f"r{i:03d}", "user": f"u{i // ROWS_PER_USER:02d}", "payload": f"p{i * 7919 % 10007:05d}" * 9,
             "label": str(i % 5)} for i in range(USERS * ROWS_PER_USER)]
    copies = [{**rows[i], "row_id": f"c{i:03d}", "user": f"u{(i // ROWS_PER_USER + 1) % USERS:02d}"}
              for i in range(0, len(rows), 8)]
    copies += [{**rows[i], "row_id": f"d{i:03d}"} for i in range(0, len(rows), 24)]
    path = tmp_path_factory.mktemp("dups") / "rows.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows + copies)
    return str(path), rows + copies


def read_back(out: str) -> dict[str, list[tuple[str, str]]]:
    """Each split's records as (user, payload)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for split in load_manifest(out).splits:
        for shard in split.shards:
            with open(os.path.join(out, shard.filename), "rb") as handle:
                for data in iter_records(handle, name=shard.filename):
                    feature = Example.FromString(data).features.feature
                    found.setdefault(split.name, []).append((feature["user"].bytes_list.value[0].decode(),
                                                             feature["payload"].bytes_list.value[0].decode()))
    return found


def expected_counts(rows: list[dict[str, str]], split_of_user: dict[str, str]) -> dict:
    """The counts worked out from the inputs and each user's split, without the writer's hashing."""
    names = ["train", "validation", "test"]
    groups: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        groups.setdefault((row["payload"], row["label"]), []).append(split_of_user[row["user"]])
    repeated = [splits for splits in groups.values() if len(splits) > 1]
    within = {n: sum(s.count(n) - 1 for s in repeated if s.count(n) > 1) for n in names}
    across = {f"{a}/{b}": sum(s.count(b) for s in repeated if a in s and b in s)
              for i, a in enumerate(names) for b in names[i + 1:]}
    return {"records": sum(map(len, repeated)), "groups": len(repeated), "dropped": sum(map(len, repeated)) -
            len(repeated), "within_splits": {k: v for k, v in within.items() if v},
            "across_splits": {k: v for k, v in across.items() if v}}


def shard_bytes(out: str) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(pathlib.Path(out).glob("data-*"))}


def build(csv_path: str, out: str, *extra: str) -> None:
    build_from_manifest.run([f"--manifest={csv_path}", f"--output={out}", *COMMON, *extra])


def test_drop_is_exact_and_byte_identical_on_every_runner_and_fail_publishes_nothing(
        rows_csv, tmp_path, dask_address, capsys):
    csv_path, rows = rows_csv
    memory, processes, dask = (str(tmp_path / name) for name in ("memory", "processes", "dask"))
    build(csv_path, memory, "--duplicates=drop", "--direct_num_workers=1")
    summary = capsys.readouterr().out
    build(csv_path, processes, "--duplicates=drop", "--direct_running_mode=multi_processing",
          "--direct_num_workers=2", "--fan_in=shuffle")
    build(csv_path, dask, "--duplicates=drop", f"--runner={DASK_RUNNER}", f"--dask_client_address={dask_address}")
    assert shard_bytes(memory) == shard_bytes(processes) == shard_bytes(dask) != {}

    by_split = read_back(memory)
    users = {split: {user for user, _ in records} for split, records in by_split.items()}
    assert sum(map(len, users.values())) == USERS  # --split_by: no user in two splits
    split_of_user = {user: split for split, names in users.items() for user in names}
    expected = expected_counts(rows, split_of_user)
    manifest = load_manifest(memory)
    found = manifest.metadata["duplicates"]
    assert {key: found[key] for key in expected} == expected
    assert expected["groups"] == 30 and expected["across_splits"]  # planted: 30 groups, some across splits
    assert (found["mode"], found["excluded_features"], found["split_by"]) == ("drop", ["user"], "user")
    assert (manifest.num_inputs, manifest.num_dropped) == (len(rows), expected["dropped"])
    payloads = [payload for records in by_split.values() for _, payload in records]
    assert len(payloads) == len(set(payloads)) == USERS * ROWS_PER_USER  # one record of each content kept
    across = ", ".join(f"{pair} {n}" for pair, n in sorted(expected["across_splits"].items(),
                                                           key=lambda item: (-item[1], item[0])))
    assert (f"duplicates: {expected['records']} records in 30 groups; across splits: {across}; "
            f"dropped {expected['dropped']} (one record of each group kept)") in summary
    assert "splits decided by 'user'" in summary

    before = {path.name: path.read_bytes() for path in sorted(pathlib.Path(memory).iterdir())}
    assert run_as_command(build_from_manifest.run, [f"--manifest={csv_path}", f"--output={memory}", *COMMON,
                                                    "--duplicates=fail", "--direct_num_workers=1"],
                          prog="build_from_manifest") == 1
    assert f"DuplicatesFoundError: duplicates: {expected['records']} records in 30 groups" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in sorted(pathlib.Path(memory).iterdir())} == before

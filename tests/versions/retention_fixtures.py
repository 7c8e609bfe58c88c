"""A versioned root whose versions share shards, built by hand (as the append refresh will), for retention tests.

Two tiny datasets are written once by the library's writer (one pipeline; DALI indexes; every record an int64
``n``): ``A`` (4 shards) and another of 6 shards whose shards 0-1 play ``B0``-``B1`` and 2-3 ``C0``-``C1`` (its
count differs from A's, so no two files of the chain share a name). The chain, on any store:

- v1: A in full.
- v2: A0 left out (all its records removed), A1 with record 0 deleted, A2, A3 (all ``stored_in`` v1); B0, B1 its own.
- v3: A2, A3 (``stored_in`` v1; A1 left out); B0 (``stored_in`` v2, record 0 deleted; B1 left out); C0, C1 its own.

Version ``i`` stops being LATEST at ``T0 + i days`` (``superseded.json``, written by ``commit_version``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import apache_beam as beam
import pytest

from beam_tfrecord import DatasetDescription, DType, Scalar, Schema, ShardingConfig, WriteTFRecordDataset, storage
from beam_tfrecord.core.deletions import DeletionVector
from beam_tfrecord.core.manifest import MANIFEST_FILENAME, Manifest, ShardInfo, SplitInfo
from beam_tfrecord.core.samples import Sample
from beam_tfrecord.dataset import VERSIONS_DIRNAME, load_manifest, shard_file_path, version_dir
from beam_tfrecord.reader.numpy_reader import read_numpy
from beam_tfrecord.versions.refresh import RETIRED_FILENAME, commit_version

SCHEMA = Schema({"n": Scalar(DType.INT64)})
WRITTEN = {"A": (range(0, 20), 4), "BC": (range(100, 130), 6)}  # dataset -> (values of its records, shards)
WHERE = {"A": ("A", 0), "B": ("BC", 0), "C": ("BC", 2)}  # part -> (dataset, index of its first shard)
IDS = ("20260101T000000.000Z-aaaaaa", "20260102T000000.000Z-bbbbbb", "20260103T000000.000Z-cccccc",
       "20260104T000000.000Z-dddddd")
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
DAY = datetime.timedelta(days=1)
Parts = Mapping[str, str]  # written dataset -> its directory


def write_parts(directory: str) -> dict[str, str]:
    """Writes the datasets under ``directory`` (local), in one pipeline."""
    out = {name: os.path.join(directory, name) for name in WRITTEN}
    with beam.Pipeline() as pipeline:
        for name, (values, num_shards) in WRITTEN.items():
            description = DatasetDescription(schema=SCHEMA, dali_index=True, statistics=False,
                                             sharding=ShardingConfig(num_shards=num_shards))
            _ = (pipeline | f"Create{name}" >> beam.Create([Sample(f"k{n}", {"n": n}) for n in values])
                 | f"Write{name}" >> WriteTFRecordDataset(out[name], description=description))
    return out


@dataclasses.dataclass(frozen=True)
class Ref:
    """One shard a version lists: shard ``index`` of ``part``, stored in version ``stored_in`` (an index into
    IDS; None: the version's own), with ``deleted`` record positions."""

    part: str
    index: int
    stored_in: int | None = None
    deleted: tuple[int, ...] = ()


CHAIN: tuple[tuple[Ref, ...], ...] = (
    tuple(Ref("A", i) for i in range(4)),
    (Ref("A", 1, 0, (0,)), Ref("A", 2, 0), Ref("A", 3, 0), Ref("B", 0), Ref("B", 1)),
    (Ref("A", 2, 0), Ref("A", 3, 0), Ref("B", 0, 1, (0,)), Ref("C", 0), Ref("C", 1)),
)
METADATA = ("dataset_info.json", "features.json", MANIFEST_FILENAME)  # a complete version's files but shards
SHARED_METADATA = (MANIFEST_FILENAME,)  # the same of a version that shares shards: TFDS cannot read it (no TFDS files)
FOURTH = CHAIN[0]  # a v4 as a compaction writes it: its own copy of A, nothing of the others listed


def shard_of(parts: Parts, ref: Ref) -> ShardInfo:
    written, first = WHERE[ref.part]
    return load_manifest(parts[written]).shards[first + ref.index]


def files_of(parts: Parts, ref: Ref) -> set[str]:
    """The files of a listed shard (the shard and its DALI index)."""
    shard = shard_of(parts, ref)
    return {shard.filename, str(shard.dali_index)}


def write_version(parts: Parts, root: str, number: int, refs: Sequence[Ref]) -> Manifest:
    """Writes version IDS[number]: its own shards copied in from the parts, then its manifest (the last file)."""
    directory = version_dir(root, IDS[number])
    shards = []
    for position, ref in enumerate(refs):
        shard = shard_of(parts, ref)
        if ref.stored_in is None:
            for name in files_of(parts, ref):
                storage.copy_file(os.path.join(parts[WHERE[ref.part][0]], name), storage.join(directory, name))
        shards.append(dataclasses.replace(
            shard, index=position, stored_in=None if ref.stored_in is None else IDS[ref.stored_in],
            deletions=DeletionVector.of(ref.deleted) if ref.deleted else None))
    base = load_manifest(parts["A"])
    split = SplitInfo("train", tuple(shards))
    manifest = dataclasses.replace(base, splits=(split,), num_inputs=split.num_records, num_rejected=0,
                                   dead_letters=None, statistics=None)
    storage.write_bytes_atomic(storage.join(directory, MANIFEST_FILENAME), manifest.dumps().encode())
    return manifest


def build_chain(parts: Parts, root: str, versions: Sequence[Sequence[Ref]] = CHAIN) -> None:
    """Writes the versions in order, each made LATEST a day after the one before (at ``T0 + i days``)."""
    for number, refs in enumerate(versions):
        write_version(parts, root, number, refs)
        commit_version(root, IDS[number], now=T0 + number * DAY)


def part_values(parts: Parts) -> dict[tuple[str, int], list[int]]:
    """(part, shard index) -> the ``n`` of the shard's records in file order."""
    found = {}
    for part, (written, first) in WHERE.items():
        values = [int(example["n"]) for example in read_numpy(parts[written])]  # shard by shard, in file order
        starts = [0]
        for shard in load_manifest(parts[written]).shards:
            starts.append(starts[-1] + shard.num_records)
        for index in range(4 if part == "A" else 2):
            found[part, index] = values[starts[first + index]:starts[first + index + 1]]
    return found


def expected_values(values: Mapping[tuple[str, int], list[int]], refs: Sequence[Ref]) -> list[int]:
    """The sorted ``n`` of the records a version lists: its shards' records but the deleted ones."""
    return sorted(n for ref in refs for position, n in enumerate(values[ref.part, ref.index])
                  if position not in ref.deleted)


def read_version(root: str, number: int) -> list[int]:
    """The sorted ``n`` of every record version IDS[number] holds, as the NumPy reader returns them."""
    return sorted(int(example["n"]) for example in read_numpy(version_dir(root, IDS[number])))


def root_files(root: str) -> set[str]:
    """Every file under ``ROOT/versions/`` as ``<version index>/<name>`` (``0/...`` for IDS[0]...)."""
    prefix = storage.join(root, VERSIONS_DIRNAME).rstrip("/") + "/"
    found = set()
    for path, _ in storage.list_files(prefix + "**"):
        version_id, _, name = path[len(prefix):].partition("/")
        found.add(f"{IDS.index(version_id)}/{name}")
    return found


def assert_whole(root: str, number: int, *, listed: Mapping[str, int] | None = None) -> None:
    """Every file version IDS[number] lists exists with the size and CRC32C its manifest names (with ``listed``,
    the paths and sizes of one listing of the root: the size is checked, from it, no file read)."""
    directory = version_dir(root, IDS[number])
    for shard in load_manifest(directory).shards:
        path, index = shard_file_path(directory, shard), shard_file_path(directory, shard, str(shard.dali_index))
        if listed is not None:
            assert listed.get(path) == shard.num_bytes and index in listed, (path, index)
            continue
        assert storage.crc32c_and_size(path) == (shard.crc32c, shard.num_bytes), shard
        assert storage.exists(index), shard


def listing(root: str) -> dict[str, int]:
    """Every file under ``ROOT/versions/``: path -> size (one listing)."""
    return dict(storage.list_files(storage.join(root, VERSIONS_DIRNAME).rstrip("/") + "/**"))


def whole(parts: Parts, number: int, refs: Iterable[Ref]) -> set[str]:
    """The files of version ``number`` as it was written: its own shards, metadata and (not LATEST) superseded.json."""
    refs = tuple(refs)
    own = {name for ref in refs if ref.stored_in is None for name in files_of(parts, ref)}
    superseded = {"superseded.json"} if number < 2 else set()
    self_contained = all(ref.stored_in is None and not ref.deleted for ref in refs)
    return {f"{number}/{name}" for name in (*own, *(METADATA if self_contained else SHARED_METADATA), *superseded)}


def retired(parts: Parts, number: int, refs: Iterable[Ref]) -> set[str]:
    """The files left of version ``number`` once retired while ``refs`` (its shards) are listed by kept versions."""
    return {f"{number}/{name}" for ref in refs for name in files_of(parts, ref)} | {f"{number}/{RETIRED_FILENAME}"}


def expected_after(parts: Parts, case: str) -> set[str]:
    """What the root holds after retention: "none" retired, "v1" retired (v2 and v3 kept), "v1+v2" (v3 kept)."""
    v1 = {"none": whole(parts, 0, CHAIN[0]), "v1": retired(parts, 0, CHAIN[1][:3]),
          "v1+v2": retired(parts, 0, CHAIN[2][:2])}[case]
    v2 = retired(parts, 1, CHAIN[2][2:3]) if case == "v1+v2" else whole(parts, 1, CHAIN[1])
    return v1 | v2 | whole(parts, 2, CHAIN[2])


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Parts:
    return write_parts(str(tmp_path_factory.mktemp("retention-parts")))


@pytest.fixture(scope="module")
def local_chain(parts: Parts, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chain on local disk, built once: tests copy it."""
    root = tmp_path_factory.mktemp("retention-chain") / "root"
    build_chain(parts, str(root))
    return root

"""A disk that fills during a build: a typed one-line error, nothing published, no temporary file
left taking the space, and a re-run after freeing space succeeds.

The output goes to a small tmpfs mounted in a private mount namespace (``unshare --mount``): the
build runs there as the ``beam-tfrecord`` command, with a filler file leaving a few MiB free, so
the spill runs (little room) or the shards (a bit more room) do not fit. The filler is then
removed and the same command runs again. What happened is written to files outside the tmpfs,
which vanishes with the namespace. Skipped where mounting is not allowed (not root, no
``unshare``, a container without CAP_SYS_ADMIN). The module's commands share one namespace, and
each runs in a fork of one server there that imported Beam once (tests/docs/command_zygote.py):
its own process, exit code and stderr, without ~3 s of imports each.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from beam_tfrecord.verify import verify_dataset
from tests.docs import command_zygote

DISK_MIB = 20
ARRAY_BYTES = 4 << 20  # 1,024 float32 rows of 1,024: the spill runs and the shards are ~4.1 MB each
SHARD_BYTES = 1_000_000  # 5 shards


def _mount_refusal(where: Path) -> str | None:
    """Why a tmpfs cannot be mounted in a private namespace here, or None when it can."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "no unshare or mount command"
    where.mkdir()
    mount = f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(where))}"
    done = subprocess.run(["unshare", "--mount", "sh", "-c", mount], capture_output=True, text=True)
    return None if done.returncode == 0 else f"cannot mount a tmpfs in a private mount namespace: {done.stderr.strip()}"


# What the commands import, once for the module (beam_tfrecord.cli and the refresh job load the rest lazily).
PRELOAD = ("apache_beam", "apache_beam.runners.direct.direct_runner", "apache_beam.runners.portability.fn_api_runner",
           "numpy", "PIL.Image", "beam_tfrecord", "beam_tfrecord.cli", "pipelines.refresh_image_dataset")
InNamespace = Callable[[str], "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="module")
def in_namespace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InNamespace]:
    """Runs a shell script in the module's private mount namespace, where ``python -m``/``-c`` and
    ``beam-tfrecord`` (shims first on PATH) run in forks of the command server. Skips where the mount is not
    allowed."""
    refusal = _mount_refusal(tmp_path_factory.mktemp("probe") / "probe")
    if refusal:
        pytest.skip(refusal)
    folder = Path(tempfile.mkdtemp(prefix="bt-disk-"))  # short: a socket path has at most 107 characters
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": os.pathsep.join([str(folder), os.environ["PATH"]]),
           "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    command_zygote.write_shims(folder, str(folder / "socket"), sys.executable)
    with open(folder / "server.log", "wb") as log:
        server = subprocess.Popen(["unshare", "--mount", sys.executable, command_zygote.__file__,
                                   str(folder / "socket"), *PRELOAD], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n", (folder / "server.log").read_text()
        yield lambda script: subprocess.run(["nsenter", f"--target={server.pid}", "--mount", "sh", "-c", script],
                                            capture_output=True, text=True, timeout=300, env=env)
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # the server and any command still running
        server.wait()
        shutil.rmtree(folder)


def _script(disk: Path, out_dir: Path, command: list[str], filler_mib: int) -> str:
    """Mounts the tmpfs, fills it, builds, records; frees space, builds again, records, and copies what it
    published to ``out_dir/published`` (verified there by the test: no third interpreter in the namespace)."""
    q = shlex.quote
    build = " ".join(q(a) for a in command)
    record = (f"find {q(str(disk))} -type f | sort > {q(str(out_dir))}/files-$1; "
              f"stat -f -c '%b %f %S' {q(str(disk))} > {q(str(out_dir))}/statfs-$1")
    return f"""
set -u
record() {{ {record}; }}
mount -t tmpfs -o size={DISK_MIB}m tmpfs {q(str(disk))} || exit 90
head -c {filler_mib}m /dev/zero > {q(str(disk))}/filler
{build} > {q(str(out_dir))}/out-1 2> {q(str(out_dir))}/err-1; echo $? > {q(str(out_dir))}/rc-1
record 1
rm {q(str(disk))}/filler
{build} > {q(str(out_dir))}/out-2 2> {q(str(out_dir))}/err-2; echo $? > {q(str(out_dir))}/rc-2
record 2
cp -a {q(str(disk / "out"))} {q(str(out_dir / "published"))}
umount {q(str(disk))}
"""


@pytest.mark.parametrize("filler_mib, workers, full_at", [
    pytest.param(DISK_MIB - 2, 2, "/runs/", id="spill-runs-two-worker-processes", marks=pytest.mark.slow),
    pytest.param(DISK_MIB - 6, 1, "/shards/", id="shards-one-worker"),
])
def test_disk_full_fails_typed_publishes_nothing_cleans_up_and_rerun_succeeds(
        in_namespace: InNamespace, tmp_path: Path, filler_mib: int, workers: int, full_at: str) -> None:
    arrays = tmp_path / "x.npy"
    np.save(arrays, np.random.default_rng(0).random((ARRAY_BYTES // 4096, 1024), dtype=np.float32))
    disk, out_dir = tmp_path / "disk", tmp_path / "record"
    disk.mkdir()
    out_dir.mkdir()
    command = ["python", "-m", "beam_tfrecord.cli", "build-arrays", "--arrays", str(arrays),
               "--output", str(disk / "out"), f"--target_shard_bytes={SHARD_BYTES}", "--progress=none",
               f"--direct_num_workers={workers}",
               *(["--direct_running_mode=multi_processing"] if workers > 1 else [])]
    done = in_namespace(_script(disk, out_dir, command, filler_mib))
    assert done.returncode == 0, done.stderr
    read = {name: (out_dir / name).read_text() for name in os.listdir(out_dir) if name != "published"}

    # The failed build: exit 1, its last line names the error, the path and the bytes needed.
    assert read["rc-1"].strip() == "1", read["err-1"][-3000:]
    last_line = read["err-1"].strip().splitlines()[-1]
    assert last_line.startswith("beam-tfrecord build-arrays: DiskFullError: disk full writing "), last_line
    assert full_at in last_line and "bytes free there; nothing was published" in last_line, last_line
    needed = int(last_line.split("it needed ")[1].split(" bytes")[0])
    assert needed > 2 << 20 if full_at == "/runs/" else needed == pytest.approx(SHARD_BYTES, rel=0.2), last_line
    # Nothing published, and nothing but the filler takes space on the disk.
    assert read["files-1"].split() == [str(disk / "filler")], read["files-1"]
    blocks, free, block_size = map(int, read["statfs-1"].split())
    assert (blocks - free) * block_size == filler_mib << 20

    # With space freed, the same command publishes a dataset that verifies.
    assert read["rc-2"].strip() == "0", read["err-2"][-3000:]
    report = verify_dataset(str(out_dir / "published"))
    assert (report.num_shards, report.num_records) == (5, 1024), report
    files = read["files-2"].split()
    assert str(disk / "out" / "manifest.json") in files and not any(".tmp-" in f for f in files), files


def test_out_of_space_oserror_becomes_disk_full_error_and_survives_the_worker_relay() -> None:
    """``/dev/full`` answers every write with ENOSPC: the typed error names the path and the bytes,
    and a worker's relayed text of it is restored as the same class with the same message."""
    from beam_tfrecord.engine.local_engine import error_from_worker
    from beam_tfrecord.errors import DiskFullError
    from beam_tfrecord.storage.disk_space import raise_typed_when_full

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(DiskFullError, match="disk full writing '/dev/full': it needed 8192 bytes") as info:
        with raise_typed_when_full("/dev/full", 8192), open("/dev/full", "wb", buffering=0) as handle:
            handle.write(b"x" * 8192)
    assert (info.value.path, info.value.needed_bytes) == ("/dev/full", 8192)
    assert isinstance(info.value, OSError) and info.value.__cause__.errno == 28
    relayed = error_from_worker(RuntimeError(f"beam_tfrecord.errors.DiskFullError: {info.value} [while running 'X']"))
    assert type(relayed) is DiskFullError and str(relayed) == str(info.value)
    with pytest.raises(PermissionError):  # other errors pass unchanged
        with raise_typed_when_full("/x", 1):
            raise PermissionError(13, "denied")


def test_refresh_on_a_full_disk_leaves_no_unfinished_version_and_rerun_publishes(
        in_namespace: InNamespace, tmp_path: Path) -> None:
    """The refresh job's root on the small disk: the version it was building is deleted, LATEST is not
    written; with room, the same command publishes the version."""
    from PIL import Image

    rng = np.random.default_rng(0)
    images = tmp_path / "images"
    for label in ("noise", "static"):
        (images / label).mkdir(parents=True)
        for n in range(12):  # ~75 KB of noise as JPEG each: ~1.8 MB in all
            pixels = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(images / label / f"{n:04d}.jpg", quality=95)
    disk, out_dir = tmp_path / "disk", tmp_path / "record"
    disk.mkdir()
    out_dir.mkdir()
    command = ["python", "-m", "pipelines.refresh_image_dataset", "--input", str(images),
               "--dataset_root", str(disk / "out"), "--target_shard_bytes=1000000", "--progress=none",
               "--direct_num_workers=1"]
    done = in_namespace(_script(disk, out_dir, command, DISK_MIB - 1))
    assert done.returncode == 0, done.stderr
    read = {name: (out_dir / name).read_text() for name in os.listdir(out_dir) if name != "published"}

    assert read["rc-1"].strip() == "1", read["err-1"][-3000:]
    last_line = read["err-1"].strip().splitlines()[-1]
    assert last_line.startswith("python -m pipelines.refresh_image_dataset: DiskFullError: disk full writing "), \
        last_line
    assert read["files-1"].split() == [str(disk / "filler")], read["files-1"]  # no version, no LATEST, no lease

    assert read["rc-2"].strip() == "0", read["err-2"][-3000:]
    assert verify_dataset(str(out_dir / "published")).num_records == 24  # the root's LATEST version
    files = read["files-2"].split()
    assert str(disk / "out" / "LATEST") in files and not any(".tmp-" in f for f in files), files


def test_retention_on_a_full_disk_keeps_a_version_it_cannot_record(in_namespace: InNamespace, tmp_path: Path) -> None:
    """LATEST moved, then the disk is full: retention cannot write when the old version stopped being
    LATEST, so it keeps it (its clock starts at a later run) rather than failing a published refresh;
    with --min_version_age 0 nothing needs writing and it is deleted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    old, new = "20260101T000000.000Z-aaaaaa", "20260102T000000.000Z-bbbbbb"
    program = f"""
import datetime, json, os, sys
from beam_tfrecord.versions.refresh import apply_retention, list_versions
root = {str(disk / "root")!r}
for version in ({old!r}, {new!r}):
    os.makedirs(f"{{root}}/versions/{{version}}")
    open(f"{{root}}/versions/{{version}}/manifest.json", "w").write("{{}}")
open(f"{{root}}/LATEST", "w").write({new!r} + "\\n")
try:
    with open({str(disk / "filler")!r}, "wb") as filler:
        while True:
            filler.write(bytes(1 << 16))
except OSError:
    pass
kept = apply_retention(root, 1, min_version_age=datetime.timedelta(hours=1))
exists = os.path.exists(f"{{root}}/versions/{old}/superseded.json")
deleted = apply_retention(root, 1, min_version_age=datetime.timedelta(0))
print(json.dumps([kept, exists, deleted, list(list_versions(root).complete)]))
"""
    script = (f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(disk))} || exit 90; "
              f"python -c {shlex.quote(program)}; code=$?; umount {shlex.quote(str(disk))}; exit $code")
    done = in_namespace(script)
    assert done.returncode == 0, done.stderr
    assert "cannot record when version" in done.stderr
    assert json.loads(done.stdout) == [[], False, [old], [new]]


def _python_on_small_disks(in_namespace: InNamespace, tmp_path: Path, mib: int, code: str,
                           args: list[str]) -> list[dict]:
    """Runs ``code``'s ``case(disk, arg)`` once per ``arg``, each on its own tmpfs of ``mib`` MiB, all mounted in
    the module's namespace and run by one command; returns their JSON results."""
    disks = [tmp_path / f"disk-{n}" for n in range(len(args))]
    q = shlex.quote
    for disk in disks:
        disk.mkdir()
    mounts = "".join(f"mount -t tmpfs -o size={mib}m tmpfs {q(str(disk))} || exit 90; " for disk in disks)
    program = code + "\nprint(json.dumps([case(disk, arg) for disk, arg in zip(sys.argv[1::2], sys.argv[2::2])]))\n"
    pairs = " ".join(f"{q(str(disk))} {q(arg)}" for disk, arg in zip(disks, args))
    script = (f"{mounts}python -c {q(program)} {pairs}; code=$?; "
              + "".join(f"umount {q(str(disk))}; " for disk in disks) + "exit $code")
    done = in_namespace(script)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


_PUBLISH_ON_A_FULL_DISK = """
import json, os, sys
import numpy as np
from beam_tfrecord import DatasetDescription, DType, Scalar, Schema, ShardingConfig, SplitConfig
from beam_tfrecord import WriterChecks, WriterProvenance
from beam_tfrecord.beam.spill_path import EncodeToRunsFn
from beam_tfrecord.beam.publish import PublishSettings, publish
from beam_tfrecord.beam.spill_path import WriteShardFromRunsFn
from beam_tfrecord.core.cut_planner import plan_dataset
from beam_tfrecord.core.file_format import Compression
from beam_tfrecord.core.runs import RunIndex, SpilledRun
from beam_tfrecord.core.samples import DeadLetter, Sample
from beam_tfrecord.errors import DiskFullError

def case(disk, arg):
    with_bad_row = arg == "1"
    schema = Schema({"id": Scalar(DType.INT64), "text": Scalar(DType.STRING)})
    splits, sharding = SplitConfig.parse("train=1.0"), ShardingConfig(target_shard_bytes=4_000)
    rows = [Sample(f"row-{i:04d}", {"id": i, "text": "words " * (i % 13)}) for i in range(400)]
    rows += [Sample("bad", {"id": "seven", "text": "x"})] if with_bad_row else []
    encode = EncodeToRunsFn(schema, runs_dir=f"{disk}/tmp/runs", run_bytes=3_000, direct_io=True, salt="s",
                            max_record_bytes=sharding.cap, feature_transforms={}, reread_min_bytes=0)
    encode.setup()
    encode.start_bundle()
    out = list(encode.process(rows))
    encode.finish_bundle()
    encode.teardown()
    runs = [o for o in out if isinstance(o, SpilledRun)]
    dead = [o for o in out if isinstance(o, DeadLetter)]
    indexes = [RunIndex.from_bytes(r.path, open(r.index_path, "rb").read()) for r in runs]
    plan = plan_dataset(np.concatenate([i.hashes for i in indexes]),
                        np.concatenate([i.framed_sizes for i in indexes]), splits, sharding)
    shards = WriteShardFromRunsFn(schema, Compression.NONE, {}, dataset_name="d", shards_dir=f"{disk}/tmp/shards",
                                  direct_io=True)
    shards.setup()
    infos = [shards.write_from_runs(spec, runs) for spec in plan.shards]
    try:
        with open(f"{disk}/filler", "wb") as filler:
            while True:
                filler.write(bytes(1 << 12))
    except OSError:
        pass
    settings = PublishSettings(output_dir=f"{disk}/ds", temp_dir=f"{disk}/tmp", run_id="run-1",
                               description=DatasetDescription(schema=schema, name="d", salt="s", sharding=sharding,
                                                              splits=splits, statistics=False),
                               checks=WriterChecks(max_rejected_fraction=0.01),
                               provenance=WriterProvenance(command=("test",)))
    try:
        publish(settings, plan, infos, dead)
        error = None
    except DiskFullError as err:
        error = str(err)
    left = sorted(os.path.relpath(os.path.join(d, n), disk) for d, _, names in os.walk(disk) for n in names)
    return {"error": error, "left": left, "shards": len(infos)}
"""


@pytest.fixture(scope="module")
def published_on_full_disks(in_namespace: InNamespace, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict]:
    """Both publication cases (with and without a bad row), run by one command: ``{with_bad_row: result}``."""
    results = _python_on_small_disks(in_namespace, tmp_path_factory.mktemp("publish"), 2, _PUBLISH_ON_A_FULL_DISK,
                                     ["0", "1"])
    return dict(zip([False, True], results))


@pytest.mark.parametrize("with_bad_row, full_at", [(False, "croissant.json"), (True, "dead_letters.jsonl")],
                         ids=["views-before-the-manifest", "dead-letters"])
def test_publishing_on_a_full_disk_unpublishes_and_removes_the_shards_moved_in(
        published_on_full_disks: dict[bool, dict], with_bad_row: bool, full_at: str) -> None:
    """The shards are written, then the disk fills: the first file publication writes (the dead-letter
    file, or croissant.json, the first view written before the manifest) fails, and the shards already
    renamed into the dataset directory go."""
    result = published_on_full_disks[with_bad_row]
    assert result["error"] and f"/ds/{full_at}" in result["error"], result
    assert result["left"] == ["filler"] and result["shards"] > 3, result


_SPILL_ON_A_FULL_DISK = """
import concurrent.futures, json, os, random, sys
from beam_tfrecord.storage import direct_io
from beam_tfrecord.core.runs import make_record_entry
from beam_tfrecord.errors import DiskFullError
from beam_tfrecord.spill.run_files import RunSpiller

def case(disk, arg):
    holds = arg == "1"
    with direct_io.open_write(f"{disk}/probe", direct=True) as probe:
        o_direct = isinstance(probe, direct_io.DirectWriter)
    os.remove(f"{disk}/probe")
    with open(f"{disk}/filler", "wb") as filler:
        filler.write(bytes(3 << 20))  # 1 MiB left
    rng = random.Random(1)
    entries = [make_record_entry(rng.getrandbits(64), rng.randbytes(20_000)) for _ in range(150)]  # 3 MB
    error = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as writer:
        spiller = RunSpiller(f"{disk}/runs", run_bytes=2 << 20, direct=True, writer=writer,
                             page_cache_holds=lambda num_bytes: holds)
        try:
            runs = spiller.add_many(entries)
            spiller.finish()
        except DiskFullError as err:
            error = str(err)
    left = sorted(os.path.relpath(os.path.join(d, n), disk) for d, _, names in os.walk(disk) for n in names)
    return {"o_direct": o_direct, "error": error, "left": left}
"""


@pytest.fixture(scope="module")
def spilled_on_full_disks(in_namespace: InNamespace, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict]:
    """Both spill cases (through the page cache, and O_DIRECT), run by one command: ``{holds: result}``."""
    results = _python_on_small_disks(in_namespace, tmp_path_factory.mktemp("spill"), 4, _SPILL_ON_A_FULL_DISK,
                                     ["1", "0"])
    return dict(zip([True, False], results))


@pytest.mark.parametrize("holds", [True, False], ids=["through-the-page-cache", "o-direct"])
def test_a_spill_run_on_a_full_disk_fails_typed_and_is_removed_however_it_is_written(
        spilled_on_full_disks: dict[bool, dict], holds: bool) -> None:
    result = spilled_on_full_disks[holds]
    if not holds and not result["o_direct"]:
        pytest.skip("this kernel's tmpfs refuses O_DIRECT")
    suffix = ".cached.run" if holds else "-00000.run"
    assert result["error"] and "disk full writing" in result["error"] and suffix in result["error"], result
    assert result["left"] == ["filler"], result  # the partial run is gone, and no index was written

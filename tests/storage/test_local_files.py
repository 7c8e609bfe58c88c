"""Local files: writes reach the kernel in pieces of at most 64 KiB (``storage.local.WRITE_BYTES``), whole and in
order; a tree's files are deleted by several threads (``DELETE_THREADS``), links not followed.

Why: docs/performance.md, "Spill runs in 64 KiB writes". The write system calls are counted from
``/proc/thread-self/io`` (``syscw``), the kernel's own count for this thread.
"""

import os

import pytest

from beam_tfrecord import storage
from beam_tfrecord.storage.local import WRITE_BYTES


def _write_calls() -> int:
    with open("/proc/thread-self/io", "rb") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(b"syscw:"))


def _calls_for(pieces: list[int]) -> int:
    """The write system calls the rule gives: ``io.BufferedWriter`` (8 KiB buffer) passes a piece over its
    buffer's room on at once, each call taking at most WRITE_BYTES, and keeps the rest (under 8 KiB) for
    the next piece or the close."""
    calls, buffered = 0, 0
    for size in pieces:
        if buffered + size <= 8192:
            buffered += size
            continue
        calls += bool(buffered)  # the buffer is flushed first
        remaining, buffered = size, 0
        while remaining > 8192:
            step = min(remaining, WRITE_BYTES)
            calls, remaining = calls + 1, remaining - step
        buffered = remaining
    return calls + bool(buffered)


@pytest.mark.parametrize("pieces", [
    [3 << 20],
    [WRITE_BYTES],
    [WRITE_BYTES + 1],
    [100, 5 << 20, 7, WRITE_BYTES * 3 - 1, 9000],
    [],
], ids=["3-mib-at-once", "exactly-64-kib", "64-kib-and-a-byte", "mixed-pieces", "empty"])
def test_a_local_write_reaches_the_kernel_in_64_kib_pieces_whole_and_in_order(tmp_path, pieces):
    data = [os.urandom(size) for size in pieces]
    path = str(tmp_path / "sub" / "run.bin")  # a parent folder is made
    before = _write_calls()
    with storage.open_write(path) as handle:
        for piece in data:
            handle.write(memoryview(piece) if len(piece) % 2 else piece)
    calls = _write_calls() - before
    with open(path, "rb") as handle:
        assert handle.read() == b"".join(data)
    assert calls == _calls_for(pieces)
    assert calls >= -(-sum(pieces) // WRITE_BYTES)  # never more than WRITE_BYTES a call


def test_a_tree_is_deleted_whole_without_following_its_links(tmp_path):
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "kept.txt").write_bytes(b"kept")
    (outside / "folder" / "also-kept.txt").write_bytes(b"kept")
    tree = tmp_path / "tree"
    (tree / "runs" / "deeper").mkdir(parents=True)
    for number in range(40):  # more files than DELETE_THREADS
        (tree / "runs" / f"run-{number:02d}").write_bytes(os.urandom(1000))
    (tree / "runs" / "deeper" / "index").write_bytes(b"i")
    (tree / "empty").mkdir()
    (tree / "link-to-folder").symlink_to(outside / "folder")
    (tree / "runs" / "link-to-file").symlink_to(outside / "kept.txt")
    (tree / "broken-link").symlink_to(tmp_path / "nothing-here")

    storage.delete_tree(str(tree))

    assert not tree.exists()
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == [
        "folder", "folder/also-kept.txt", "kept.txt"]
    storage.delete_tree(str(tree))  # a tree already gone: nothing to do


def test_a_link_to_a_folder_is_refused_and_nothing_is_deleted(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    for number in range(3):
        (folder / f"file-{number}").write_bytes(b"x")
    (tmp_path / "link").symlink_to(folder)
    with pytest.raises(OSError, match="symbolic link"):
        storage.delete_tree(str(tmp_path / "link"))
    assert sorted(p.name for p in folder.iterdir()) == ["file-0", "file-1", "file-2"]

"""beam_tfrecord.storage on gs:// against the emulator: the operations publication relies on."""

from __future__ import annotations

from beam_tfrecord import storage


def test_write_atomic_replaces_existing_object(gcs_bucket: str) -> None:
    path = f"{gcs_bucket}/root/LATEST"
    storage.write_bytes_atomic(path, b"v1\n")
    storage.write_bytes_atomic(path, b"v2\n")
    assert storage.read_bytes(path) == b"v2\n"
    assert storage.list_files(f"{gcs_bucket}/root/*") == [(path, 3)]  # no temporary name left behind


def test_rename_moves_objects_and_overwrites(gcs_bucket: str) -> None:
    sources = [f"{gcs_bucket}/tmp/a", f"{gcs_bucket}/tmp/b"]
    destinations = [f"{gcs_bucket}/out/a", f"{gcs_bucket}/out/b"]
    for path in sources:
        with storage.open_write(path) as handle:
            handle.write(path.encode())
    with storage.open_write(destinations[0]) as handle:
        handle.write(b"old")
    storage.rename(sources, destinations)
    assert [p for p, _ in storage.list_files(f"{gcs_bucket}/**")] == destinations
    assert storage.read_bytes(destinations[0]) == sources[0].encode()


def test_delete_tree_and_delete_if_exists(gcs_bucket: str) -> None:
    for name in ("d/x", "d/sub/y", "keep/z"):
        with storage.open_write(f"{gcs_bucket}/{name}") as handle:
            handle.write(b"1")
    storage.delete_tree(f"{gcs_bucket}/d")
    storage.delete_if_exists([f"{gcs_bucket}/keep/z", f"{gcs_bucket}/missing"])
    storage.delete_tree(f"{gcs_bucket}/never-existed")
    assert storage.list_files(f"{gcs_bucket}/**") == []


def test_rename_from_a_local_file_uploads_it_over_the_object(gcs_bucket: str, tmp_path) -> None:
    source = tmp_path / "shard"
    source.write_bytes(b"new shard")
    destination = f"{gcs_bucket}/out/shard"
    with storage.open_write(destination) as handle:
        handle.write(b"old")
    storage.rename([str(source)], [destination])
    assert storage.read_bytes(destination) == b"new shard" and not source.exists()
    assert [p for p, _ in storage.list_files(f"{gcs_bucket}/**")] == [destination]

"""A local file mapped whole names its file (real path and identity) from the array alone; nothing else does."""

from __future__ import annotations

import os

import numpy as np

from beam_tfrecord.formats.mapping import MappedFile, map_whole, mapped_file


def test_a_mapping_names_its_real_file_and_its_slices_and_other_arrays_do_not(tmp_path):
    real = tmp_path / "shard"
    real.write_bytes(b"0123456789")
    link = tmp_path / "link"
    link.symlink_to(real)
    array = map_whole(str(link))
    status = os.stat(real)
    assert array.tobytes() == b"0123456789" and not array.flags.writeable
    assert mapped_file(array) == MappedFile(str(real), status.st_dev, status.st_ino, 10, status.st_mtime_ns)
    others = (array[1:], array[:], array.view(np.int8), np.frombuffer(b"0123456789", dtype=np.uint8))
    assert [mapped_file(other) for other in others] == [None] * 4
    (tmp_path / "empty").write_bytes(b"")
    empty = map_whole(str(tmp_path / "empty"))
    assert len(empty) == 0 and mapped_file(empty) is None

"""gs:// paths are not local: direct_io hands them to Beam's GCS filesystem, with the same bytes."""

from beam_tfrecord import storage
from beam_tfrecord.storage import direct_io
from beam_tfrecord.storage.direct_io import DirectWriter


def test_remote_paths_use_the_storage_handles(gcs_bucket):
    path = f"{gcs_bucket}/direct-io/file.bin"
    with direct_io.open_write(path) as handle:
        assert not isinstance(handle, DirectWriter)
        handle.write(b"remote bytes")
    with direct_io.open_read(path) as stream:
        stream.seek(7)
        assert stream.read() == b"bytes"
    assert storage.read_bytes(path) == b"remote bytes"

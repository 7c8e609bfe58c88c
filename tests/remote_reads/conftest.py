"""Readers' remote shards, read from gs:// on a real fake-gcs-server started once per test process
(tests/fixtures_gcs.py)."""

from fixtures_gcs import fake_gcs, gcs_bucket, tiny_images  # noqa: F401  (pytest fixtures)

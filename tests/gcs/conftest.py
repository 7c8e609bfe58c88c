"""gs:// tests run against a real fake-gcs-server started once per session (see tests/fixtures_gcs.py)."""

from fixtures_gcs import fake_gcs, gcs_bucket, tiny_images  # noqa: F401  (pytest fixtures)

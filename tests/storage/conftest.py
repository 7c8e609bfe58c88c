"""Storage backend tests: local paths on tmp_path, gs:// on the shared fake-gcs-server (tests/fixtures_gcs.py)."""

from fixtures_gcs import fake_gcs, gcs_bucket  # noqa: F401  (pytest fixtures)

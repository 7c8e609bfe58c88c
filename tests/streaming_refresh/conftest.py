"""The GCS emulator's fixtures for the watch tests (started once per test process, shared)."""

from fixtures_gcs import fake_gcs, gcs_bucket  # noqa: F401  (pytest fixtures)

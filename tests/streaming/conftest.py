"""The streaming tests write to the GCS emulator too (tests/fixtures_gcs.py)."""

from fixtures_gcs import fake_gcs, gcs_bucket  # noqa: F401  (pytest fixtures)

"""Runner tests share the tiny image folder and the GCS emulator (tests/fixtures_gcs.py)."""

from fixtures_gcs import fake_gcs, tiny_images  # noqa: F401  (pytest fixtures)

"""Runner tests share the tiny image folder (tests/fixtures_gcs.py)."""

from fixtures_gcs import tiny_images  # noqa: F401  (pytest fixture)

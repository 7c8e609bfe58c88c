"""Storage tests: the backends, and builds, leases and reads on every store: local paths on tmp_path; gs://, s3://
and az:// on real local servers (tests/fixtures_*), shared per test process."""

from fixtures_gcs import fake_gcs, gcs_bucket, tiny_images  # noqa: F401  (pytest fixtures)
from fixtures_stores import az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)

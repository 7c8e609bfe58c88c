"""s3:// and az:// through the real jobs, lease and readers, on moto's S3 server and Azurite (fixtures_stores)."""

from fixtures_gcs import fake_gcs, gcs_bucket, tiny_images  # noqa: F401  (pytest fixtures)
from fixtures_stores import az_container, azurite, moto_s3, s3_bucket  # noqa: F401  (pytest fixtures)

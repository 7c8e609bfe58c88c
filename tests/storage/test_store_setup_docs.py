"""deploy/stores.md names real things: Beam's S3 and Azure options, the variables the fixtures point clients with."""

from __future__ import annotations

import re
from pathlib import Path

from apache_beam.options.pipeline_options import PipelineOptions
from fixtures_stores import AZURE_ENV_KEYS, S3_ENV_KEYS

from pipelines.refresh_image_dataset import job_option_names

DOC = (Path(__file__).resolve().parents[2] / "deploy" / "stores.md").read_text()


def test_every_option_the_page_names_is_beams_or_the_jobs() -> None:
    named = set(re.findall(r"`--([a-z0-9_]+)`", DOC))
    assert {"s3_region_name", "s3_endpoint_url", "azure_connection_string", "temp_location"} <= named
    assert named <= set(PipelineOptions([]).get_all_options()) | set(job_option_names())


def test_the_page_names_the_variables_the_clients_read() -> None:
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AZURE_STORAGE_CONNECTION_STRING",
                 "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        assert f"`{name}`" in DOC and name in S3_ENV_KEYS + AZURE_ENV_KEYS

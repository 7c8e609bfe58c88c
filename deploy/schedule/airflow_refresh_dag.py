"""Airflow DAG: launch the refresh Flex Template (deploy/dataflow) every night.

Copy to the DAGs folder of Cloud Composer / Airflow 2 with apache-airflow-providers-google.
The operator authenticates with the Airflow connection ``google_cloud_default`` (Composer: the
environment's service account); no key is stored here. ``max_active_runs=1``: refreshes of one
dataset root must not overlap.
"""

from __future__ import annotations

import datetime

from airflow import DAG
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator

PROJECT_ID = "my-project"
REGION = "europe-west1"
TEMPLATE = "gs://my-bucket/templates/refresh_image_dataset.json"
IMAGE = "europe-west1-docker.pkg.dev/my-project/beam-tfrecord/refresh-image-dataset:latest"

# The job's options: the same in cloud_scheduler_launch_request.json and k8s-cronjob-flink.yaml.
JOB_PARAMETERS = {
    "input": "gs://my-bucket/raw/images",
    "dataset_root": "gs://my-bucket/datasets/images",
    "keep_versions": "3",
    "splits": "train=0.9,validation=0.1",
    "compression": "gzip",
}

with DAG(
    dag_id="beam_tfrecord_refresh_images",
    schedule="0 3 * * *",
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["beam-tfrecord"],
) as dag:
    DataflowStartFlexTemplateOperator(
        task_id="refresh_images",
        project_id=PROJECT_ID,
        location=REGION,
        body={
            "launchParameter": {
                "jobName": "refresh-images-{{ ds_nodash }}",
                "containerSpecGcsPath": TEMPLATE,
                "parameters": {**JOB_PARAMETERS, "sdk_container_image": IMAGE},
                "environment": {
                    "serviceAccountEmail": "beam-tfrecord@my-project.iam.gserviceaccount.com",
                    "tempLocation": "gs://my-bucket/tmp",
                    "stagingLocation": "gs://my-bucket/staging",
                    "maxWorkers": 10,
                },
            }
        },
        wait_until_finished=True,
    )

#!/usr/bin/env bash
# Submit one refresh to a running Flink session cluster through Beam's Flink job server.
#
#   JOB_ENDPOINT=localhost:8099 ARTIFACT_ENDPOINT=localhost:8098 \
#   INPUT=gs://my-bucket/raw/images DATASET_ROOT=gs://my-bucket/datasets/images deploy/flink/submit.sh
#
# Run it where the job server is reachable (the Kubernetes CronJob in deploy/schedule runs the
# same command). The SDK workers are the worker-pool sidecars of the task managers
# (--environment_type=EXTERNAL --environment_config=localhost:50000). Paths must be readable by
# this process (the inputs are fingerprinted at launch) and by the workers: gs:// with ADC, or
# a volume mounted at the same path in both.
set -euo pipefail

: "${INPUT:?set INPUT}" "${DATASET_ROOT:?set DATASET_ROOT}"
beam-tfrecord refresh \
  --runner=PortableRunner \
  --job_endpoint="${JOB_ENDPOINT:-localhost:8099}" \
  --artifact_endpoint="${ARTIFACT_ENDPOINT:-localhost:8098}" \
  --environment_type=EXTERNAL \
  --environment_config=localhost:50000 \
  --parallelism="${PARALLELISM:-2}" \
  --input="${INPUT}" \
  --dataset_root="${DATASET_ROOT}" \
  --keep_versions="${KEEP_VERSIONS:-3}" \
  --splits=train=0.9,validation=0.1 \
  --compression=gzip \
  "$@"

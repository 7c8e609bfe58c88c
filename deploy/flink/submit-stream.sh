#!/usr/bin/env bash
# Submit a streaming pipeline that ends in WriteBalancedTFRecord (an unbounded input: each fired pane is one
# commit under the prefix, docs/streaming.md) to a running Flink session cluster through Beam's Flink job server.
#
#   JOB_ENDPOINT=localhost:8099 ARTIFACT_ENDPOINT=localhost:8098 \
#   PIPELINE=my_company.stream_job deploy/flink/submit-stream.sh --output_prefix=gs://my-bucket/streams/events
#
# PIPELINE is your module (python -m PIPELINE): it reads the stream, windows it or passes
# triggering_frequency=SECONDS, and writes with WriteBalancedTFRecord(gs://...). Its own options follow "$@".
# Flink runs it as a streaming job (--streaming) with checkpoints every CHECKPOINT_MS (an option of the Flink
# job server: the PortableRunner asks the job server for its options). The prefix must be on storage every task
# manager sees (gs://, s3://, az://): a local path is refused before the job is submitted (LocalPathError).
set -euo pipefail

: "${PIPELINE:?set PIPELINE to the module of your streaming pipeline}"
python -m "${PIPELINE}" \
  --runner=PortableRunner \
  --job_endpoint="${JOB_ENDPOINT:-localhost:8099}" \
  --artifact_endpoint="${ARTIFACT_ENDPOINT:-localhost:8098}" \
  --environment_type=EXTERNAL \
  --environment_config=localhost:50000 \
  --parallelism="${PARALLELISM:-2}" \
  --streaming \
  --checkpointing_interval="${CHECKPOINT_MS:-60000}" \
  "$@"

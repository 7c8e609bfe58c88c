#!/usr/bin/env bash
# A Cloud Scheduler job that launches the Flex Template (deploy/dataflow) every night at 03:00 UTC.
#
#   export PROJECT_ID=my-project REGION=europe-west1
#   deploy/schedule/cloud_scheduler.sh
#
# Edit cloud_scheduler_launch_request.json first (bucket, project, image). The scheduler calls
# the Dataflow API with an OAuth token of $SCHEDULER_SA (roles/dataflow.developer and
# roles/iam.serviceAccountUser on the job's service account): no key files anywhere.
# A run whose inputs are unchanged finishes at launch ("nothing to do"), so a frequent schedule is cheap.
set -euo pipefail

: "${PROJECT_ID:?set PROJECT_ID}" "${REGION:?set REGION}"
SCHEDULER_SA="${SCHEDULER_SA:-beam-tfrecord-scheduler@${PROJECT_ID}.iam.gserviceaccount.com}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

gcloud scheduler jobs create http refresh-images \
  --project="${PROJECT_ID}" --location="${REGION}" \
  --schedule="0 3 * * *" --time-zone="Etc/UTC" \
  --uri="https://dataflow.googleapis.com/v1b3/projects/${PROJECT_ID}/locations/${REGION}/flexTemplates:launch" \
  --http-method=POST \
  --headers="Content-Type=application/json" \
  --oauth-service-account-email="${SCHEDULER_SA}" \
  --oauth-token-scope="https://www.googleapis.com/auth/cloud-platform" \
  --message-body-from-file="${HERE}/cloud_scheduler_launch_request.json"

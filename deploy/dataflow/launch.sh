#!/usr/bin/env bash
# Build the Flex Template image and spec, and launch the refresh job on Dataflow.
#
#   export PROJECT_ID=my-project REGION=europe-west1 BUCKET=my-bucket
#   deploy/dataflow/launch.sh image      # build + push the image with Cloud Build
#   deploy/dataflow/launch.sh template   # write the template spec to gs://$BUCKET/templates/
#   deploy/dataflow/launch.sh run        # launch one refresh (a no-op when the inputs are unchanged)
#
# Credentials: gcloud's own login / Application Default Credentials; the job runs as
# $SERVICE_ACCOUNT (needs roles/dataflow.worker and object read/write on the bucket). Nothing
# secret is passed on the command line.
set -euo pipefail

: "${PROJECT_ID:?set PROJECT_ID}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET}"
REPOSITORY="${REPOSITORY:-beam-tfrecord}"
IMAGE="${IMAGE:-${REGION}-docker.pkg.dev/${PROJECT_ID}/${REPOSITORY}/refresh-image-dataset:latest}"
TEMPLATE="${TEMPLATE:-gs://${BUCKET}/templates/refresh_image_dataset.json}"
SERVICE_ACCOUNT="${SERVICE_ACCOUNT:-beam-tfrecord@${PROJECT_ID}.iam.gserviceaccount.com}"
INPUT="${INPUT:-gs://${BUCKET}/raw/images}"
DATASET_ROOT="${DATASET_ROOT:-gs://${BUCKET}/datasets/images}"
KEEP_VERSIONS="${KEEP_VERSIONS:-3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HERE}/../.." && pwd)"

case "${1:-}" in
  image)
    gcloud builds submit "${REPO_ROOT}" --project="${PROJECT_ID}" \
      --config="${HERE}/cloudbuild.yaml" --substitutions="_IMAGE=${IMAGE}"
    ;;
  template)
    gcloud dataflow flex-template build "${TEMPLATE}" --project="${PROJECT_ID}" \
      --image="${IMAGE}" --sdk-language=PYTHON --metadata-file="${HERE}/metadata.json"
    ;;
  run)
    # ^~^ makes "~" the separator, so values may contain commas (--splits=train=0.9,validation=0.1).
    gcloud dataflow flex-template run "refresh-images-$(date -u +%Y%m%d-%H%M%S)" --project="${PROJECT_ID}" \
      --region="${REGION}" --template-file-gcs-location="${TEMPLATE}" \
      --service-account-email="${SERVICE_ACCOUNT}" \
      --temp-location="gs://${BUCKET}/tmp" --staging-location="gs://${BUCKET}/staging" \
      --parameters="^~^input=${INPUT}~dataset_root=${DATASET_ROOT}~keep_versions=${KEEP_VERSIONS}~splits=train=0.9,validation=0.1~compression=gzip~sdk_container_image=${IMAGE}"
    ;;
  *)
    echo "usage: $0 image|template|run   (env: PROJECT_ID REGION BUCKET [IMAGE TEMPLATE INPUT DATASET_ROOT])" >&2
    exit 2
    ;;
esac

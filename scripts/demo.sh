#!/usr/bin/env bash
# The main job on the embedded default: DirectRunner, local files, a generated sample image folder.
# Writes .demo/images (300 JPEGs in 3 classes), builds .demo/dataset, verifies it, prints what was written.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
[ -d .demo/images ] || python -m pipelines.make_sample_images --output .demo/images
beam-tfrecord build --input .demo/images --output .demo/dataset --splits train=0.8,validation=0.1,test=0.1 \
  --target_shard_bytes 200000 "$@"
beam-tfrecord verify .demo/dataset

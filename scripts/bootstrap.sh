#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv and installs the package with
# every role's extras ([all]) and the test tools. torch comes first: the CPU build this machine
# keeps on disk satisfies the [torch] extra, where a fresh resolve would fetch a CUDA build.
# Sourced by demo.sh and test.sh; re-installs only when setup.py or the extras change. test.sh asks
# for [ecosystem] too (NVIDIA DALI, Ray: the other tools the tests read datasets with) through
# BEAM_TFRECORD_EXTRAS; the demo does without them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BEAM_TFRECORD_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${BEAM_TFRECORD_EXTRAS:-all,test}"
stamp_of() { echo "$VENV/.installed-$(cat "$ROOT/setup.py" <(echo "$1") | sha256sum | cut -c1-16)"; }
STAMP="$(stamp_of "$EXTRAS")"
# A venv set up for the tests (the most extras) serves the demo as it is.
if [ ! -f "$STAMP" ] && [ ! -f "$(stamp_of all,test,ecosystem)" ]; then
  echo "setting up $VENV (first run: about 2 minutes)..." >&2
  "$PYTHON" -m venv "$VENV"
  LOG="$VENV/install.log"
  if ! { "$VENV/bin/pip" install --disable-pip-version-check --upgrade pip \
         && "$VENV/bin/pip" install --disable-pip-version-check "torch==2.13.0" \
         && "$VENV/bin/pip" install --disable-pip-version-check -e "$ROOT[$EXTRAS]"; } >"$LOG" 2>&1; then
    grep -v "is ignored" "$LOG" | tail -40 >&2
    echo "installation failed; the full log is $LOG" >&2
    exit 1
  fi
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

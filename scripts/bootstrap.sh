#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv and installs the package with
# every role's extras ([all]) and the test tools. torch comes first: the CPU build this machine
# keeps on disk satisfies the [torch] extra, where a fresh resolve would fetch a CUDA build.
# Sourced by demo.sh and test.sh; re-installs only when setup.py changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BEAM_TFRECORD_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.installed-$(sha256sum "$ROOT/setup.py" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  echo "setting up $VENV (first run: about 2 minutes)..." >&2
  "$PYTHON" -m venv "$VENV"
  LOG="$VENV/install.log"
  if ! { "$VENV/bin/pip" install --disable-pip-version-check --upgrade pip \
         && "$VENV/bin/pip" install --disable-pip-version-check "torch==2.13.0" \
         && "$VENV/bin/pip" install --disable-pip-version-check -e "$ROOT[all,test]"; } >"$LOG" 2>&1; then
    grep -v "is ignored" "$LOG" | tail -40 >&2
    echo "installation failed; the full log is $LOG" >&2
    exit 1
  fi
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv and installs the package with
# its test and optional extras. Sourced by demo.sh and test.sh; re-installs only when setup.py changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BEAM_TFRECORD_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.installed-$(sha256sum "$ROOT/setup.py" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  echo "setting up $VENV (first run: about 2 minutes)..." >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --upgrade pip 2>&1 | grep -v "is ignored" >&2 || true
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -e "$ROOT[test,parquet]" 2>&1 \
    | grep -vE "is ignored|^\s*$" >&2 || true
  "$VENV/bin/python" -c "import beam_tfrecord, apache_beam, tensorflow" 2>/dev/null \
    || { echo "installation failed: see pip output above" >&2; exit 1; }
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

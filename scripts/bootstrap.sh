#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv and installs the package with
# every role's extras ([all]) and the test tools. torch is pinned: the CPU build this machine keeps on
# disk (a local version, 2.13.0+cpu) satisfies the [torch] extra, where a fresh resolve would fetch a CUDA build.
# Sourced by demo.sh and test.sh; re-installs only when setup.py or the extras change. test.sh asks
# for [ecosystem] too (NVIDIA DALI, Ray: the other tools the tests read datasets with) through
# BEAM_TFRECORD_EXTRAS; the demo does without them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BEAM_TFRECORD_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${BEAM_TFRECORD_EXTRAS:-all,test}"
# uv installs the packages (parallel downloads, a wheel cache kept across venvs: ~1.5 GB of wheels are not
# fetched again when CI lays a fresh clone). uv does not read pip's configuration: the machine's wheel
# folders, extra indexes and constraints (pip config list) are handed to it as options.
uv_options_from_pip_config() {
  local key value
  echo "--index-strategy unsafe-best-match"  # as pip: the best version across every index
  "$PYTHON" -m pip config list 2>/dev/null | while IFS='=' read -r key value; do
    value="${value#\'}"; value="${value%\'}"
    case "${key##*.}" in
      find-links) for v in $value; do echo "--find-links $v"; done ;;
      index-url) echo "--index-url $value" ;;
      extra-index-url) for v in $value; do echo "--extra-index-url $v"; done ;;
      constraint) for v in $value; do echo "--constraint $v"; done ;;
    esac
  done
}
stamp_of() { echo "$VENV/.installed-$(cat "$ROOT/setup.py" <(echo "$1") | sha256sum | cut -c1-16)"; }
STAMP="$(stamp_of "$EXTRAS")"
# A venv set up for the tests (the most extras) serves the demo as it is.
if [ ! -f "$STAMP" ] && [ ! -f "$(stamp_of all,test,ecosystem)" ]; then
  echo "setting up $VENV (first run: about 30 s)..." >&2
  "$PYTHON" -m venv "$VENV"
  LOG="$VENV/install.log"
  if ! { "$VENV/bin/pip" install --disable-pip-version-check "uv>=0.9,<1" \
         && "$VENV/bin/uv" pip install --python "$VENV/bin/python" $(uv_options_from_pip_config) \
              "torch==2.13.0" -e "$ROOT[$EXTRAS]"; } >"$LOG" 2>&1; then
    grep -v "is ignored" "$LOG" | tail -40 >&2
    echo "installation failed; the full log is $LOG" >&2
    exit 1
  fi
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# Bytecode is written (a machine may set PYTHONDONTWRITEBYTECODE): the suite starts ~100 interpreters, each of which
# would otherwise compile every module it imports (pytest's collection: 34 s without .pyc files, 18 s with).
# uv installs without compiling (compiling all 30,000 modules up front: ~2 min); the first import writes them.
unset PYTHONDONTWRITEBYTECODE
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

#!/usr/bin/env bash
# The whole test suite, in the project's virtual environment (created on first run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
python -m pytest -q "$@"

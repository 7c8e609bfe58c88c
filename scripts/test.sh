#!/usr/bin/env bash
# Lint (ruff), type check (mypy) and the whole test suite, in the project's virtual environment
# (created on first run). Arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BEAM_TFRECORD_EXTRAS="${BEAM_TFRECORD_EXTRAS:-all,test,ecosystem}" source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
# The report test renders in a real headless browser: Debian's Chromium, installed once.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing chromium (Debian package) for the report test..." >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    >/tmp/beam-tfrecord-chromium-install.log 2>&1 \
    || { tail -20 /tmp/beam-tfrecord-chromium-install.log >&2; echo "chromium install failed" >&2; exit 1; }
fi
# What a fresh clone would otherwise make again on every CI run lives in the user's cache folder: Azurite's
# install and mypy's cache (keyed by each file's hash, so any checkout can share it).
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/beam-tfrecord"
# The az:// tests run against Azurite (Microsoft's Azure Storage emulator, an npm package), installed once into
# the cache and linked as .tools/azurite where Node.js is present (without Node.js those tests are skipped).
if command -v npm >/dev/null 2>&1 && [ ! -x "$ROOT/.tools/azurite/node_modules/.bin/azurite-blob" ]; then
  if [ ! -x "$CACHE/azurite/node_modules/.bin/azurite-blob" ]; then
    echo "installing azurite (npm) into $CACHE/azurite for the az:// tests..." >&2
    npm install --prefix "$CACHE/azurite" --no-audit --no-fund --loglevel=error azurite@3 \
      >/tmp/beam-tfrecord-azurite-install.log 2>&1 \
      || { tail -20 /tmp/beam-tfrecord-azurite-install.log >&2; echo "azurite install failed" >&2; exit 1; }
  fi
  mkdir -p "$ROOT/.tools" && ln -sfn "$CACHE/azurite" "$ROOT/.tools/azurite"
fi
echo "ruff check ." >&2 && ruff check . -q
echo "mypy (beam_tfrecord and pipelines; configured in pyproject.toml)" >&2
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$CACHE/mypy}" mypy --no-error-summary
# Two test processes (pytest-xdist), each test file whole in one of them, so module-scoped fixtures
# build once (measured on 2 shared cores: 384 s against 464 s in one process); PYTEST_WORKERS=0 runs the
# tests in this process. pytest's exit status is the script's: 5 (no test collected, e.g. a mistyped
# path) fails the run like a failed test.
python -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"

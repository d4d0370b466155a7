#!/usr/bin/env bash
# The project's test command: install what is needed, lint, run the unit tests (GPU tests skip without CUDA).
#
#   bash tools/test.sh [PYTEST ARGS]      # PYTHON names the interpreter (default python3), as for tools/install.sh
set -euo pipefail
case "${1:-}" in  # before the install: its minutes are not what help asks for
  -h|--help) sed -n '2,4p' "$0"; echo "  (other arguments go to pytest; see: python3 -m pytest --help)"; exit 0 ;;
esac
PY="${PYTHON:-python3}"
# a relative PYTHON (.venv/bin/python) names a file under the caller's directory, not under the repository root this
# script changes to: make it absolute first (not resolving symlinks: a venv's python is one)
if [[ "$PY" == */* && "$PY" != /* ]]; then PY="$PWD/$PY"; fi
cd "$(dirname "$0")/.."
PYTHON="$PY" bash tools/install.sh dev,hf,gdn,plot
"$PY" -m ruff check .
"$PY" -m pytest -q tests/unit_tests "$@"

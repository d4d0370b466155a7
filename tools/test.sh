#!/usr/bin/env bash
# The project's test command: install what is needed, lint, run the unit tests (GPU tests skip without CUDA).
#
#   bash tools/test.sh [PYTEST ARGS]      # PYTHON names the interpreter (default python3), as for tools/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
bash tools/install.sh dev,hf,gdn,plot
"$PY" -m ruff check .
"$PY" -m pytest -q tests/unit_tests "$@"

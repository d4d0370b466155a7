#!/usr/bin/env bash
# The project's test command: install what is needed, lint, run the unit tests (GPU tests skip without CUDA).
#
#   bash tools/test.sh [PYTEST ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install.sh dev,hf,gdn,plot
python3 -m ruff check .
python3 -m pytest -q tests/unit_tests "$@"

#!/usr/bin/env bash
# The project's test command: install what is needed, lint, run the unit tests (GPU tests skip without CUDA).
#
#   bash tools/test.sh [PYTEST ARGS]      # PYTHON names the interpreter (default python3), as for tools/install.sh
#   Test paths among the arguments (tests/unit_tests/test_cards.py, also with ::name) are read from the repository
#   root and run instead of the whole tree; without one, tests/unit_tests runs.
set -euo pipefail
case "${1:-}" in  # before the install: its minutes are not what help asks for
  -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; echo "  (other arguments go to pytest; see: python3 -m pytest --help)"; exit 0 ;;
esac
PY="${PYTHON:-python3}"
# a relative PYTHON (.venv/bin/python) names a file under the caller's directory, not under the repository root this
# script changes to: make it absolute first (not resolving symlinks: a venv's python is one)
if [[ "$PY" == */* && "$PY" != /* ]]; then PY="$PWD/$PY"; fi
cd "$(dirname "$0")/.."
PYTHON="$PY" bash tools/install.sh dev,hf,gdn,plot
# pytest's own parser checks the arguments before the lint (an unknown option, a missing value): `--version` given
# twice makes pytest parse them all, print its plugins and stop, in about a second. --noconftest keeps the conftests'
# imports (megatron-core: ten seconds) out of it; they add no option pytest would have to know here.
"$PY" -m pytest --noconftest "$@" --version --version >/dev/null
"$PY" -m ruff check .
# an argument naming a test file or folder (under tests/, a .py file, or with ::; also as ./tests/... or an absolute
# path in the checkout) narrows the run (it was added to the whole tree); an option's value that names none (-k
# nothing, --junitxml report.xml) does not, one that names a test path (--ignore tests/x.py) does, which is harmless:
# pytest.ini's testpaths then stands in for tests/unit_tests
targets=(tests/unit_tests)
for arg in "$@"; do
  arg=${arg#./}
  arg=${arg#"$PWD"/}  # the repository root, where this script runs
  if [[ $arg != -* && ( $arg == tests/* || $arg == *.py || $arg == *::* ) && -e ${arg%%::*} ]]; then
    targets=()
    break
  fi
done
"$PY" -m pytest -q ${targets[@]+"${targets[@]}"} "$@"

#!/usr/bin/env bash
# Install megatron-oellm and what it needs into the current Python (3.11 or 3.12), idempotently.
#
#   bash tools/install.sh [EXTRAS]      EXTRAS defaults to "dev,hf" (add gdn, te, plot as needed)
#
# Python 3.11: megatron-core 0.19.2 declares >= 3.12 but only needs typing.override, which megatron.oellm provides;
# so we install torch and numpy<2.4 first, then megatron-core with --ignore-requires-python.
# On a GPU cluster use the container's torch (this script keeps an importable torch as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-dev,hf}"
PY="${PYTHON:-python3}"
PIP=("$PY" -m pip install -q --disable-pip-version-check)
"$PY" - <<'PYCHECK'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"megatron-oellm needs Python >= 3.11, this is {sys.version.split()[0]}")
PYCHECK
if ! "$PY" -c "import torch" 2>/dev/null; then
  # CPU machines: the CPU build of torch 2.13.0 (a CUDA build comes from the cluster container instead).
  "${PIP[@]}" "torch==2.13.0" "numpy<2.4"
fi
"${PIP[@]}" "numpy<2.4" triton
"${PIP[@]}" --ignore-requires-python "megatron-core==0.19.2"
# Without --ignore-requires-python here: it would also admit releases of other dependencies that need 3.12 (e.g. a
# contourpy source build for the plot extra). The installed megatron-core already satisfies the pin.
"${PIP[@]}" -e ".[${EXTRAS}]"
"$PY" -c "import megatron.oellm, megatron.core; print('megatron-oellm', megatron.oellm.__version__, '+ megatron-core', megatron.core.__version__)"

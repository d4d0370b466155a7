#!/usr/bin/env bash
# A virtual environment where Transformer Engine imports on a machine without a GPU, then the TE backend's CPU tests.
#
#   [TE_PYTHON=python3.12] bash tools/te_cpu_env.sh [VENV_DIR]   # default .te-venv; ~4 GB of wheels, ~10 min on 2 cores
#
# TE_PYTHON (default python3) makes a new VENV_DIR: the compiled extension loads only on that Python's minor version,
# so a bundle for another machine (tools/te_site_bundle.sh) needs that machine's, e.g. python3.12 for the H200.
#
# CUDA 13 throughout: TORCH_VERSION (default 2.11.0, the lent GPU machine's torch) must name a torch whose PyPI Linux wheel
# is a CUDA 13 build (checked once it is installed), and the header and TE core wheels are the CUDA 13 ones;
# TE_VERSION (default 2.20.2) picks TE's release.
# Rerunning it on an existing VENV_DIR skips the compilation unless TE_VERSION or the installed torch changed (the
# torch it was built for: VENV_DIR/te-torch-version); a VENV_DIR that is a file or a non-empty folder other than a
# virtual environment is refused.
#
# TE's PyTorch extension is published as an sdist only (prebuilt wheels come from GitHub, unreachable on compute
# nodes), and it must be compiled against a CUDA build of torch; TE's modules then build with CPU parameters
# (tests/unit_tests/cpu_megatron.py) and megatron-core's TE spec provider works. Steps: CUDA torch from PyPI, the
# CUDA 13 headers the extension includes (crt, cccl) as NVIDIA wheels, TE's Python and core-library wheels, the
# extension compiled from its sdist, then megatron-oellm through tools/install.sh (which keeps this torch).
# Nothing runs on a GPU here; what it checks: tests/unit_tests/models/test_te_specs.py (every compute slot of every
# Qwen card's spec is TE's) and tests/unit_tests/convert/test_convert_megatron_load.py (converted checkpoints load
# into TE-built models at TP=1, TP=2 and EP=2, bit for bit).
set -euo pipefail
# checked before realpath sees them: it would print its own help (or refuse an option) and that text would name the
# new virtual environment, created in the current directory before ~4 GB of downloads
case "${1:-}" in
  -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "${BASH_SOURCE[0]}"; exit 0 ;;
  -*) echo "error: unknown option $1 (usage: [TE_PYTHON=python3.12] bash tools/te_cpu_env.sh [VENV_DIR])" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "error: te_cpu_env.sh takes one VENV_DIR, got $#: $*" >&2; exit 2; }
[ $# -eq 0 ] || [ -n "$1" ] ||
  { echo "error: VENV_DIR is empty (an unset shell variable?); leave it out for .te-venv" >&2; exit 2; }
VENV=$(realpath -m -- "${1:-$(dirname "$0")/../.te-venv}")
# a relative TE_PYTHON names a file under the caller's directory, not under the repository root this script changes to
if [[ "${TE_PYTHON:-}" == */* && "$TE_PYTHON" != /* ]]; then TE_PYTHON="$PWD/$TE_PYTHON"; fi
cd "$(dirname "$0")/.."
TE_VERSION=${TE_VERSION:-2.20.2}
TORCH_VERSION=${TORCH_VERSION:-2.11.0}   # the lent GPU machine's torch; PyPI's Linux wheel of it is built for CUDA 13.0
CUDA_WHEELS="13.0.*"

# `python -m venv` would turn any existing folder into an environment (bin/, lib/, pyvenv.cfg among the user's files)
if [ ! -x "$VENV/bin/python" ]; then
  [ ! -e "$VENV" ] || [ -d "$VENV" ] || { echo "error: VENV_DIR $VENV is a file; name a new folder" >&2; exit 2; }
  [ ! -e "$VENV/pyvenv.cfg" ] ||
    { echo "error: VENV_DIR $VENV is a virtual environment without a working bin/python (its Python moved or was" \
        "removed?): remove $VENV and rerun" >&2; exit 2; }
  [ ! -d "$VENV" ] || [ -z "$(ls -A -- "$VENV")" ] ||
    { echo "error: VENV_DIR $VENV is a folder that is not a virtual environment (no bin/python); name a new" \
        "or empty folder" >&2; exit 2; }
fi
# The extension is compiled for the venv's CPython ABI: TE_PYTHON names the target's Python (python3.12 for the H200).
# Checked before the venv is made: a missing or too old Python was found only by `-m venv` (a bash error) or by
# install.sh at the very end, after ~4 GB of downloads and the compilation.
minor='import sys; print("%d.%d" % sys.version_info[:2])'
if [ ! -x "$VENV/bin/python" ] || [ -n "${TE_PYTHON:-}" ]; then  # an existing venv without TE_PYTHON keeps its own
  want=$("${TE_PYTHON:-python3}" -c "$minor" 2>/dev/null) ||
    { echo "error: TE_PYTHON=${TE_PYTHON:-python3} does not run; name a Python, e.g. TE_PYTHON=python3.12" >&2
      exit 2; }
  [[ $want =~ ^[0-9]+\.[0-9]+$ ]] && [[ ${want%%.*} -gt 3 || ( ${want%%.*} -eq 3 && ${want#*.} -ge 11 ) ]] ||
    { echo "error: TE_PYTHON=${TE_PYTHON:-python3} is Python $want; megatron-oellm needs 3.11 or later" >&2; exit 2; }
fi
# a venv an interrupted first run (or a Python without ensurepip) left without its activate script cannot be used
if [ -x "$VENV/bin/python" ] && [ ! -f "$VENV/bin/activate" ]; then
  echo "error: $VENV is an incomplete virtual environment (no bin/activate: an interrupted first run, or a Python" \
    "without ensurepip, e.g. Debian's without python3-venv): remove $VENV and rerun" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  "${TE_PYTHON:-python3}" -m venv "$VENV" ||
    { echo "error: ${TE_PYTHON:-python3} -m venv $VENV failed (above); remove $VENV and rerun once fixed" >&2; exit 2; }
elif [ -n "${TE_PYTHON:-}" ]; then  # an existing venv keeps its own Python: say so rather than build for another one
  have=$("$VENV/bin/python" -c "$minor")
  [ "$want" = "$have" ] ||
    { echo "error: $VENV has Python $have but TE_PYTHON is $want: remove $VENV or name another VENV_DIR" >&2; exit 2; }
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
# A find-links folder with a local +cpu torch wheel would win over PyPI's CUDA wheel of the same version (an index-url
# pointing at a CPU-only index would too: the check below stops there).
export PIP_FIND_LINKS="" PIP_DISABLE_PIP_VERSION_CHECK=1
PIP=(python -m pip install -q)
"${PIP[@]}" "numpy<2.4" "torch==${TORCH_VERSION}" setuptools wheel pybind11 ninja
python - <<'PYCHECK'
import sys, torch
if torch.version.cuda is None or not torch.version.cuda.startswith("13."):
    sys.exit(f"torch {torch.__version__} is not a CUDA 13 build; TE's extension cannot be compiled against it")
PYCHECK
"${PIP[@]}" "nvidia-cuda-crt==${CUDA_WHEELS}" "nvidia-cuda-cccl==${CUDA_WHEELS}" "nvidia-cuda-nvcc==${CUDA_WHEELS}"
"${PIP[@]}" --no-deps "transformer_engine==${TE_VERSION}" "transformer_engine_cu13==${TE_VERSION}"
"${PIP[@]}" einops onnx onnxscript pydantic importlib-metadata nvdlfw-inspect "nvidia-cudnn-frontend>=1.29"

# The extension is compiled against the torch installed above and loads only beside it: it is rebuilt for another
# TE_VERSION, and for another torch (a rerun with another TORCH_VERSION), whose version each build records here.
TE_TORCH_RECORD="$VENV/te-torch-version"
TORCH_INSTALLED=$(python -c 'import importlib.metadata as m; print(m.version("torch"))')
if [ "$(python -c 'import importlib.metadata as m; print(m.version("transformer_engine_torch"))' 2>/dev/null)" \
     != "${TE_VERSION}" ] || [ "$(cat "$TE_TORCH_RECORD" 2>/dev/null)" != "$TORCH_INSTALLED" ]; then
  SDIST_DIR="$VENV/te-sdist"
  mkdir -p "$SDIST_DIR"
  python -m pip download -q --no-deps --no-build-isolation --no-binary :all: -d "$SDIST_DIR" \
    "transformer_engine_torch==${TE_VERSION}"
  tar -xzf "$SDIST_DIR/transformer_engine_torch-${TE_VERSION}.tar.gz" -C "$SDIST_DIR"
  # FORCE_BUILD: skip the GitHub wheel lookup; USE_NVIDIA_WHEELS: headers from the nvidia-* wheels, not a toolkit;
  # NO_LOCAL_VERSION: inside a git checkout (the default VENV_DIR is in this one) TE appends that checkout's commit
  # to the extension's version (2.20.2+1e5762e), and TE's import then refuses it beside the 2.20.2 core wheel.
  NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_BUILD_USE_NVIDIA_WHEELS=1 NVTE_NO_LOCAL_VERSION=1 MAX_JOBS=$(nproc) \
    "${PIP[@]}" --no-build-isolation --no-deps "$SDIST_DIR/transformer_engine_torch-${TE_VERSION}"
  echo "$TORCH_INSTALLED" > "$TE_TORCH_RECORD"
fi

# TE's core library links NCCL, cuDNN and the CUDA 13 libraries, which the wheels keep in their own folders.
NVIDIA_ROOT=$(python -c "import nvidia; print(list(nvidia.__path__)[0])")
LIBS=$(find "$NVIDIA_ROOT" -maxdepth 2 -type d -name lib | sort | paste -sd:)
LINE="export LD_LIBRARY_PATH=\"${LIBS}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"  # TE's libraries (te_cpu_env.sh)"
grep -qxF "$LINE" "$VENV/bin/activate" || echo "$LINE" >> "$VENV/bin/activate"
# shellcheck disable=SC1091
. "$VENV/bin/activate"

PYTHON="$VENV/bin/python" bash tools/install.sh dev,hf,gdn
python -c "import importlib.metadata as m, torch, transformer_engine.pytorch
print('transformer_engine', m.version('transformer_engine'), '| torch', torch.__version__)"
python -m pytest -q -p no:cacheprovider tests/unit_tests/models/test_te_specs.py \
  tests/unit_tests/convert/test_convert_megatron_load.py

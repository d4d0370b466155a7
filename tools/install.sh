#!/usr/bin/env bash
# Install megatron-oellm and what it needs into the current Python (3.11 or 3.12), idempotently.
#
#   bash tools/install.sh [EXTRAS]      EXTRAS defaults to "dev,hf" (add gdn, te, plot as needed)
#   PYTHON=/path/to/python3.12 bash tools/install.sh ...   installs into that interpreter (default python3)
#
# Python 3.11: megatron-core 0.19.2 declares >= 3.12 but only needs typing.override, which megatron.oellm provides;
# so we install torch and numpy<2.4 first, then megatron-core with --ignore-requires-python.
# torch: an importable torch (a cluster container's, a venv's) is kept as it is, and so is an importable Triton.
# An installed torch that does not import (ImportError: libcudnn.so.9 on a login node) is refused, naming the error.
# Without one: PyPI's Linux wheel of torch 2.13.0, x86_64 and aarch64 (GH200) alike, is a CUDA 13.0 build (with
# ~3 GB of nvidia-* wheels) that needs an NVIDIA driver >= 580. So a machine where nvidia-smi lists no GPU gets the
# CPU build 2.13.0+cpu (from the configured indexes or find-links if one has it, else from TORCH_CPU_INDEX_URL,
# PyTorch's CPU index); a GPU node gets PyPI's CUDA 13.0 build, refused below driver 580, and checked to be a CUDA
# build. TORCH_INDEX_URL names another index for a GPU node (e.g. a CUDA 12 build of PyTorch's for an older driver).
# A CPU build of torch on a node whose nvidia-smi lists a GPU (a venv made on a GPU-less login node) is refused.
# pip runs only for what tools/install_needs.py finds missing: once an environment is complete, the script (and so
# the README's two commands) runs on a compute node without a package index. This checkout on PYTHONPATH counts as
# installed (an air-gapped node with the offline site bundle: README, "Air-gapped nodes"), though pip then installs no
# oellm command (PYTHON -m megatron.oellm runs it, the "nothing to install" line says). A failing pip gets a line
# after its messages: the offline way (no package index), a virtual environment (PEP 668), or pip's message.
# An environment whose editable megatron-oellm is another checkout's (a project environment several users share) gets
# a warning right before the pip call that re-points that install to this checkout, naming the other one.
# The gdn extra with a Triton in [3.4, 3.7.1) also gets the TileLang set of docker/constraints.txt: on Hopper (H100,
# H200, GH200) fla 0.6.0 refuses its Triton GDN/KDA backward there (wrong gradients, fla issue 640) and runs its
# TileLang one instead; it is installed without a GPU in sight too, as a shared environment is often filled on a
# GPU-less login node, but not on a node whose listed GPUs are all of another generation.
# The te extra keeps a Transformer Engine that imports (a cluster container's) and is otherwise refused: TE's PyTorch
# extension is an sdist compiled against the installed torch with CUDA headers (tools/te_cpu_env.sh has the steps).
set -euo pipefail
case "${1:-}" in -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "${BASH_SOURCE[0]}"; exit 0 ;; esac
# checked before any download: a second word (`install.sh dev hf`) would otherwise be dropped silently
[ $# -le 1 ] ||
  { echo "error: install.sh takes one comma-separated EXTRAS argument (e.g. dev,hf), got $#: $*" >&2; exit 2; }
PY="${PYTHON:-python3}"
# a relative PYTHON (.venv/bin/python) names a file under the caller's directory, not under the repository root this
# script changes to: make it absolute first (not resolving symlinks: a venv's python is one)
if [[ "$PY" == */* && "$PY" != /* ]]; then PY="$PWD/$PY"; fi
command -v "$PY" >/dev/null ||
  { echo "error: install.sh: no Python '$PY' (PYTHON names the interpreter to install into, e.g. PYTHON=python3.12)" >&2
    exit 2; }
# in syntax every Python 3 (and 2) reads: the checks below use f-strings, a Python 2 stopped on them with a traceback,
# and a program that is no Python (PYTHON=/bin/true) "installed" nothing with exit status 0
version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
[[ $version =~ ^[0-9]+\.[0-9]+$ ]] ||
  { echo "error: install.sh: PYTHON=$PY does not run as a Python; name one, e.g. PYTHON=python3.12" >&2; exit 2; }
[[ ${version%%.*} -gt 3 || ( ${version%%.*} -eq 3 && ${version#*.} -ge 11 ) ]] ||
  { echo "error: install.sh: megatron-oellm needs Python >= 3.11, PYTHON=$PY is $version; name another with" \
      "PYTHON=python3.12" >&2; exit 2; }
cd "$(dirname "$0")/.."
EXTRAS="${1:-dev,hf}"
# pip's messages (stderr) are shown as they come and read for the cause of a failure: one line after them names
# the offline way where they name an unreachable index or connection, the README's virtual environment where the
# Python refuses pip installs (PEP 668: Debian's /usr/bin/python3), pip's own message otherwise ("No module named pip")
PIP_INDEX_FAILURE='from versions: none|NewConnectionError|Failed to establish a new connection|Max retries exceeded'
PIP_INDEX_FAILURE+='|name resolution|Name or service not known|Network is unreachable|timed out|ProxyError|SSLError'
PIP_INDEX_FAILURE+='|Could not fetch URL'
pip_install() {
  local log messages status=0
  log=$(mktemp) || return 1
  # pip's messages go to stderr as they come (a long download, index retries) and into $log, read for the cause
  { "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1 >&3 | tee "$log" >&2; } 3>&1 || status=$?
  messages=$(cat "$log")
  rm -f "$log"
  [ "$status" -ne 0 ] || return 0
  if grep -q 'externally-managed-environment' <<< "$messages"; then
    echo "error: install.sh: pip install failed: ${PY} is a distribution's Python that refuses pip installs" \
         "(\"externally managed\", PEP 668); make a virtual environment first and rerun in it:" \
         "python3 -m venv .venv && . .venv/bin/activate (README.md, \"Two commands on a fresh machine\")" >&2
  elif grep -q -E "$PIP_INDEX_FAILURE" <<< "$messages"; then
    echo "error: install.sh: pip install failed; no package index reachable? use the offline site bundle instead" \
         "(README.md, \"Air-gapped nodes\")" >&2
  else
    echo "error: install.sh: pip install failed: pip's message above says why" >&2
  fi
  return "$status"
}
# The line of a failed import's output that names its error (warnings may follow it), else its last line, else the
# failed exit status: quoted in a refusal
import_error_line() {
  local line
  line=$(grep -E 'Error|error' <<< "$1" | tail -n 1 || true)
  line=${line:-$(tail -n 1 <<< "$1")}
  echo "${line:-no message: the import exited non-zero}"
}
TORCH_VERSION=2.13.0
TORCH_CUDA13_DRIVER=580
# EXTRAS is checked against setup.py before anything is installed: pip only warns about an extra the package lacks
# (a typo such as "tee") and installs without it, after minutes of downloads.
# It is printed back as pip spells it (`GDN` and ` gdn` are `gdn`), so the checks below see one spelling.
EXTRAS=$("$PY" - "$EXTRAS" <<'PYCHECK'
import sys
sys.path.insert(0, "tools")
from install_needs import checked_extras
try:
    print(",".join(checked_extras(sys.argv[1])))
except ValueError as error:
    print(f"error: install.sh: {error}", file=sys.stderr)
    sys.exit(2)
PYCHECK
)
if [[ ",${EXTRAS}," == *,te,* ]]; then
  if ! TE_OUTPUT=$("$PY" -c "import transformer_engine.pytorch" 2>&1); then
    TE_ERROR=$(import_error_line "$TE_OUTPUT")
    if grep -q -E 'libcuda|libnvidia-' <<< "$TE_OUTPUT"; then
      echo "error: install.sh: Transformer Engine is installed but needs the NVIDIA driver to import ($TE_ERROR):" \
           "rerun on a GPU node (in a container: apptainer exec --nv), or without te here" >&2
    else
      echo "error: install.sh: Transformer Engine does not import ($TE_ERROR), and install.sh does not build it:" \
           "its PyTorch extension is an sdist that must compile against this torch with CUDA headers. Use the" \
           "cluster container's TE (the Dockerfile's base image has one), or build it as tools/te_cpu_env.sh does;" \
           "then rerun without te, or with te to keep it" >&2
    fi
    exit 2
  fi
  EXTRAS=$(sed -e 's/^te,//; s/,te$//; s/,te,/,/; s/^te$//' <<< "$EXTRAS")
  echo "install.sh: keeping the Transformer Engine that imports here (the te extra installs nothing more)"
fi
# the GPUs' compute capabilities: where nvidia-smi lists GPUs and none is Hopper's 9.x (an A100 node), the TileLang
# set fla needs only on Hopper is left out (a login node without GPUs gets it, for the Hopper nodes)
CAPABILITIES=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
               grep -E '^ *[0-9]+\.[0-9]+ *$' || true)
NO_HOPPER=$([ -n "$CAPABILITIES" ] && ! grep -q -E '^ *9\.' <<< "$CAPABILITIES" && echo --no-hopper || true)
# only a version counts: nvidia-smi prints its failures ("couldn't communicate with the NVIDIA driver", "No devices
# were found") on stdout, and a node where it fails has no GPU torch could use
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null |
         grep -m 1 -E '^[0-9]+(\.[0-9]+)*$' || true)
# set where that driver runs CUDA 13, and so PyPI's torch build
DRIVER_CUDA13=$([[ "${DRIVER%%.*}" =~ ^[0-9]+$ ]] && [ "${DRIVER%%.*}" -ge "$TORCH_CUDA13_DRIVER" ] && echo 1 || true)
# A torch that is installed but does not import (a CUDA build on a login node without its cuDNN: ImportError
# libcudnn.so.9) is refused as it is: pip would install another over it, hiding why it failed.
TORCH_IMPORTS=1
TORCH_OUTPUT=$("$PY" -c "import torch" 2>&1) || TORCH_IMPORTS=""
if [ -z "$TORCH_IMPORTS" ] && "$PY" -c "import importlib.metadata as m; m.version('torch')" 2>/dev/null; then
  echo "error: install.sh: the torch of ${PY} is installed but does not import" \
       "($(import_error_line "$TORCH_OUTPUT")): fix what the error names (a module to load, LD_LIBRARY_PATH) or" \
       "reinstall it, then rerun; install.sh does not install another torch over it" >&2
  exit 1
fi
if [ -n "$TORCH_IMPORTS" ]; then
  if [ -n "$DRIVER" ] && ! "$PY" -c "import sys, torch; sys.exit(torch.version.cuda is None)" 2>/dev/null; then
    if [ -n "$DRIVER_CUDA13" ]; then
      CUDA_TORCH="'torch==${TORCH_VERSION}+cu130' --index-url https://download.pytorch.org/whl/cu130"
    else  # a CUDA 13 build would not run on this driver
      CUDA_TORCH="'torch==${TORCH_VERSION}+cu1XX' --index-url https://download.pytorch.org/whl/cu1XX, cu1XX being a"
      CUDA_TORCH+=" CUDA this driver supports (nvidia-smi's \"CUDA Version\"; CUDA 13 needs a driver >="
      CUDA_TORCH+=" ${TORCH_CUDA13_DRIVER}), the index TORCH_INDEX_URL names for install.sh"
    fi
    echo "error: install.sh: this Python's torch $("$PY" -c 'import torch; print(torch.__version__)') is a CPU" \
         "build, and this node has NVIDIA GPUs (driver ${DRIVER}): it cannot train here. An environment made on a" \
         "GPU-less login node gets the CPU build. Replace it from a login node with internet:" \
         "${PY} -m pip install ${CUDA_TORCH}" \
         "(pip removes the CPU build only once the CUDA wheel is in hand), or use the cluster container's torch;" \
         "never uninstall it on a compute node without internet first: nothing could take its place there" >&2
    exit 1
  fi
else
  if [ -z "$DRIVER" ]; then
    echo "install.sh: no NVIDIA GPU listed by nvidia-smi: installing the CPU build torch==${TORCH_VERSION}+cpu"
    pip_install "torch==${TORCH_VERSION}+cpu" "numpy<2.4" 2>/dev/null ||
      pip_install --extra-index-url "${TORCH_CPU_INDEX_URL:-https://download.pytorch.org/whl/cpu}" \
        "torch==${TORCH_VERSION}+cpu" "numpy<2.4"
  else
    if [ -z "${TORCH_INDEX_URL:-}" ] && [ -z "$DRIVER_CUDA13" ]; then
      echo "error: PyPI's torch==${TORCH_VERSION} is a CUDA 13.0 build, which needs an NVIDIA driver >=" \
           "${TORCH_CUDA13_DRIVER}; this node's is ${DRIVER}. Use the cluster container's torch, or set" \
           "TORCH_INDEX_URL to a PyTorch index built for this driver's CUDA (https://download.pytorch.org/whl/cu1XX)" >&2
      exit 1
    fi
    echo "install.sh: NVIDIA driver ${DRIVER}: installing a CUDA build of torch==${TORCH_VERSION}"
    pip_install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION}" "numpy<2.4"
    "$PY" -c "import sys, torch; sys.exit(torch.version.cuda is None)" ||
      { echo "error: a CPU build of torch was installed on a GPU node (a find-links folder or index holding" \
             "torch ${TORCH_VERSION}+cpu wins over PyPI's CUDA wheel): uninstall it and rerun with PIP_FIND_LINKS=''" >&2
        exit 1; }
  fi
fi
"$PY" -c "import triton" 2>/dev/null || pip_install triton
NEEDS=$("$PY" tools/install_needs.py "$EXTRAS" $NO_HOPPER)
if [ -z "$NEEDS" ]; then
  PROVIDED=$("$PY" tools/install_needs.py "$EXTRAS" --provided-by)
  # pip installs the `oellm` command with the package: a checkout that only imports from the path has none
  COMMAND=$([ "$PROVIDED" != PYTHONPATH ] ||
            echo "; with the checkout on PYTHONPATH there is no oellm command: run ${PY} -m megatron.oellm")
  echo "install.sh: nothing to install: megatron-core 0.19.2, this checkout (${PROVIDED}) and the requirements" \
       "of ${EXTRAS:-setup.py} are in place${COMMAND}"
fi
if grep -q '^megatron-core' <<< "$NEEDS"; then
  pip_install "numpy<2.4"  # first: megatron-core's own numpy requirement would admit 2.4
  pip_install --ignore-requires-python "megatron-core==0.19.2"
fi
if grep -q '^-e ' <<< "$NEEDS"; then
  # in an environment several checkouts share (a project's, on GPFS), this re-points its editable megatron-oellm, and
  # so the code everyone's jobs run, to this checkout: said right before, once nothing stops the install (a warning,
  # not a refusal: a fresh clone's test run in an environment made from another clone must go on)
  "$PY" tools/install_needs.py "$EXTRAS" --warn-repoint
  # Without --ignore-requires-python here: it would also admit releases of other dependencies that need 3.12 (e.g. a
  # contourpy source build for the plot extra). The installed megatron-core already satisfies the pin.
  pip_install -e ".${EXTRAS:+[$EXTRAS]}"
fi
TILELANG=$(grep -v -E '^(megatron-core|-e )' <<< "$NEEDS" || true)
if [ -n "$TILELANG" ]; then
  echo "install.sh: a Triton whose GDN/KDA backward fla 0.6.0 refuses on Hopper: installing" $TILELANG
  # shellcheck disable=SC2086  # one requirement per word
  pip_install $TILELANG
fi
# The import check prints the versions only: megatron-core's UserWarnings about packages a CPU or login node lacks
# (Transformer Engine, Apex: ten lines) are `oellm doctor`'s to report, with what they mean for a run.
"$PY" -W ignore::UserWarning -c "import megatron.core, megatron.oellm; from megatron.oellm.patches.release import megatron_core_release as core
print('megatron-oellm', megatron.oellm.__version__, '+ megatron-core', core())"

#!/usr/bin/env bash
# Transformer Engine as an offline site bundle for a GPU machine without a package index (air-gapped compute nodes,
# the project's H200 device), cut into parts that fit a size-limited transfer.
#
#   bash tools/te_site_bundle.sh VENV_DIR [OUT_DIR] [PART_MIB]   # default OUT_DIR .bundle/te-parts, PART_MIB 61
#
# VENV_DIR is a virtual environment made by tools/te_cpu_env.sh with the target's Python (the extension module is
# compiled for one CPython ABI) and a torch of the target's version and CUDA major. The bundle holds TE's Python
# package with its core library and compiled PyTorch extension, plus TE's pure-Python and small compiled
# requirements that a stock CUDA torch image lacks (pydantic, nvdlfw-inspect, cudnn-frontend); the CUDA libraries
# themselves (cuBLAS, cuDNN, NCCL) come from the target's torch wheels. On the target:
#
#   cd OUT_DIR && sha256sum -c te-site.sha256 &&   # catches a part lost or cut on the way
#     rm -rf /tmp/te-site && mkdir -p /tmp/te-site &&   # a fresh folder: over an earlier bundle, both would mix
#     awk '{print $2}' te-site.sha256 | xargs cat | tar -xJ -C /tmp/te-site
#   export PYTHONPATH=/tmp/te-site${PYTHONPATH:+:$PYTHONPATH}
#
# Only the parts te-site.sha256 lists are joined, in its order: a part left in OUT_DIR by an earlier, longer bundle
# (te-site.tar.xz.part-af beside a new five-part one) is neither checked nor unpacked.
# TE's core library is ~340 MB of CUDA fat binaries that xz shrinks only to ~250 MB, hence the parts.
# 61 MiB parts plus a ~2 MB working tree stay under the project device's 64 MiB a call, and TE 2.20.2's last part
# (~15 MiB) then travels with the ~45 MiB site bundle: five calls in all.
set -euo pipefail
USAGE="usage: bash tools/te_site_bundle.sh VENV_DIR [OUT_DIR] [PART_MIB]"
# checked before realpath sees them: it would print its own help (or refuse an option) in place of the VENV_DIR
case "${1:-}" in
  -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "${BASH_SOURCE[0]}"; exit 0 ;;
  -*) echo "error: unknown option $1 ($USAGE)" >&2; exit 2 ;;
esac
[ $# -le 3 ] || { echo "error: te_site_bundle.sh takes at most 3 arguments, got $#: $* ($USAGE)" >&2; exit 2; }
[ -n "${1:-}" ] || { echo "error: no VENV_DIR ($USAGE)" >&2; exit 2; }
VENV=$(realpath -m -- "$1")  # -m: a missing folder is refused below, naming te_cpu_env.sh, not by realpath
OUT=$(realpath -m -- "${2:-$(dirname "$0")/../.bundle/te-parts}")
PART_MIB=${3:-61}
# checked before anything is removed or compressed: split would refuse it only after minutes of xz, with the earlier
# bundle's parts already deleted
[[ "$PART_MIB" =~ ^[1-9][0-9]{0,6}$ ]] ||  # at most 7 digits (9.5 TiB a part): more failed in split, after xz
  { echo "error: PART_MIB must be a whole number of MiB from 1 to 9999999, got '$PART_MIB' (e.g. 61)" >&2; exit 2; }
[ $# -ne 2 ] || [ -n "$2" ] ||  # "" before a PART_MIB stands for the default folder (the arguments are positional)
  { echo "error: OUT_DIR is empty (an unset shell variable?); leave it out for .bundle/te-parts ($USAGE)" >&2; exit 2; }
# also before the earlier bundle is removed: without xz the pipeline below would fail only after deleting its parts
for tool in tar xz split sha256sum; do
  command -v "$tool" >/dev/null ||
    { echo "error: $tool is not on PATH; it is needed to pack and check the bundle (xz: the xz-utils package)" >&2
      exit 2; }
done
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "error: $VENV has no bin/python (make it with tools/te_cpu_env.sh)" >&2; exit 2; }
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
ABI=$("$PY" -c "import sys; print(f'cp{sys.version_info.major}{sys.version_info.minor}')")
ls "$SITE"/transformer_engine/wheel_lib/transformer_engine_torch.cpython-"${ABI#cp}"-*.so >/dev/null 2>&1 ||
  { echo "error: no transformer_engine_torch compiled for ${ABI} in $SITE (run tools/te_cpu_env.sh $VENV)" >&2
    exit 2; }

TE_VERSION=$("$PY" -c "import importlib.metadata as m; print(m.version('transformer_engine'))" 2>/dev/null) ||
  { echo "error: no transformer_engine distribution in $VENV (run tools/te_cpu_env.sh $VENV)" >&2; exit 2; }
TORCH_VERSION=$("$PY" -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null) ||
  { echo "error: no torch in $VENV: the extension's torch version cannot be reported" >&2; exit 2; }

PACKAGES=(transformer_engine pydantic pydantic_core annotated_types typing_inspection nvdlfw_inspect cudnn)
DISTRIBUTIONS=(transformer_engine "transformer_engine_cu[0-9]*" transformer_engine_torch pydantic pydantic_core
               annotated_types typing_inspection nvdlfw_inspect nvidia_cudnn_frontend)
MEMBERS=()
for package in "${PACKAGES[@]}"; do
  [ -d "$SITE/$package" ] || { echo "error: $SITE/$package missing" >&2; exit 2; }
  MEMBERS+=("$package")
done
for distribution in "${DISTRIBUTIONS[@]}"; do
  # shellcheck disable=SC2206  # the CUDA-major pattern must glob
  found=("$SITE"/${distribution}-*.dist-info)
  [ -d "${found[0]}" ] || { echo "error: no ${distribution} dist-info in $SITE" >&2; exit 2; }
  MEMBERS+=("$(basename "${found[0]}")")
done

mkdir -p "$OUT"
# packed into a temporary folder inside OUT_DIR (one file system: each rename below is atomic); the earlier bundle's
# parts and list stay whole until the new ones are complete, and a run that fails or is interrupted (a full disk,
# Ctrl-C) removes the folder and leaves them as they were
STAGE=$(mktemp -d "$OUT/.te-site.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tar -C "$SITE" --exclude=__pycache__ -cf - "${MEMBERS[@]}" | xz -9e -T0 |
  split -b "${PART_MIB}M" - "$STAGE/te-site.tar.xz.part-"
(cd "$STAGE" && sha256sum te-site.tar.xz.part-* > te-site.sha256)
# the earlier list goes first and the new one comes last: a stop between the renames leaves parts without a list
# (sha256sum -c says so), never a list that passes over a mix of two bundles' parts
rm -f "$OUT"/te-site.sha256 "$OUT"/te-site.tar.xz.part-*
mv -f "$STAGE"/te-site.tar.xz.part-* "$OUT"/
mv -f "$STAGE"/te-site.sha256 "$OUT"/te-site.sha256
echo "transformer_engine ${TE_VERSION} for ${ABI}, torch ${TORCH_VERSION}: $(ls "$OUT"/te-site.tar.xz.part-* | wc -l)" \
     "parts of <= ${PART_MIB} MiB in ${OUT}"
ls -l "$OUT"

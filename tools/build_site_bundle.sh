#!/usr/bin/env bash
# Build an offline "site bundle": the Python packages a GPU node needs beyond its container, unpacked from wheels
# into one folder and packed as .bundle/site-<tag>.tar.xz. Untar it anywhere and put the folder on PYTHONPATH.
# Used for air-gapped compute nodes and for the project's lent GPU machine (no internet there).
#
#   tools/build_site_bundle.sh [--python-version 3.12] [--arch x86_64|aarch64|arm64] [--out .bundle]
#   (--out is read from the current folder: run it from the repository root for the .bundle the other tools use)
#
# --python-version is the node's MAJOR.MINOR, 3.11 or later; on 3.11 megatron-core 0.19.2 (declared >= 3.12, with
# cp311 wheels) is fetched with --ignore-requires-python, as tools/install.sh installs it.
# On the node, check, then unpack into a fresh folder named after the bundle (unpacked over an earlier bundle, the
# two would mix: a package's files and dist-info of both versions), only when the check passes:
#   sha256sum -c site-cp312.tar.xz.sha256 &&   # catches a bundle cut or changed on the way
#     rm -rf /tmp/site-cp312 && mkdir -p /tmp/site-cp312 && tar -xJf site-cp312.tar.xz -C /tmp/site-cp312 &&
#     export PYTHONPATH=/tmp/site-cp312
#   python3 -m pip check   # names a requirement the node lacks (BUNDLE_REQUIRES.txt lists them all)
# Every run downloads into an emptied wheels folder, so a wheel left by an earlier run with other pins never
# lands in the bundle. It empties only wheels-<tag> and site-<tag> folders of its own (a mark inside) or new or empty
# ones: an --out holding a user's own site-cp312 (e.g. --out /tmp) is refused.
# The wheels are compiled for one architecture: x86_64 (default: MareNostrum 5, the lent H200) writes
# site-<tag>.tar.xz, aarch64 (Jupiter's GH200) site-<tag>-aarch64.tar.xz; tilelang's and z3's aarch64 wheels need
# glibc >= 2.34 (manylinux_2_34).
set -euo pipefail
PYVER=3.12
ARCH=x86_64
OUT=.bundle
USAGE="usage: tools/build_site_bundle.sh [--python-version 3.12] [--arch x86_64|aarch64|arm64] [--out .bundle]"
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version|--arch|--out)
      [[ $# -ge 2 && -n $2 && $2 != -* ]] || { echo "error: $1 needs a value; $USAGE" >&2; exit 2; }
      case "$1" in --python-version) PYVER=$2 ;; --arch) ARCH=$2 ;; --out) OUT=$2 ;; esac
      shift 2 ;;
    -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1; $USAGE" >&2; exit 2 ;;
  esac
done
# checked before anything is downloaded: 3.12.1 would name the bundle site-cp3121, 3.10 fails only at import
[[ "$PYVER" =~ ^3\.([1-9][0-9]?)$ ]] && [ "${BASH_REMATCH[1]}" -ge 11 ] ||  # 3.011 would name it site-cp3011
  { echo "error: --python-version must be the node's MAJOR.MINOR, 3.11 or later, got '$PYVER' (e.g. 3.12)" >&2
    exit 2; }
# checked before minutes of downloads: the bundle is packed with tar and xz and checked with sha256sum
for tool in tar xz sha256sum; do
  command -v "$tool" >/dev/null ||
    { echo "error: $tool is not on PATH; it is needed to pack and check the bundle (xz: the xz-utils package)" >&2
      exit 2; }
done
[ ! -e "$OUT" ] || [ -d "$OUT" ] ||
  { echo "error: --out $OUT is a file; give the folder the bundle goes into (default .bundle, under the current" \
      "folder)" >&2; exit 2; }
TAG="cp${PYVER/./}"
case "$ARCH" in
  x86_64) PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
                     manylinux1_x86_64) ;;
  aarch64|arm64) ARCH=aarch64  # arm64: Docker's and the image names' word for it
           PLATFORMS=(manylinux_2_34_aarch64 manylinux_2_28_aarch64 manylinux_2_27_aarch64 manylinux_2_17_aarch64
                      manylinux2014_aarch64)
           TAG="$TAG-aarch64" ;;
  *) echo "error: unknown architecture '$ARCH' (x86_64, or aarch64 / arm64 for Jupiter's GH200)" >&2; exit 2 ;;
esac
# megatron-core declares Python >= 3.12 but needs only typing.override, which megatron.oellm provides on 3.11:
# Requires-Python is ignored for it alone, so a 3.12-only release of another package is still refused
MEGATRON_CORE="megatron-core==0.19.2"
PACKAGES=(
  "fla-core==0.6.0"
  "flash-linear-attention==0.6.0"
  "tilelang==0.1.15"
  "apache-tvm-ffi==0.1.12"
  "torch-c-dlpack-ext==0.1.5"
  "z3-solver==4.15.4.0"
)
WHEELS="$OUT/wheels-$TAG"
SITE="$OUT/site-$TAG"
# both folders are emptied on every run: only ones this script made (its mark inside, left out of the bundle), new
# or empty ones. With --out /tmp or --out ~, site-<tag> may be the user's own unpacked bundle, the folder the header
# tells to unpack into; checked for both before anything is downloaded
MARK=.oellm-site-bundle-work
for folder in "$WHEELS" "$SITE"; do
  if [ -e "$folder" ] && { [ ! -d "$folder" ] || { [ -n "$(ls -A "$folder" 2>/dev/null)" ] &&
                                                    [ ! -e "$folder/$MARK" ]; }; }; then
    echo "error: $folder holds files and no mark of this script (it empties that folder on each run); give another" \
         "--out, or, if an earlier version of this script made it, remove it: rm -rf $folder" >&2
    exit 2
  fi
done
# Empty the folder $1 and mark it as this script's. A failed step stops the run in one line naming the folder: an
# `a && b` list does not stop a `set -e` script, and the files rm left (another user's, an NFS .nfsXXXX of an open
# file) would land in the bundle.
fresh_folder() {
  local failure
  if ! failure=$({ rm -rf "$1" && mkdir -p "$1" && touch "$1/$MARK"; } 2>&1); then
    echo "error: cannot empty and remake $1 ($(head -1 <<< "$failure")); remove it by hand or give another" \
         "--out" >&2
    exit 1
  fi
}
fresh_folder "$WHEELS"
DOWNLOAD=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp
          "${PLATFORMS[@]/#/--platform=}" --platform any -d "$WHEELS")
"${DOWNLOAD[@]}" --ignore-requires-python "$MEGATRON_CORE"
"${DOWNLOAD[@]}" "${PACKAGES[@]}"
fresh_folder "$SITE"
for wheel in "$WHEELS"/*.whl; do
  python3 -m zipfile -e "$wheel" "$SITE"
done
ls "$WHEELS" > "$SITE/BUNDLE_CONTENTS.txt"
# what the bundled packages and megatron-oellm's checkout need and the bundle does not carry: the node's Python
# must have it
python3 "$(dirname "$0")/bundle_requirements.py" "$SITE" --python-version "$PYVER" --arch "$ARCH" --with-checkout \
  > "$SITE/BUNDLE_REQUIRES.txt"
BUNDLE="site-$TAG.tar.xz"
# packed and checksummed under temporary names beside the bundle (one file system: each rename below is atomic);
# the earlier bundle and its checksum stay whole until both new files are complete, and a run that fails or is
# interrupted (a full disk, Ctrl-C) removes its temporary files and leaves them as they were
PARTIAL="$OUT/.$BUNDLE.$$.partial"
trap 'rm -f "$PARTIAL" "$PARTIAL.sha256"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tar -C "$SITE" --exclude="./$MARK" -cf - . | xz -9 -T0 > "$PARTIAL"
SUM=$(sha256sum < "$PARTIAL")
echo "${SUM%% *}  $BUNDLE" > "$PARTIAL.sha256"
# the earlier checksum goes first: a stop between the renames leaves a bundle without a checksum file (sha256sum -c
# says so), never one whose checksum file names another archive's sum
rm -f "$OUT/$BUNDLE.sha256"
mv -f "$PARTIAL" "$OUT/$BUNDLE"
mv -f "$PARTIAL.sha256" "$OUT/$BUNDLE.sha256"
echo "wrote $OUT/$BUNDLE ($(du -h "$OUT/$BUNDLE" | cut -f1)) with: $(tr '\n' ' ' < "$SITE/BUNDLE_CONTENTS.txt")"
echo "the node's Python must provide (BUNDLE_REQUIRES.txt in the bundle; check a node with" \
  "PYTHONPATH=<unpacked bundle> python3 -m pip check): $(cut -d' ' -f1 "$SITE/BUNDLE_REQUIRES.txt" | tr '\n' ' ')"

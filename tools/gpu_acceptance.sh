#!/bin/bash
# One-GPU acceptance stages: fla's GDN kernel vs the naive recurrence (kernel), the Qwen3.5 proxy trained on offline
# real text with save + resume and its log turned into a table by `oellm table`, plus a truncated copy (train), and
# `oellm bench` (bench). Everything lands in OUT_DIR; the last lines printed are the summary.
#
#   tools/gpu_acceptance.sh OUT_DIR [kernel|train|bench|all] [BENCH_MBS]   # needs megatron-core, fla, tilelang
#
# Each stage fits one 10-minute device call. Kernel caches: fla's Triton kernels autotune and TileLang JIT-compiles
# on first use, which took over 100 s for one small GDN forward + backward on a fresh H200 machine. The caches
# (Triton kernels + autotuning results, TileLang kernels) are read from .bundle/kernel-cache.tar.xz when present and
# written to OUT_DIR/kernel-cache.tar.xz: copy that file to .bundle/ and carry it on the next call.
set -o pipefail
OUT_DIR=${1:?usage: tools/gpu_acceptance.sh OUT_DIR [kernel|train|bench|all] [BENCH_MBS]}
STAGE=${2:-all}
BENCH_MBS=${3:-1,2,4}
CACHE=/tmp/oellm-kernel-cache
mkdir -p "$OUT_DIR" "$CACHE"
[ -f .bundle/kernel-cache.tar.xz ] && tar -xJf .bundle/kernel-cache.tar.xz -C "$CACHE"
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export TRITON_CACHE_DIR="$CACHE/triton" TRITON_CACHE_AUTOTUNING=1 TILELANG_CACHE_DIR="$CACHE/tilelang"
trap 'tar -C "$CACHE" -cf - . | xz -1 > "$OUT_DIR/kernel-cache.tar.xz"' EXIT
python3 -m megatron.oellm doctor > "$OUT_DIR/doctor.txt" 2>&1

if [ "$STAGE" = kernel ] || [ "$STAGE" = all ]; then
  echo "== fla GDN kernel vs float64 recurrence"
  timeout 500 python3 -m pytest -q -s -p no:cacheprovider tests/unit_tests/layers -m gpu 2>&1 \
    | tee "$OUT_DIR/gdn_kernel.log" | grep -E "relative|passed|failed|Error" | tail -6
fi
if [ "$STAGE" = train ] || [ "$STAGE" = all ]; then
  echo "== Qwen3.5 proxy on offline real text"
  timeout 500 bash tools/proxy_train_stdlib.sh "$OUT_DIR" > "$OUT_DIR/proxy_stdout.log" 2>&1
  tail -3 "$OUT_DIR/proxy_stdout.log"
  head -c "$(( $(wc -c < "$OUT_DIR/train.log") * 2 / 3 ))" "$OUT_DIR/train.log" > "$OUT_DIR/train_truncated.log"
  python3 -m megatron.oellm table "$OUT_DIR/train.log" "$OUT_DIR/train_truncated.log" --gpus-per-node 1 \
    --window 3-30 > "$OUT_DIR/table.md" 2>&1
  cat "$OUT_DIR/table.md"
fi
if [ "$STAGE" = bench ] || [ "$STAGE" = all ]; then
  echo "== oellm bench"
  timeout 500 python3 -m megatron.oellm bench --mbs "$BENCH_MBS" --warmup 2 --steps 6 \
    --output "$OUT_DIR/bench.json" > "$OUT_DIR/bench.log" 2>&1
  tail -25 "$OUT_DIR/bench.log"
fi

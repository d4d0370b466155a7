#!/bin/bash
# One-GPU Qwen3.5 proxy (4 layers at full width, 32 experts: the `oellm recipe ... --local` fit of the MN5 weak-scaling
# recipe) trained on real text built offline (the Python standard library, byte-tokenized), torch backend; saves a
# torch_dist checkpoint at iteration 30, then resumes to 35. Logs go to $1 (default runs/proxy_stdlib).
#
#   tools/proxy_train_stdlib.sh [LOG_DIR]      # needs one GPU, megatron-core 0.19.2, fla on PYTHONPATH
set -o pipefail
LOGS=${1:-runs/proxy_stdlib}
WORK=${OELLM_WORK:-/tmp/oellm-proxy}
mkdir -p "$LOGS" "$WORK"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 CUDA_DEVICE_MAX_CONNECTIONS=1
python3 tools/build_corpus.py --output-prefix "$WORK/corpus/stdlib" --max-mb 16 | tee "$LOGS/corpus.log" || exit 1
MODEL=(--num-layers 8 --hidden-size 2048 --ffn-hidden-size 512 --num-attention-heads 16 --group-query-attention
  --num-query-groups 2 --kv-channels 256 --qk-layernorm --attention-output-gate --position-embedding-type rope
  --rotary-percent 0.25 --rotary-base 10000000 --normalization RMSNorm --norm-epsilon 1e-06 --apply-layernorm-1p
  --swiglu --disable-bias-linear --untie-embeddings-and-output-weights --max-position-embeddings 262144
  --num-experts 32 --moe-ffn-hidden-size 512 --moe-router-topk 8 --moe-router-load-balancing-type global_aux_loss
  --moe-aux-loss-coeff 0.001 --moe-grouped-gemm --moe-shared-expert-intermediate-size 512 --moe-shared-expert-gate
  --hybrid-layer-pattern 'GEGEGE*E' --linear-conv-kernel-dim 4 --linear-key-head-dim 128 --linear-value-head-dim 128
  --linear-num-key-heads 16 --linear-num-value-heads 32)
TRAIN=(--seq-length 4096 --micro-batch-size 1 --global-batch-size 4 --bf16 --moe-token-dispatcher-type alltoall
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --use-distributed-optimizer
  --overlap-grad-reduce --overlap-param-gather --optimizer adam --lr 0.0003 --min-lr 3e-05 --lr-decay-style cosine
  --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0 --init-method-std 0.02 --log-interval 1
  --log-throughput --eval-iters 0 --oellm-backend torch --transformer-impl local
  --data-path "$WORK/corpus/stdlib" --split 100,0,0 --tokenizer-type NullTokenizer --vocab-size 257
  --save "$WORK/checkpoint" --load "$WORK/checkpoint" --ckpt-format torch_dist --save-interval 30)
ENTRY=(python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m megatron.oellm.training.entry)
"${ENTRY[@]}" "${MODEL[@]}" "${TRAIN[@]}" --train-iters 30 2>&1 | tee "$LOGS/train.log" \
  | grep -E " iteration |\[oellm\]|Traceback|Error" || exit 1
echo "== resume from iteration 30"
"${ENTRY[@]}" "${MODEL[@]}" "${TRAIN[@]}" --train-iters 35 2>&1 | tee "$LOGS/resume.log" \
  | grep -E " iteration |\[oellm\]|Traceback|Error|loaded checkpoint"

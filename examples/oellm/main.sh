#!/usr/bin/env bash
# The main job. Installs what it needs, then:
#   no GPU:   the Qwen3-235B-A22B Jupiter plan (TP2 PP8 VPP3 EP16 ETP1, 64 nodes x 4 GH200): model card, validated layout,
#             parameters and static memory per GPU, FLOPs per token, and the recipe's resolved arguments + sbatch text;
#   a GPU:    the Qwen3.5-35B-A3B MN5 recipe fitted down (--local): proxy training on this machine's GPUs.
# Extra arguments go to the recipe (e.g. --data-path PREFIX --tokenizer-model PATH for real text).
# Runs in ${PYTHON:-python3}, as tools/install.sh and the recipe wrappers do.
set -euo pipefail
case "${1:-}" in -h|--help) awk 'NR > 1 { if (!/^#/) exit; print }' "${BASH_SOURCE[0]}"; exit 0 ;; esac  # before any install
# stays in the caller's directory: a relative PYTHON (.venv/bin/python), --data-path or --tokenizer-model names the
# caller's file, as it does for the recipe wrappers and tools/install.sh
# the checkout holding this script, through a symbolic link to it
root="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)"
PY="${PYTHON:-python3}"

# Whether this machine has an NVIDIA GPU: nvidia-smi lists it before anything is installed (a fresh node may have
# no torch yet); without nvidia-smi, an installed CUDA build of torch is asked instead. The listing is read whole
# before grep looks at it: piped into `grep -q` under pipefail, nvidia-smi killed by SIGPIPE (grep leaves at the
# first GPU) or failing on another GPU would read as "no GPU".
has_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    grep -q '^GPU ' <<< "$(nvidia-smi -L 2>/dev/null || true)"
    return
  fi
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null
}

# One set of extras either way: run on a GPU-less login node, it fills a shared environment with what the GPU
# nodes' run needs (fla and, for a Triton fla refuses on Hopper, TileLang), so they need no package index.
bash "$root/tools/install.sh" hf,gdn
if has_gpu; then
  exec bash "$root/examples/oellm/qwen3_5_35b_a3b_mn5_strong.sh" --local --row 1 "$@"
fi
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m megatron.oellm models
echo
# The dry run's job script keeps its log and checkpoints under --output-dir, by default oellm-runs in this directory;
# one whose path a job script cannot carry (a space or quote for #SBATCH --output, ':' or ',' for the container's
# --bind) would have the recipe refuse the plan, so the dry run puts them under the home directory (the recipe reads
# the ~). An --output-dir given to main.sh comes later and wins.
output_dir=()
carried='^[A-Za-z0-9_./@+=~-]+$'
if [[ ! $(pwd -P) =~ $carried ]]; then  # the recipe's run directory is under the physical one (os.getcwd)
  echo "note: main.sh: the current directory has characters a job script cannot carry (#SBATCH --output," \
       "--bind): the dry run's default --output-dir is ~/oellm-runs"
  output_dir=(--output-dir "~/oellm-runs")
fi
exec bash "$root/examples/oellm/qwen3_235b_a22b_jupiter.sh" --dry-run --row 1 ${output_dir[@]+"${output_dir[@]}"} "$@"

#!/usr/bin/env bash
# Jupiter: Qwen3-235B-A22B knob sweep from the current config (256 GPUs)
# Usage: bash examples/oellm/qwen3_235b_a22b_jupiter_sweep.sh [--dry-run | --submit | --local] [--row N | --nodes N] [--account A] [--partition P] [--qos Q]
#        [--time HH:MM:SS] [--image SIF] [--output-dir DIR] [--data-path PREFIX... --tokenizer-model TOK]
#        [--save-interval N] [--train-iters N (--local)]   (default: --dry-run; --help lists every option)
# Settings: qwen3_235b_a22b_jupiter_sweep.toml beside this script. Works from a checkout without pip install.
set -euo pipefail
# this script's folder, also when run through a link to it: its config and checkout are beside it, not the link
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
export PYTHONPATH="$here/../..${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m megatron.oellm recipe "$here/qwen3_235b_a22b_jupiter_sweep.toml" "$@"

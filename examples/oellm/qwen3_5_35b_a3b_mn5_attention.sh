#!/usr/bin/env bash
# MN5 #438: Qwen3.5-35B-A3B attention backend flash vs auto
# Usage: bash examples/oellm/qwen3_5_35b_a3b_mn5_attention.sh [--dry-run | --submit | --local] [--row N | --nodes N] [--account A] [--partition P] [--qos Q]
#        [--time HH:MM:SS] [--image SIF] [--output-dir DIR] [--data-path PREFIX... --tokenizer-model TOK]
#        [--save-interval N] [--train-iters N (--local)]   (default: --dry-run; --help lists every option)
# Settings: qwen3_5_35b_a3b_mn5_attention.toml beside this script. Works from a checkout without pip install.
set -euo pipefail
# this script's folder, also when run through a link to it: its config and checkout are beside it, not the link
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
export PYTHONPATH="$here/../..${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m megatron.oellm recipe "$here/qwen3_5_35b_a3b_mn5_attention.toml" "$@"

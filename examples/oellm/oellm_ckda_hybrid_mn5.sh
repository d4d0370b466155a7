#!/usr/bin/env bash
# MN5 #438: OEL CKDA hybrid step table (8k, document-masked, MBS 1, VPP2)
# Usage: bash examples/oellm/oellm_ckda_hybrid_mn5.sh [--dry-run | --submit | --local] [--row N | --nodes N] [--account A] [--partition P] [--qos Q]
#        [--time HH:MM:SS] [--image SIF] [--output-dir DIR] [--data-path PREFIX... --tokenizer-model TOK]
#        [--save-interval N] [--train-iters N (--local)]   (default: --dry-run; --help lists every option)
# Settings: oellm_ckda_hybrid_mn5.toml beside this script. Works from a checkout without pip install.
# Rows 1-2 are document-masked, which this release does not wire: they are refused; --row 3 resolves.
set -euo pipefail
# this script's folder, also when run through a link to it: its config and checkout are beside it, not the link
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
export PYTHONPATH="$here/../..${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m megatron.oellm recipe "$here/oellm_ckda_hybrid_mn5.toml" "$@"

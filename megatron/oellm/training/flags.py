"""The training entry's own flags (the OpenEuroLLM argument group) and its short ``--help`` page, without torch.

Megatron's parser holds about 3,800 lines of help; the entry's ``--help`` (``-h``) prints a page built from this
group alone, with what a run needs, and ``--help-all`` prints Megatron's whole parser with the group. Nothing here
imports torch or megatron: :mod:`megatron.oellm.training.entry` answers ``--help`` before it imports them (seconds on
a login node's shared file system).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from megatron.oellm.peaks import positive_tflops

BACKEND_CHOICES = ("auto", "te", "torch")
"""Values of ``--oellm-backend`` (:func:`megatron.oellm.backends.selection.resolve_backend`); ``auto`` picks ``te``
when Transformer Engine imports."""

OELLM_GROUP = "OpenEuroLLM"
"""Title of the entry's own argument group, in both help pages."""

ENTRY_MODULE = "megatron.oellm.training.entry"
"""The module ``python -m`` and ``torchrun -m`` run."""
ENTRY_PROG = f"python -m {ENTRY_MODULE}"
"""The program both help pages' usage names."""

SHORT_HELP = ("-h", "--help")
"""The options of the short page (:func:`short_help`)."""
FULL_HELP = "--help-all"
"""The option of Megatron's whole parser with the entry's group."""

RUN_NEEDS = f"""\
Trains on megatron.training's pretrain loop. Takes Megatron-LM's
pretrain_gpt.py / pretrain_hybrid.py flags plus the {OELLM_GROUP} ones below.

A run needs at least:
  --oellm-model NAME     a model card (`oellm models` lists them), or
                         Megatron's architecture flags
  --seq-length N, --micro-batch-size N, --lr LR
  --train-iters N or --train-samples N
  --tokenizer-type TYPE  with the files or --vocab-size it reads
  --data-path PREFIX or --mock-data
It trains on GPU nodes (torchrun starts one process per GPU); on a node
without a GPU it checks the command line as far as it can and ends with one
error line.

example (the tiny Qwen3 MoE card on synthetic tokens, one GPU):
  torchrun --nproc-per-node 1 -m {ENTRY_MODULE} \\
    --oellm-model qwen3-30b-a3b-tiny --seq-length 64 --micro-batch-size 1 \\
    --train-iters 10 --lr 1e-4 --mock-data --tokenizer-type NullTokenizer"""
"""The short page's description: what the entry does, the flags every run needs, and an example line."""

FULL_LIST_POINTER = f"Megatron-LM's flags: {FULL_HELP} prints them all (about 3,800 lines)."
"""The short page's last line: how to see the flags it leaves out."""

FULL_PAGE_DESCRIPTION = (f"Every flag the entry takes: Megatron-LM's pretrain_gpt.py / pretrain_hybrid.py ones and "
                         f"the {OELLM_GROUP} ones. {'/'.join(SHORT_HELP)} prints the short page (the {OELLM_GROUP} "
                         f"flags and what a run needs), {FULL_HELP} this one.")
"""The :data:`FULL_HELP` page's description, which names both pages: megatron's parser says neither."""
SHORT_PAGE_HELP = f"show the short page (what a run needs and the {OELLM_GROUP} flags) and exit"
"""The help options' line on the :data:`FULL_HELP` page, which argparse words as "show this help message"."""


def add_oellm_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Megatron ``extra_args_provider``: add the OEL arguments (model card, backend, peak) to Megatron's parser, and
    turn off the data loader's attention mask, which no model built here reads."""
    group = parser.add_argument_group(title=OELLM_GROUP)
    group.add_argument(
        "--oellm-model",
        default=None,
        metavar="NAME",
        help="model card by registry name (e.g. qwen3.5-35b-a3b-proxy-4L); its architecture flags "
        "fill in every architecture flag not given on the command line",
    )
    group.add_argument(
        "--oellm-backend",
        default="auto",
        choices=BACKEND_CHOICES,
        help="module backend of the spec builders: te (Transformer Engine), torch (no TE), auto (te where installed)",
    )
    group.add_argument(
        "--oellm-peak-tflops",
        type=positive_tflops,
        default=None,
        metavar="TFLOPS",
        help="peak dense TFLOP/s per GPU for the MFU of the [oellm] throughput line (default: the "
        "nominal peak of a known GPU, else no MFU)",
    )
    # megatron builds a [1, seq, seq] causal mask per sample in the data loader by default (576 MiB at seq 24k),
    # stacks it per micro-batch and copies it to the GPU; no layer of either backend reads it (causal attention
    # kernels, GDN takes none), so this entry never makes it. --no-create-attention-mask-in-dataloader stays valid.
    parser.set_defaults(create_attention_mask_in_dataloader=False)
    return parser


def asked_help(argv: Sequence[str]) -> str | None:
    """The help ``argv`` asks for: ``--help`` (for ``-h`` too) or :data:`FULL_HELP`, whichever comes first, as
    argparse answers the first help option it meets; None for a command line without one. A help option given as
    another flag's value (``--wandb-exp-name -h``) counts too: which of Megatron's flags take a value is known only to
    its parser, which this answer comes before (argparse would refuse that line, as it reads ``-h`` as an option)."""
    for arg in argv:
        if arg in SHORT_HELP:
            return SHORT_HELP[1]
        if arg == FULL_HELP:
            return FULL_HELP
    return None


def short_help_parser() -> argparse.ArgumentParser:
    """A parser holding only the help options and :func:`add_oellm_arguments`' group, for formatting the short page;
    Megatron's flags stand in its usage as ``MEGATRON_FLAG ...``."""
    parser = argparse.ArgumentParser(prog=ENTRY_PROG, description=RUN_NEEDS,
                                     epilog=FULL_LIST_POINTER, add_help=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(*SHORT_HELP, action="store_true", help="show this page and exit")
    parser.add_argument(FULL_HELP, action="store_true",
                        help=f"show every flag the entry takes, Megatron-LM's and the {OELLM_GROUP} ones, and exit")
    parser.add_argument("megatron_flags", nargs="*", metavar="MEGATRON_FLAG",
                        help=f"Megatron-LM's pretrain_gpt.py / pretrain_hybrid.py flags ({FULL_HELP} lists them)")
    return add_oellm_arguments(parser)


def as_full_help_page(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` (Megatron's, with :func:`add_oellm_arguments`' group) worded as the entry's :data:`FULL_HELP` page:
    the entry's ``python -m`` line as its usage's program (argparse took ``entry.py``), :data:`FULL_PAGE_DESCRIPTION`,
    the help options said to print the short page, and :data:`FULL_HELP` itself listed. For formatting only: the
    entry answers the help options before parsing."""
    parser.prog = ENTRY_PROG
    parser.description = FULL_PAGE_DESCRIPTION
    for action in parser._actions:
        if tuple(action.option_strings) == SHORT_HELP:
            action.help = SHORT_PAGE_HELP
    parser.add_argument(FULL_HELP, action="store_true", help="show this page and exit")
    return parser


def short_help() -> str:
    """The entry's ``--help`` page: usage, what a run needs, the help options, the :data:`OELLM_GROUP` flags with
    their help texts, and :data:`FULL_LIST_POINTER`."""
    return short_help_parser().format_help()

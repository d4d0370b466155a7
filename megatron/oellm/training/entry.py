"""Training entry point: ``torchrun ... -m megatron.oellm.training.entry <Megatron flags> --oellm-model NAME``.

Takes the flags of Megatron-LM's ``pretrain_gpt.py`` / ``pretrain_hybrid.py`` plus the OEL arguments
(:mod:`megatron.oellm.training.args`), fills the named card's architecture flags into the command line (without
``--oellm-model`` the card is read back from Megatron's architecture flags), and runs
``megatron.training``'s pretrain loop with our model provider, data provider and forward step. Checkpoints are
Megatron's (``--save``/``--load``, ``--ckpt-format torch_dist`` for megatron-core distributed checkpointing).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import megatron.oellm  # noqa: F401  (Python 3.11 provision before megatron.training is imported)
from megatron.oellm.training.args import (
    add_oellm_arguments,
    merge_card_flags,
    with_backend_implementation,
    with_training_defaults,
)

if TYPE_CHECKING:
    from megatron.oellm.cards import ModelCard

PROG = "megatron.oellm.training.entry"
"""The entry's name in its one-line error messages (what ``python -m`` runs)."""


def flops_and_peak(args, card: ModelCard | None = None) -> tuple[float, float | None]:
    """Training FLOPs per token of the run's card (``card``, else read from ``args``) and the GPU's peak TFLOP/s
    (None when unknown).

    The peak is the dense BF16 one also for FP8 runs, as in the reports' MFU and ``oellm table`` (so a log line and
    a table agree); ``--oellm-peak-tflops`` sets another.
    """
    import torch

    from megatron.oellm.flops import training_flops_per_token
    from megatron.oellm.training.model_provider import card_from_args
    from megatron.oellm.training.throughput import device_peak_tflops

    card = card_from_args(args) if card is None else card
    flops = training_flops_per_token(card, args.seq_length, padded_vocab=args.padded_vocab_size)
    peak = args.oellm_peak_tflops
    if peak is None:
        peak = device_peak_tflops(torch.cuda.get_device_name(), "bf16")
    return flops.total, peak


def check_layout(args, card: ModelCard | None = None) -> None:
    """Raise :class:`megatron.oellm.models.parallel.ParallelLayoutError` when the run's parallel layout does not fit
    its card (``card``, else read from ``args``): the spec builders' own check, made before Megatron initialises instead of in the model provider (after
    process groups and GPU memory are set up, on every rank). Megatron's ``validate_args`` passes, for instance, a
    hybrid pattern whose ``|`` splits a decoder layer between two pipeline stages."""
    from megatron.oellm.models.parallel import validate_layout
    from megatron.oellm.training.model_provider import card_from_args, check_pipeline_split_flags, layout_from_args

    card = card_from_args(args) if card is None else card
    check_pipeline_split_flags(args, card)
    validate_layout(card, layout_from_args(args))


def resume_compared_args(args) -> dict[str, list[str]]:
    """Flag -> stored run arguments that megatron-core 0.19.2's ``check_checkpoint_args`` compares with this run's
    when it loads a checkpoint without ``--finetune``, beyond the model shape every checkpoint records: those it
    compares only for some flags, and reads from the checkpoint without a default (a missing one is an
    ``AttributeError`` on every rank after GPU set-up)."""
    compared: dict[str, list[str]] = {}
    if args.vocab_file:
        compared["--vocab-file"] = ["max_position_embeddings", "make_vocab_size_divisible_by", "tokenizer_type"]
        if args.ckpt_format == "torch":
            compared["--vocab-file"].append("padded_vocab_size")
    if args.data_parallel_random_init:
        compared["--data-parallel-random-init"] = ["data_parallel_random_init"]
    if getattr(args, "phase_transition_iterations", None):
        compared["--phase-transition-iterations"] = ["global_batch_size"]
    return compared


def check_converted_load(args) -> None:
    """Raise ``ValueError`` when ``--load`` names an ``oellm convert hf-to-mcore`` checkpoint that megatron would
    check against run arguments it does not store (:func:`resume_compared_args`), naming ``--finetune``.

    A converted checkpoint stores only the arguments every load compares (its card's shape), since which tokenizer,
    divisor or batch size a run will use is not known when converting. Megatron skips the comparison under
    ``--finetune``, which for a ``release`` checkpoint changes nothing else: it starts at iteration 0 and reads no
    optimizer or RNG state either way.
    """
    if not args.load or args.finetune or getattr(args, "ckpt_step", None):
        return
    compared = resume_compared_args(args)
    if not compared:
        return
    from megatron.oellm.convert.pipeline import converted_checkpoint_args

    stored = converted_checkpoint_args(Path(args.load))
    if stored is None:
        return
    missing = {flag: [name for name in names if not hasattr(stored, name)] for flag, names in compared.items()}
    missing = {flag: names for flag, names in missing.items() if names}
    if missing:
        why = "; ".join(f"{', '.join(names)} for {flag}" for flag, names in missing.items())
        raise ValueError(f"--load {args.load} is an `oellm convert hf-to-mcore` checkpoint without the run arguments "
                         f"megatron's check_checkpoint_args compares when it resumes a run ({why}); add --finetune to "
                         "start from it (iteration 0, no optimizer or RNG state: what a converted checkpoint holds "
                         "anyway), or pass it as --pretrained-checkpoint with --load / --save naming the run's own "
                         "directory, so that later jobs of the run resume from their own checkpoints")


def refuse(error: ValueError) -> int:
    """Print a refused command line as one ``error:`` line on stderr (argparse's form) and return its exit status 2.

    The refusals before Megatron allocates anything (a card conflict, an unknown model, a backend or data flag the
    run cannot honour, flags no card describes) are messages naming the fix; under torchrun a traceback per rank
    would bury them.
    """
    print(f"{PROG}: error: {error}", file=sys.stderr)
    return 2


def provenance() -> str:
    """The start-up line naming the code that runs: megatron-oellm's version and the directory it was imported from,
    and megatron-core's version. A job inherits the submitting shell's ``PYTHONPATH`` (the recipe wrappers put their
    checkout first), so a checkout visible in the container shadows the image's installed copy: the log says
    which one ran."""
    import megatron.core

    import megatron.oellm as oellm

    return (f"> megatron-oellm {oellm.__version__} from {Path(oellm.__file__).resolve().parent}, "
            f"megatron-core {megatron.core.__version__}")


def command_line(argv: Sequence[str]) -> list[str]:
    """``argv`` with the named card's flags, the training defaults and the backend's implementation filled in."""
    merged = merge_card_flags(argv)
    return with_backend_implementation(with_training_defaults(merged.argv if merged else argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Merge the card (if named) and the backend's implementation into the command line, parse it with Megatron's
    parser, train; return 0, or 2 after a one-line :func:`refuse` of a command line refused before training."""
    try:
        argv = command_line(list(sys.argv[1:] if argv is None else argv))
    except ValueError as error:
        return refuse(error)
    sys.argv = [sys.argv[0], *argv]  # Megatron reads sys.argv
    if os.environ.get("RANK", "0") == "0":
        print(provenance(), flush=True)

    from megatron.core.enums import ModelType
    from megatron.training import pretrain
    from megatron.training.argument_utils import pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_and_validate_args

    from megatron.oellm.backends.selection import check_args_support
    from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step
    from megatron.oellm.training.data import check_data_args, check_data_source, train_valid_test_datasets
    from megatron.oellm.training.dispatcher import check_flex_dispatcher
    from megatron.oellm.training.forward_step import check_schedule_support, forward_step
    from megatron.oellm.training.model_provider import card_from_args, check_model_config, model_provider
    from megatron.oellm.training.throughput import install_throughput_logging

    dataset_helpers.apply()
    distrib_optimizer_step.apply()
    args = parse_and_validate_args(extra_args_provider=add_oellm_arguments)
    try:
        check_args_support(args.oellm_backend, args)
        check_flex_dispatcher(args)
        check_data_args(args)
        check_data_source(args)
        check_converted_load(args)
        card = card_from_args(args)  # the run's card, read once for the checks and the FLOP count
        check_layout(args, card)
        check_schedule_support(args, card)
        check_model_config(args, card)
        flops_per_token, peak_tflops = flops_and_peak(args, card)
    except ValueError as error:
        return refuse(error)
    install_throughput_logging(flops_per_token, peak_tflops)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*recommended to use a ModelConfig.*")
        config_container = pretrain_cfg_container_from_args(args)
    pretrain(
        config_container,
        train_valid_test_datasets,
        ModelType.encoder_or_decoder,
        forward_step,
        model_provider=model_provider,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

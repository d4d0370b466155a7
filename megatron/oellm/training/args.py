"""The training entry's command line: Megatron's parser with the OEL arguments (:mod:`megatron.oellm.training.flags`
adds them), and the merge of a model card into Megatron's argv.

The entry takes Megatron-LM's own flags (so experiment YAMLs that map keys one-to-one onto Megatron flags keep
working) plus ``--oellm-model NAME`` and ``--oellm-backend``. The card's architecture flags
(:func:`megatron.oellm.megatron_args.model_flags`) fill in every flag the user did not pass; a flag the user passed
with a value that contradicts the card, or that sets one the card leaves unset, is an error naming both.
``--vocab-size`` is the one exception: it selects the tokenizer's vocabulary and re-vocabularies the card
(:meth:`ModelCard.with_vocab`), as recipes do.
:func:`with_training_defaults` fills in :data:`TRAINING_DEFAULTS` (no dropout, ``--eval-interval 1000``) where not
given, with or without a card.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from megatron.oellm.backends import selection
from megatron.oellm.cards import ModelCard, get_card
from megatron.oellm.megatron_args import (
    FlagValue,
    flags_to_argv,
    megatron_flag,
    megatron_parser,
    model_flags,
)
from megatron.oellm.training.flags import add_oellm_arguments, as_full_help_page

TRAINING_DEFAULTS: dict[str, FlagValue] = {"hidden-dropout": 0.0, "attention-dropout": 0.0, "eval-interval": 1000}
"""Flags filled in when not given, but free to set: the card models train without dropout (Megatron's default is
0.1), yet dropout is a training choice, not architecture, so a given value is no conflict. ``--eval-interval``
defaults to None in megatron-core 0.19.2, whose sample count for any training run (mock data too) then divides by it and fails
even with ``--eval-iters 0`` (patches/eval-interval-none.md); 1000 is Megatron-LM's earlier default."""


TORCH_BACKEND_IMPL = "local"
"""Megatron ``--transformer-impl`` of the torch backend (its modules are not Transformer Engine's)."""


class BackendFlagConflict(ValueError):
    """``--transformer-impl`` contradicts the resolved ``--oellm-backend``; the message names both."""


class CardFlagConflict(ValueError):
    """A Megatron flag the user passed contradicts the model card; the message names both values."""


class _Unset:
    """Sentinel default: marks the parser destinations the command line did not set."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


@dataclass(frozen=True)
class MergedArgv:
    """The result of :func:`merge_card_flags`."""

    argv: list[str]
    """The user's argv followed by the card flags the user did not give."""
    card: ModelCard
    """The card, re-vocabularied when the user gave ``--vocab-size``."""
    filled: dict[str, FlagValue]
    """Flags added to the argv (name without ``--`` -> value)."""
    user_destinations: frozenset[str]
    """Parser destinations the user's own argv sets (:func:`explicit_destinations`, before the card's flags are
    filled in): what the user chose, which the card's values or the defaults may equal. Parsed once, by the merge."""


@lru_cache(maxsize=1)
def oellm_parser() -> argparse.ArgumentParser:
    """Megatron's parser plus the OEL arguments, built once per process (``parse_args`` leaves a parser as it is)."""
    return megatron_parser(add_oellm_arguments)


def full_help_parser() -> argparse.ArgumentParser:
    """The parser of the entry's ``--help-all`` page (:func:`~megatron.oellm.training.flags.as_full_help_page`), built
    anew so that :func:`oellm_parser`'s cached one, which the entry parses with, is left as it is."""
    return as_full_help_page(megatron_parser(add_oellm_arguments))


def parse_oellm_argv(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by :func:`oellm_parser` (no validation): what the training entry's Megatron will read."""
    return oellm_parser().parse_args(list(argv))


HELP_IN_RUN_REFUSED = "--help asks for the help page: the job would print it and exit without training"
"""Why a run's command line may not hold ``--help`` (or ``-h``): the parser prints the page and exits with status 0."""


def argv_refusal(argv: Sequence[str]) -> str | None:
    """What the training entry's parser says against ``argv`` (an unknown or misspelt flag, a value outside a flag's
    choices, a help option, on which the job would print the help page and exit without training), or None when it
    parses: the check a job makes at start, for making it before the job is queued."""
    messages = io.StringIO()
    try:
        with contextlib.redirect_stderr(messages), contextlib.redirect_stdout(io.StringIO()):
            parse_oellm_argv(argv)
    except SystemExit as exit_:
        if exit_.code == 0:  # argparse answered a help option: the page, then exit status 0
            return HELP_IN_RUN_REFUSED
        lines = messages.getvalue().strip().splitlines()
        return lines[-1].split(" error: ", 1)[-1] if lines else "the argument parser refused the command line"
    except (KeyError, ValueError) as error:  # megatron's enum-typed flags convert their value outside argparse
        value = error.args[0] if error.args else ""
        flag = _flag_refusing(argv, value)
        return f"invalid value {value!r}" + (f" for {flag}" if flag else "")
    return None


def _flag_refusing(argv: Sequence[str], value: str) -> str | None:
    """The flag of ``argv`` whose conversion of ``value`` raises (None if none does alone). Each flag followed by
    ``value`` is parsed on its own, because the same word may follow several flags (``--train-iters 10 --exit-signal
    10``) and only the converting one refuses it."""
    for i in range(1, len(argv)):
        if argv[i] != value or not argv[i - 1].startswith("--"):
            continue
        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                parse_oellm_argv([argv[i - 1], value])
        except (KeyError, ValueError):
            return argv[i - 1]
        except SystemExit:
            continue
    return None


@lru_cache(maxsize=1)
def _sentinel_parser() -> argparse.ArgumentParser:
    """Megatron's parser (plus the OEL arguments) with every default replaced by a sentinel."""
    parser = megatron_parser(add_oellm_arguments)
    dests = vars(parser.parse_args([])).keys()
    parser.set_defaults(**dict.fromkeys(dests, _UNSET))
    return parser


def explicit_destinations(argv: Sequence[str]) -> set[str]:
    """Parser destinations (e.g. ``num_layers``) that ``argv`` sets explicitly, whatever the value."""
    return {dest for dest, value in vars(_sentinel_parser().parse_args(list(argv))).items() if value is not _UNSET}


def _flag_destinations(parser: argparse.ArgumentParser, name: str, value: FlagValue) -> set[str]:
    """Destinations that the flag ``--name`` writes (a boolean flag is looked up by its bare form, a ``None`` one,
    which has no value to parse, by its option)."""
    if value is None:
        return {action.dest for action in parser._actions if f"--{name}" in action.option_strings}
    argv = [f"--{name}"] if isinstance(value, bool) else flags_to_argv({name: value})
    return {dest for dest, got in vars(parser.parse_args(argv)).items() if got is not _UNSET}


def architecture_value(dest: str, value: FlagValue) -> FlagValue:
    """The architecture part of a flag value: a hybrid pattern's ``|`` are pipeline stages, not architecture."""
    if dest == "hybrid_layer_pattern" and isinstance(value, str):
        return value.replace("|", "")
    return value


def merge_card_flags(argv: Sequence[str]) -> MergedArgv | None:
    """Fill the ``--oellm-model`` card's architecture flags into ``argv`` where the user gave none.

    Returns None when ``argv`` names no model. Raises :class:`CardFlagConflict` when a flag the user passed has
    another value than the card's, or sets one the card leaves unset (``None`` in
    :func:`~megatron.oellm.megatron_args.model_flags`: the model is built from the card, without it), and
    :class:`megatron.oellm.cards.CardError` for an unknown model name.
    """
    user = parse_oellm_argv(argv)
    if user.oellm_model is None:
        return None
    card = get_card(user.oellm_model)
    explicit = frozenset(explicit_destinations(argv))
    if "hybrid_override_pattern" in explicit:
        raise CardFlagConflict(
            f"--hybrid-override-pattern: megatron-core deprecates it and refuses it beside --hybrid-layer-pattern, "
            f"which model card {card.name} fills in (its layer pattern); drop it, or pass the card's pattern with "
            "other '|' pipeline stages as --hybrid-layer-pattern"
        )
    if "vocab_size" in explicit:
        card = card.with_vocab(user.vocab_size)
    flags = model_flags(card)
    card_values = vars(parse_oellm_argv(flags_to_argv(flags)))
    sentinel = _sentinel_parser()
    filled: dict[str, FlagValue] = {}
    for name, value in flags.items():
        dests = _flag_destinations(sentinel, name, value)
        given = dests & explicit
        if not given:
            if value is not None:
                filled[name] = value
            continue
        for dest in sorted(given):
            if architecture_value(dest, getattr(user, dest)) != architecture_value(dest, card_values[dest]):
                card_has = "leaves it unset" if value is None else f"has {dest}={card_values[dest]!r}"
                if dest == "num_layers" and card.linear_mixer != "none":
                    card_has += (f" (megatron counts a hybrid model's mixers and MoE blocks as layers: the card's "
                                 f"{card.num_layers} decoder layers are {card_values[dest]})")
                raise CardFlagConflict(
                    f"--{name}: the command line gives {dest}={getattr(user, dest)!r} but model card {card.name} "
                    f"{card_has}; drop --{name} (the card fills in its architecture) or pick a card that matches"
                )
    return MergedArgv(argv=list(argv) + flags_to_argv(filled), card=card, filled=filled,
                      user_destinations=explicit)


def with_training_defaults(argv: Sequence[str]) -> list[str]:
    """``argv`` followed by the :data:`TRAINING_DEFAULTS` it does not set itself."""
    explicit = explicit_destinations(argv)
    sentinel = _sentinel_parser()
    missing = {
        name: value
        for name, value in TRAINING_DEFAULTS.items()
        if not _flag_destinations(sentinel, name, value) & explicit
    }
    return list(argv) + flags_to_argv(missing)


def with_backend_implementation(argv: Sequence[str]) -> list[str]:
    """``argv`` with Megatron's ``--transformer-impl`` matching the resolved ``--oellm-backend``.

    Megatron's default implementation is Transformer Engine, which the torch backend (chosen explicitly, or by
    ``auto`` where TE does not import) does not use: it gets ``--transformer-impl local`` when the flag is not given,
    and a :class:`BackendFlagConflict` when the user asked for ``transformer_engine``.
    """
    parsed = parse_oellm_argv(argv)
    # looked up per call: on a node without a GPU the entry resolves the backend as the cluster image does
    if selection.resolve_backend(parsed.oellm_backend) != "torch":
        return list(argv)
    if "transformer_impl" not in explicit_destinations(argv):
        return [*argv, "--transformer-impl", TORCH_BACKEND_IMPL]
    if parsed.transformer_impl != TORCH_BACKEND_IMPL:
        raise BackendFlagConflict(
            f"--oellm-backend {parsed.oellm_backend} resolves to the torch backend, which needs --transformer-impl "
            f"{TORCH_BACKEND_IMPL}, but the command line gives --transformer-impl {parsed.transformer_impl}; drop "
            "that flag, or install Transformer Engine and use --oellm-backend te"
        )
    return list(argv)


YAML_CFG_REFUSED = (
    "--yaml-cfg: megatron's experimental YAML configuration replaces every command-line argument by the file's "
    "(the --oellm-model card's flags and --oellm-backend included), so the run would not be the command line's; "
    "give the settings as Megatron flags (a recipe row maps its keys onto them)"
)
"""Why the training entry refuses ``--yaml-cfg``."""


def check_command_line(argv: Sequence[str]) -> None:
    """Raise ``ValueError`` for what the parser refuses in ``argv`` (:func:`argv_refusal`: one line, where argparse
    prints Megatron's whole usage first and an enum-typed flag's bad value is a ``KeyError`` traceback)."""
    refusal = argv_refusal(argv)
    if refusal:
        raise ValueError(refusal)


def check_yaml_cfg(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--yaml-cfg`` in the parsed ``args`` (:data:`YAML_CFG_REFUSED`)."""
    if args.yaml_cfg is not None:
        raise ValueError(YAML_CFG_REFUSED)


def check_sequence_given(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` when the command line gives both ``--seq-length`` and ``--encoder-seq-length``, or neither,
    naming the length the ``--oellm-model`` card plans with. megatron's ``validate_args`` asserts both without a
    message; the length is not filled in from the card, as it sets the run's memory and throughput. None given under
    ``--use-checkpoint-args`` is left to :func:`~megatron.oellm.training.load_checks.check_checkpoint_sequence_length`,
    which reads the checkpoints megatron takes it from."""
    if args.seq_length is not None and args.encoder_seq_length is not None:
        raise ValueError(f"--seq-length {args.seq_length} and --encoder-seq-length {args.encoder_seq_length}: "
                         "megatron takes the tokens per training sequence from one of them; give --seq-length only")
    if args.use_checkpoint_args or args.seq_length is not None or args.encoder_seq_length is not None:
        return
    raise ValueError(f"{sequence_length_fix(args)}: megatron needs the tokens per training sequence")


def sequence_length_fix(args: argparse.Namespace) -> str:
    """``give --seq-length``, with the length the ``--oellm-model`` card of ``args`` plans with: the fix of a run that
    has no sequence length."""
    planned = (f" (model card {args.oellm_model} plans with {get_card(args.oellm_model).seq_length})"
               if args.oellm_model else "")
    return f"give --seq-length{planned}"


def check_sequence_length(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` when the run's ``--seq-length`` (or ``--encoder-seq-length``) exceeds its
    ``max_position_embeddings``, naming the card that set the latter.

    megatron's ``validate_args`` asserts it with a traceback on every rank; the value under a card is not on the
    command line. Left to megatron under ``--use-checkpoint-args``, which takes the limit from the checkpoint.
    """
    length = args.seq_length if args.seq_length is not None else args.encoder_seq_length
    limit = args.max_position_embeddings
    if args.use_checkpoint_args or length is None or limit is None or length <= limit:
        return
    source = f"model card {args.oellm_model}'s" if args.oellm_model else "--max-position-embeddings"
    raise ValueError(f"--seq-length {length} exceeds {source} max_position_embeddings {limit}; train with at most "
                     f"{limit} tokens per sequence" + ("" if args.oellm_model else " or raise the limit"))


POSITIVE_SIZES = ("seq_length", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                  "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
                  "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank")
"""Sizes a run needs at least 1 of when set: megatron-core 0.19.2's ``validate_args`` takes the world size modulo
the parallel ones (a ``ZeroDivisionError`` traceback at 0, a refusal about micro-batch counts or ``total_model_size``
below 0; its ``TransformerConfig`` takes one modulo the expert tensor-parallel size), and a ``--seq-length`` of 0
passed it and stopped the job when it built its datasets."""


def check_positive_sizes(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` naming the first of :data:`POSITIVE_SIZES` the parsed ``args`` set below 1."""
    for name in POSITIVE_SIZES:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"{megatron_flag(name)} {value}: give a size of at least 1"
                             + (" (1: none of that parallelism)" if name.endswith("parallel_size") else ""))


MODULO_INTERVALS = ("log_memory_interval", "save_params_interval", "save_activations_interval",
                    "save_tokens_per_expert_interval", "save_wgrads_interval", "save_dgrads_interval",
                    "check_weight_hash_across_dp_replicas_interval", "gpu_sniff_test_interval")
"""Intervals megatron-core 0.19.2's training loop takes the iteration modulo whenever they are set (not None): 0 is
a ``ZeroDivisionError`` at the first iteration."""


def check_intervals(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for an iteration interval or a recompute layer count at which megatron-core 0.19.2 stops
    or stalls the run only once it trains, while its ``validate_args`` lets the value through: a ``--log-interval``
    below 1 (the loop takes the iteration modulo it and its timers assert a positive normalizer), an
    ``--eval-interval`` of 0 (the validation sample count divides by it, also with ``--eval-iters 0``), a
    ``--tensorboard-log-interval`` of 0 beside ``--tensorboard-dir`` or one of :data:`MODULO_INTERVALS` at 0, and a
    full-recompute ``--recompute-num-layers`` below 1 (``uniform`` steps through the layers by it, never ending;
    ``block`` recomputes no layer). ``args`` are parsed, not yet validated."""
    if args.log_interval < 1:
        raise ValueError(f"--log-interval {args.log_interval}: megatron-core logs the iterations that are multiples "
                         "of it and divides its timers by it, which stops the run at its first iteration (at 0 a "
                         "ZeroDivisionError, below 0 its timers' assertion of a positive normalizer); give a positive "
                         "interval (1: every iteration)")
    if args.eval_interval == 0:
        raise ValueError("--eval-interval 0: megatron-core divides the training iterations by it to size the "
                         "validation set, whatever --eval-iters (a ZeroDivisionError when the job builds its "
                         "datasets), and a resumed run's validation position too; give a positive interval "
                         "(--eval-iters 0 trains without validation)")
    zero = [name for name in MODULO_INTERVALS if getattr(args, name) == 0]
    if args.tensorboard_dir and args.tensorboard_log_interval == 0:
        zero.insert(0, "tensorboard_log_interval")
    if zero:
        flag = megatron_flag(zero[0])
        raise ValueError(f"{flag} 0: megatron-core's training loop takes the iteration modulo it, a "
                         f"ZeroDivisionError at the first iteration; give a positive interval, or drop {flag}")
    layers = args.recompute_num_layers
    if args.recompute_granularity == "full" and layers is not None and layers < 1:
        raise ValueError(f"--recompute-num-layers {layers}: full recompute needs at least 1 layer per recomputed "
                         "chunk (megatron-core checks only that it is set): with --recompute-method uniform its "
                         "layer loop steps by it and never ends (the job hangs in its first forward pass until its "
                         "time limit), with block it recomputes no layer; give a positive count")


def check_precision(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--fp16`` beside ``--bf16``: megatron-core 0.19.2's ``validate_args`` stops on a bare
    ``assert not args.bf16`` on every rank, naming neither flag. ``args`` are parsed, not yet validated."""
    if args.fp16 and args.bf16:
        raise ValueError("--fp16 and --bf16 together: a run trains in one of them; keep --bf16 (the recipes' "
                         "precision) or --fp16")


def check_save_interval(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for a ``--save`` without a positive ``--save-interval``, or a ``--save-retain-interval``
    that is not a positive multiple of it: megatron-core 0.19.2's ``validate_args`` asserts each without a message,
    and without ``--save`` it ignores them. ``args`` are parsed, not yet validated."""
    if args.save is None:
        return
    interval, retain = args.save_interval, args.save_retain_interval
    if interval is None or interval < 1:
        given = "without --save-interval" if interval is None else f"with --save-interval {interval}"
        raise ValueError(f"--save {args.save} {given}: megatron saves every --save-interval iterations, so it needs "
                         "a positive one (e.g. --save-interval 1000), or drop --save to train without checkpoints")
    if retain is not None and (retain < 1 or retain % interval):
        multiple = interval * max(1, math.ceil(retain / interval))
        raise ValueError(f"--save-retain-interval {retain} is not a positive multiple of --save-interval {interval}: "
                         "megatron keeps the checkpoints at multiples of it and deletes the others, so it must be "
                         f"one of the saved iterations (e.g. --save-retain-interval {multiple})")


def check_wandb_experiment_name(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--wandb-project`` with an empty ``--wandb-exp-name``: megatron-core 0.19.2 raises
    "Please specify the wandb experiment name!" when it sets up the run's writers, on the last rank only, the other
    ranks waiting for it (a name left out is None, which it accepts: W&B names the run). ``args`` are parsed."""
    if args.wandb_project and args.wandb_exp_name == "":
        raise ValueError(f"--wandb-project {args.wandb_project} with an empty --wandb-exp-name: megatron-core 0.19.2 "
                         "refuses it when it sets up the run, on the last rank only, while the other ranks wait; give "
                         "--wandb-exp-name NAME, or leave the flag out for a name W&B chooses")


def check_wandb_directory(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--wandb-project`` with neither ``--wandb-save-dir`` nor ``--save``: megatron-core
    0.19.2 puts the Weights & Biases files under ``--save``'s ``wandb`` directory by default, joins None with it
    when it sets up the run's writers, and stops there with a ``TypeError`` on the last rank only, the other ranks
    waiting for it. ``args`` are parsed, not yet validated."""
    if args.wandb_project and not args.wandb_save_dir and not args.save:
        raise ValueError(f"--wandb-project {args.wandb_project} without --wandb-save-dir or --save: megatron-core "
                         "0.19.2 writes the wandb files to --save's wandb directory by default and, without one, "
                         "stops with a TypeError on the last rank while the other ranks wait; give --wandb-save-dir "
                         "DIR")

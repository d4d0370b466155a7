"""Checks of the checkpoint a run loads against its arguments, made before Megatron initialises.

megatron-core 0.19.2 reads a ``--load`` / ``--pretrained-checkpoint`` checkpoint once the model is on the GPU; a
converted checkpoint it cannot compare, a strictness its loader fails under (for any checkpoint, a converted one, or
a torch-native one saved before its norms carried Transformer Engine's extra state), interleaved SwiGLU rows over a
``[gate; up]`` checkpoint, a checkpoint of another card or vocabulary, or ``--use-checkpoint-args`` replacing the
card's architecture or a flag the user gave would each fail on every rank there (or, for interleaved rows, another
vocabulary, a card differing only where no tensor shape shows it, and ``--use-checkpoint-args``, train another model
without a word). Each check takes the checkpoint as
:func:`megatron.oellm.training.stored_checkpoint.read_loaded_checkpoint` read it, once, for all of them.
"""

from __future__ import annotations

import argparse
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from megatron.oellm.megatron_args import flag_destination
from megatron.oellm.training.args import architecture_value

if TYPE_CHECKING:
    from megatron.oellm.cards import ModelCard
    from megatron.oellm.training.stored_checkpoint import StoredCheckpoint


def resume_compared_args(args: argparse.Namespace) -> dict[str, list[str]]:
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


def check_converted_load(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when ``--load`` names an ``oellm convert hf-to-mcore`` checkpoint that megatron would
    check against run arguments it does not store (:func:`resume_compared_args`), naming ``--finetune``.

    ``checkpoint`` is the one the run loads (:func:`megatron.oellm.training.stored_checkpoint.
    read_loaded_checkpoint`). A converted checkpoint stores only the arguments every load compares (its card's
    shape), since which tokenizer, divisor or batch size a run will use is not known when converting. Megatron skips
    the comparison under ``--finetune``, which for a ``release`` checkpoint changes nothing else: it starts at
    iteration 0 and reads no optimizer or RNG state either way.
    """
    from megatron.oellm.training.stored_checkpoint import converted_args

    if checkpoint is None or checkpoint.fine_tunes or args.finetune:
        return
    compared = resume_compared_args(args)
    stored = converted_args(checkpoint)
    if not compared or stored is None:
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


CONVERTED_LOAD_STRICTNESS = ("log_unexpected", "log_all", "ignore_all")
"""``--dist-ckpt-strictness`` values under which megatron loads a checkpoint lacking ``_extra_state`` objects the
models of both backends ask for: an ``oellm convert hf-to-mcore`` checkpoint (it holds none), or one the torch-native
backend saved before its norms carried one (:func:`check_norm_extra_state`). megatron-core 0.19.2 drops requests for
keys a checkpoint lacks (its "unexpected" keys) under these values, while under the default ``assume_ok_unexpected``
PyTorch's loader fails on them ("Missing key in checkpoint state_dict"), and the ``raise_*`` values raise on them."""
NORM_EXTRA_STATE_SUFFIX = "norm._extra_state"
"""How the checkpoint key of a norm's extra state ends (``decoder.final_layernorm._extra_state``,
``...q_layernorm._extra_state``, a GDN layer's ``...out_norm._extra_state``, ...), which Transformer Engine's norms,
and the torch-native ones since they mirror them, put into a distributed checkpoint."""
RETURNING_STRICTNESS = ("return_unexpected", "return_all")
"""``--dist-ckpt-strictness`` values under which megatron-core 0.19.2's ``dist_checkpointing.load`` returns (state,
missing keys, unexpected keys): megatron's ``load_checkpoint`` takes that tuple for the state and fails on it."""


def check_load_strictness(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when megatron would fail to load ``checkpoint`` (the one the run loads, as
    :func:`check_converted_load` takes it) under the run's ``--dist-ckpt-strictness``: a ``torch_dist`` checkpoint
    under :data:`RETURNING_STRICTNESS`, or an ``oellm convert`` one outside :data:`CONVERTED_LOAD_STRICTNESS`. Either
    fails on every rank once the model is on the GPU."""
    from megatron.oellm.training.stored_checkpoint import converted_args

    if checkpoint is None or checkpoint.ckpt_format != "torch_dist":
        return
    strictness = args.dist_ckpt_strictness
    if strictness in RETURNING_STRICTNESS:
        raise ValueError(f"--dist-ckpt-strictness {strictness}: megatron-core's checkpoint loader then returns the "
                         "mismatched keys beside the state, which megatron's load_checkpoint takes for the state and "
                         f"fails on, so {checkpoint.named_by} would not load; use log_unexpected or log_all to see "
                         "mismatched keys")
    if converted_args(checkpoint) is not None and strictness not in CONVERTED_LOAD_STRICTNESS:
        raise ValueError(f"{checkpoint.named_by} is an `oellm convert hf-to-mcore` checkpoint, which holds no "
                         "_extra_state objects (Transformer Engine's FP8 metadata, mirrored by the torch-native "
                         f"modules) while the model asks for them; --dist-ckpt-strictness {strictness} fails on those "
                         "keys once the model is on the GPU: pass --dist-ckpt-strictness log_unexpected (megatron "
                         "logs them and keeps the modules' extra state as built)")


def check_norm_extra_state(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when the run loads a ``torch_dist`` ``checkpoint`` (as :func:`check_converted_load` takes
    it) that the torch-native backend saved before its RMSNorm carried Transformer Engine's ``_extra_state``, under a
    ``--dist-ckpt-strictness`` outside :data:`CONVERTED_LOAD_STRICTNESS`: the models of both backends ask for the
    norms' extra state, and megatron-core fails on the missing keys on every rank once the model is on the GPU. A
    checkpoint another backend saved, or of another program, is left to megatron."""
    from megatron.oellm.training.stored_checkpoint import oellm_run_args

    if (checkpoint is None or checkpoint.ckpt_format != "torch_dist"
            or args.dist_ckpt_strictness in CONVERTED_LOAD_STRICTNESS):
        return
    found = oellm_run_args(checkpoint.common)
    if found is None or not saved_by_torch_backend(found[0]) or _holds_norm_extra_state(checkpoint):
        return
    raise ValueError(f"{checkpoint.named_by} was saved by the torch-native backend before its RMSNorm carried "
                     "Transformer Engine's _extra_state, which the models of both backends now ask for "
                     f"(decoder.final_layernorm._extra_state and every other *{NORM_EXTRA_STATE_SUFFIX}): "
                     f"--dist-ckpt-strictness {args.dist_ckpt_strictness} fails on those keys once the model is on the "
                     "GPU; pass --dist-ckpt-strictness log_unexpected for the job that loads it (megatron logs them "
                     "and keeps the norms' extra state as built; the checkpoints it saves carry them)")


def saved_by_torch_backend(stored: argparse.Namespace) -> bool:
    """Whether a megatron-oellm run with the ``stored`` arguments ran the torch-native backend: ``--oellm-backend
    torch``, or ``auto`` resolved to it, for which the entry sets ``--transformer-impl local``
    (:func:`megatron.oellm.training.args.with_backend_implementation`)."""
    from megatron.oellm.training.args import TORCH_BACKEND_IMPL

    backend = getattr(stored, "oellm_backend", None)
    return backend == "torch" or (backend == "auto" and getattr(stored, "transformer_impl", None) == TORCH_BACKEND_IMPL)


def _holds_norm_extra_state(checkpoint: StoredCheckpoint) -> bool:
    """Whether the ``torch_dist`` ``checkpoint`` stores a norm's extra state (its DCP keys, in the metadata its reader
    read, are the checkpoint keys followed by ``/shard_<offsets>``)."""
    keys = checkpoint.metadata.state_dict_metadata
    return any(key.partition("/")[0].endswith(NORM_EXTRA_STATE_SUFFIX) for key in keys)


def check_converted_glu_layout(args: argparse.Namespace, checkpoint: StoredCheckpoint | None, card: ModelCard) -> None:
    """Raise ``ValueError`` when the run loads an ``oellm convert hf-to-mcore`` checkpoint (``checkpoint``, as
    :func:`check_converted_load` takes it) with block-interleaved SwiGLU weights
    (:func:`megatron.oellm.convert.stored_checks.interleaved_glu_flags`):
    megatron would load the ``[gate; up]`` rows into the interleaved layout, and every expert would compute with gate
    and up rows mixed, without an error."""
    from megatron.oellm.convert.stored_checks import interleaved_glu_flags
    from megatron.oellm.training.stored_checkpoint import converted_args

    if converted_args(checkpoint) is None:
        return
    interleaved = interleaved_glu_flags(card, args)
    if interleaved:
        raise ValueError(f"{checkpoint.named_by} is an `oellm convert hf-to-mcore` checkpoint, whose SwiGLU weights "
                         f"are stored as [gate; up], while {' and '.join(interleaved)} makes the model read them with "
                         "gate and up rows alternating in blocks: the loaded experts would mix the two; drop "
                         f"{' and '.join(flag.split()[0] for flag in interleaved)}")


VOCABULARY_OUTCOME = ("megatron-core 0.19.2 compares no vocabulary when it loads a distributed checkpoint (nor a "
                      "fine-tuned one) and loads the embedding and output rows into the run's model as they fit: "
                      "fewer rows keep only the checkpoint's first ones without a word")
"""What megatron does with a checkpoint of a larger vocabulary than the run's (:func:`check_checkpoint_vocabulary`)."""
VOCAB_SIZE_TOKENIZERS = ("NullTokenizer", "NullMultimodalTokenizer", "TikTokenizer")
"""``--tokenizer-type`` values whose vocabulary megatron-core 0.19.2's ``build_tokenizer`` takes from
``--vocab-size``; the others (HuggingFace, SentencePiece, GPT-2 BPE, ...) give their own, which megatron pads, ignoring
``--vocab-size``."""


def check_checkpoint_vocabulary(args: argparse.Namespace, loaded: StoredCheckpoint | None, *,
                                vocab_given: bool) -> None:
    """Raise ``ValueError`` when the checkpoint the run loads (``loaded``, as
    :func:`check_checkpoint_architecture` takes it) stores a larger vocabulary than the run's ``--vocab-size`` (the
    card's when not given; ``args`` as parsed, before megatron initialises): :data:`VOCABULARY_OUTCOME`. A smaller
    one is a vocabulary extension, which megatron loads zero-filling the rows past the checkpoint's: printed as a note
    where the run reads no optimizer state and gives ``--vocab-size`` itself (``vocab_given``: not the card's, which
    a job that forgot the flag gets), refused otherwise (the optimizer state holds the checkpoint's rows).

    The stored vocabulary is the card an ``oellm convert hf-to-mcore --vocab-size N`` checkpoint records, else the
    ``vocab_size`` a training run's arguments store, else their ``padded_vocab_size``, compared as megatron padded it
    (:func:`_compare_padding`). Left to megatron: a run whose tokenizer gives the vocabulary (not one of
    :data:`VOCAB_SIZE_TOKENIZERS`), a run without ``--vocab-size``, a checkpoint that stores none, and
    ``--use-checkpoint-args`` from a checkpoint storing its padded vocabulary, which megatron then takes."""
    run = getattr(args, "vocab_size", None)
    if loaded is None or run is None or args.tokenizer_type not in VOCAB_SIZE_TOKENIZERS:
        return
    if args.use_checkpoint_args and getattr(loaded.common.get("args"), "padded_vocab_size", None) is not None:
        return
    stored = _stored_vocabulary(loaded.common)
    if stored is None:
        _compare_padding(args, run, loaded, vocab_given)
    elif stored > run:
        raise ValueError(f"{loaded.named_by} holds a checkpoint of a {stored}-token vocabulary, while the run's is "
                         f"{run} (--vocab-size, the card's when not given): {VOCABULARY_OUTCOME}; pass --vocab-size "
                         f"{stored}, the vocabulary the checkpoint was converted or trained with")
    elif stored < run:
        _extend_vocabulary(args, loaded, f"a {stored}-token vocabulary", stored, run, vocab_given)


def _extend_vocabulary(args: argparse.Namespace, loaded: StoredCheckpoint, held: str, rows: int, run: int,
                       vocab_given: bool) -> None:
    """Print a note that the run's ``--vocab-size`` ``run`` extends the vocabulary of ``loaded`` (which holds
    ``held``, ``rows`` tokens or rows): megatron-core 0.19.2 loads the checkpoint's embedding and output rows with
    ``allow_shape_mismatch``, zero-filling any it does not hold. Raise ``ValueError`` instead when the run takes the
    card's vocabulary without ``--vocab-size`` (``vocab_given`` False: most likely a job that forgot the flag), or
    also reads the checkpoint's optimizer state, whose distributed form megatron loads without that tolerance."""
    from megatron.oellm.training.stored_checkpoint import loads_optimizer_state

    if not vocab_given:
        raise ValueError(f"{loaded.named_by} holds a checkpoint of {held}, fewer than the {run} of the card, which the "
                         f"run takes without --vocab-size; pass --vocab-size {rows} to train it as saved, or "
                         f"--vocab-size {run} to extend its vocabulary")
    if loads_optimizer_state(args, loaded):
        raise ValueError(f"{loaded.named_by} holds a checkpoint of {held}, fewer than the run's --vocab-size {run}, "
                         "and the run also loads its optimizer state, which holds the checkpoint's embedding and "
                         f"output rows only; pass --vocab-size {rows} to resume it, or add --finetune (or "
                         "--no-load-optim) to extend the vocabulary from it")
    print(f"note: {loaded.named_by} holds a checkpoint of {held}, the run's --vocab-size is {run}: megatron-core "
          "loads the embedding and output rows the checkpoint holds and starts any beyond them as zeros; the tokens "
          f"past {rows} were not in the vocabulary it was trained with", flush=True)


def _stored_vocabulary(common: dict) -> int | None:
    """The vocabulary a checkpoint's ``common`` state records: its card's (an ``oellm convert hf-to-mcore``
    checkpoint), else its run arguments' ``vocab_size`` where their tokenizer read it (:data:`VOCAB_SIZE_TOKENIZERS`,
    or none stored); None otherwise."""
    from megatron.oellm.convert.mcore_checkpoint import CARD_KEY

    card = common.get(CARD_KEY)
    if isinstance(card, dict) and card.get("vocab_size") is not None:
        return card["vocab_size"]
    stored = common.get("args")
    if getattr(stored, "tokenizer_type", None) not in (None, *VOCAB_SIZE_TOKENIZERS):
        return None
    return getattr(stored, "vocab_size", None)


TOKENIZER_EXTRA_ROWS = {"NullMultimodalTokenizer": 1}
"""Rows a tokenizer of :data:`VOCAB_SIZE_TOKENIZERS` adds to ``--vocab-size`` before megatron pads it: megatron-core
0.19.2's null multimodal tokenizer puts its end-of-document token past the given size (its ``vocab_size`` is the flag
plus one), the null text tokenizer and tiktoken's take the flag as it is."""


def _compare_padding(args: argparse.Namespace, run: int, loaded: StoredCheckpoint, vocab_given: bool) -> None:
    """Compare the ``padded_vocab_size`` ``loaded``'s run arguments store (with the tensor-parallel size and divisor
    megatron padded with) with the rows the run's vocabulary ``run`` (plus its tokenizer's
    :data:`TOKENIZER_EXTRA_ROWS`) pads to there, as
    :func:`check_checkpoint_vocabulary` compares vocabularies: refuse fewer rows, note more."""
    from megatron.oellm.flops import megatron_padded_vocab

    stored = loaded.common.get("args")
    padded, tp, divisor = (getattr(stored, name, None) for name in
                           ("padded_vocab_size", "tensor_model_parallel_size", "make_vocab_size_divisible_by"))
    if not all(isinstance(value, int) for value in (padded, tp, divisor)):
        return
    extra = TOKENIZER_EXTRA_ROWS.get(args.tokenizer_type, 0)
    ours = megatron_padded_vocab(run + extra, tp, divisor)
    if ours < padded:
        raise ValueError(f"{loaded.named_by} holds a checkpoint of a vocabulary megatron padded to {padded} rows (TP "
                         f"{tp} x --make-vocab-size-divisible-by {divisor}), while the run's --vocab-size {run} (the "
                         f"card's when not given) pads to {ours} there: {VOCABULARY_OUTCOME}; pass the saving run's "
                         f"--vocab-size (one that pads to {padded} rows, such as --vocab-size {padded - extra})")
    if ours > padded:
        _extend_vocabulary(args, loaded, f"a vocabulary megatron padded to {padded} rows", padded - extra, run,
                           vocab_given)


CARD_ARCHITECTURE_ARGS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "group_query_attention",
    "num_query_groups", "kv_channels", "max_position_embeddings", "position_embedding_type", "rotary_base",
    "rotary_percent", "add_bias_linear", "swiglu", "untie_embeddings_and_output_weights", "normalization",
    "num_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_router_pre_softmax",
    "moe_shared_expert_intermediate_size", "hybrid_layer_pattern",
)
"""Architecture arguments a card's flags set that megatron-core 0.19.2's ``load_args_from_checkpoint`` takes from
the checkpoint under ``--use-checkpoint-args`` (most of them over the command line's value); compared with those of
every megatron-oellm checkpoint a run of a card loads (:func:`check_checkpoint_architecture`), together with those
of :data:`CARD_NORM_FLAGS`."""
CARD_NORM_FLAGS = ("--norm-epsilon", "--apply-layernorm-1p")
"""The card's norm flags, compared as :data:`CARD_ARCHITECTURE_ARGS` are under the names megatron's parser stores
them by (:func:`~megatron.oellm.megatron_args.flag_destination`: ``layernorm_epsilon`` and
``layernorm_zero_centered_gamma`` in megatron-core 0.19.2, whose ``load_args_from_checkpoint`` asks for the stale
``apply_layernorm_1p`` and so takes neither). No tensor shape shows them: a checkpoint trained with others loads
into the card's model without an error and computes otherwise."""


SHAPELESS_ARCHITECTURE_ARGS = frozenset({
    "rotary_base", "rotary_percent", "max_position_embeddings", "position_embedding_type", "moe_router_topk",
    "moe_router_pre_softmax", "layernorm_epsilon", "layernorm_zero_centered_gamma",
})
"""Of :data:`CARD_ARCHITECTURE_ARGS` and the destinations of :data:`CARD_NORM_FLAGS`, those no tensor shape or key
shows: a checkpoint that differs only in them loads into the card's model without an error and trains another
model than the one saved."""


def _shapeless_refusal(named_by: str, card: str, fields: str, saved_with: str | None) -> str:
    """The refusal of a checkpoint ``named_by`` that differs from ``card``'s model only in
    :data:`SHAPELESS_ARCHITECTURE_ARGS` (``fields``): what megatron would do, and the way forward (the card it was
    saved with, ``saved_with``, where that is another; else its run's own flags)."""
    way = (f"pass --oellm-model {saved_with} to train from it" if saved_with and saved_with != card else
           "resume it without --oellm-model, with the megatron flags its run stored")
    return (f"{named_by} was trained with other values of --oellm-model {card}'s flags ({fields}): no tensor shape "
            "shows them, so megatron-core would load it without an error and train another model than the one saved; "
            f"{way}, or name a checkpoint of {card}")


_NORM_DESTINATIONS = tuple(flag_destination(flag) for flag in CARD_NORM_FLAGS)
_COMPARED_ARCHITECTURE_ARGS = (*CARD_ARCHITECTURE_ARGS, *_NORM_DESTINATIONS)
"""What :func:`_architecture_differences` compares: the architecture arguments, then the norm flags' destinations."""


def check_checkpoint_architecture(args: argparse.Namespace, loaded: StoredCheckpoint | None,
                                  given: AbstractSet[str] = frozenset(),
                                  sources: list[StoredCheckpoint] | None = None) -> None:
    """Raise ``ValueError`` when the architecture a megatron-oellm checkpoint stores disagrees with the run's card, or
    ``--use-checkpoint-args`` would replace a flag the user gave.

    ``args`` are the run's arguments as parsed, before megatron reads the checkpoint, ``loaded`` the checkpoint the
    run loads (:func:`megatron.oellm.training.stored_checkpoint.read_loaded_checkpoint`), ``given`` the destinations
    the command line or its card sets (the parser destinations of
    :func:`megatron.oellm.training.entry.stated_argv`). With ``--oellm-model``:

    * without ``--use-checkpoint-args``, a checkpoint of another model (:data:`CARD_ARCHITECTURE_ARGS`) passes
      megatron's argument checks (none under ``--finetune`` / ``--pretrained-checkpoint``, three shape fields
      otherwise) and fails on every rank once the card's model is built (:func:`_refuse_another_model`);
    * with it, megatron's ``load_args_from_checkpoint`` overwrites the card's values with the checkpoint's while the
      model is still built from the card (:func:`_refuse_taken_architecture`).

    A hybrid pattern's ``|`` (pipeline stages) may differ, as megatron lets a run re-split the checkpoint's layers (a
    resumed optimizer state may not follow: :mod:`megatron.oellm.training.checkpoint_layout`). Checkpoints of other
    programs and ones without stored arguments are left to megatron; without ``--oellm-model`` the run's flags are the
    user's to choose (``--use-checkpoint-args`` then builds the checkpoint's model). Under ``--use-checkpoint-args``
    the flags of ``given`` megatron replaces are checked too (:func:`_refuse_replaced_flags`), in the checkpoints
    ``sources`` (:func:`checkpoint_args_sources`, read here when not given).
    """
    if args.use_checkpoint_args:
        read = checkpoint_args_sources(args, loaded) if sources is None else sources
        if args.oellm_model:
            _refuse_taken_architecture(args, read)
        _refuse_replaced_flags(args, read, given)
    elif args.oellm_model:
        _refuse_another_model(args, loaded)


def _architecture_differences(stored: argparse.Namespace, args: argparse.Namespace) -> list[tuple[str, object, object]]:
    """(name, stored value, run value) of each of :data:`CARD_ARCHITECTURE_ARGS` and :data:`CARD_NORM_FLAGS` that
    ``stored`` records and the run's ``args`` give another value (a hybrid pattern's ``|`` aside:
    :func:`architecture_value`)."""
    return [(name, getattr(stored, name), getattr(args, name)) for name in _COMPARED_ARCHITECTURE_ARGS
            if getattr(stored, name, None) is not None and hasattr(args, name)
            and architecture_value(name, getattr(stored, name)) != architecture_value(name, getattr(args, name))]


def _checkpoint_card(saved_with: str | None) -> str:
    """The fix naming the card a checkpoint was saved with (``saved_with``, None when its run named none)."""
    return f"--oellm-model {saved_with}" if saved_with else "the --oellm-model of the checkpoint's card"


def _refuse_another_model(args: argparse.Namespace, loaded: StoredCheckpoint | None) -> None:
    """Raise ``ValueError`` when ``loaded`` stores megatron-oellm run arguments of another architecture than the
    run's ``--oellm-model`` (:func:`check_checkpoint_architecture`)."""
    from megatron.oellm.training.stored_checkpoint import oellm_run_args

    found = oellm_run_args(loaded.common) if loaded is not None else None
    if found is None:
        return
    stored, saved_with = found
    differ = _architecture_differences(stored, args)
    fields = "; ".join(f"{name}: checkpoint {ckpt!r}, run {run!r}" for name, ckpt, run in differ)
    if differ and all(name in SHAPELESS_ARCHITECTURE_ARGS for name, _, _ in differ):
        raise ValueError(_shapeless_refusal(loaded.named_by, args.oellm_model, fields, saved_with))
    if differ:
        raise ValueError(f"{loaded.named_by} holds a checkpoint of another model than --oellm-model "
                         f"{args.oellm_model} ({fields}): megatron-core would build the card's model and fail to load "
                         f"the checkpoint into it on every rank; pass {_checkpoint_card(saved_with)} to train from it, "
                         f"or name a checkpoint of {args.oellm_model}")


def checkpoint_args_sources(args: argparse.Namespace, loaded: StoredCheckpoint | None) -> list[StoredCheckpoint]:
    """The checkpoints megatron's ``load_args_from_checkpoint`` reads arguments from under ``--use-checkpoint-args``
    (none without it): each flag's own, ``--pretrained-checkpoint``'s first, ``--load``'s also when the run fine-tunes
    from the former (a non-persistent or ``--ckpt-step`` checkpoint needs no tracker there); the one the run loads is
    ``loaded``, already read. Each read unpickles a ``.metadata`` and the common state: the entry reads them once,
    for :func:`check_checkpoint_architecture`, :func:`check_checkpoint_sequence_length`,
    :func:`check_checkpoint_padded_vocabulary` and
    :func:`~megatron.oellm.training.data_sources.check_tokenizer_given`."""
    from megatron.oellm.training.stored_checkpoint import LOAD, PRETRAINED, load_source, read_checkpoint_of

    if not args.use_checkpoint_args:
        return []
    loaded_flag = (load_source(args) or (None,))[0]
    read = [loaded if flag == loaded_flag else read_checkpoint_of(args, flag) for flag in (PRETRAINED, LOAD)]
    return [checkpoint for checkpoint in read if checkpoint is not None]


def check_checkpoint_sequence_length(args: argparse.Namespace, loaded: StoredCheckpoint | None,
                                     sources: list[StoredCheckpoint] | None = None) -> None:
    """Raise ``ValueError`` when ``--use-checkpoint-args`` is to take the sequence length from the checkpoints it reads
    (``sources``: :func:`checkpoint_args_sources`, read here when not given; ``loaded`` the one the run loads, already
    read) but the command line gives none and none of them stores one: the first job of a chain (nothing saved in
    ``--load`` yet) or a checkpoint saved without run arguments (a converted one). megatron then keeps the command
    line's missing value and stops on a bare assertion in ``validate_args``; the parsed-argument check leaves this
    case here (:func:`~megatron.oellm.training.args.check_sequence_given`)."""
    from megatron.oellm.training.args import sequence_length_fix
    from megatron.oellm.training.stored_checkpoint import LOAD, PRETRAINED

    if not args.use_checkpoint_args or args.seq_length is not None or args.encoder_seq_length is not None:
        return
    read = checkpoint_args_sources(args, loaded) if sources is None else sources
    if any(getattr(checkpoint.common.get("args"), "seq_length", None) is not None for checkpoint in read):
        return
    folders = " or ".join(f"{flag} {value}" for flag in (PRETRAINED, LOAD)
                          if (value := getattr(args, flag_destination(flag), None)))
    if not folders:  # megatron's own assertion names the flags it needs
        return
    raise ValueError(f"--use-checkpoint-args: {folders} holds no checkpoint that stores a sequence length (none saved "
                     f"there yet, or one saved without run arguments, such as a converted one), so megatron has none; "
                     f"{sequence_length_fix(args)}")


def check_checkpoint_padded_vocabulary(args: argparse.Namespace, sources: list[StoredCheckpoint]) -> None:
    """Raise ``ValueError`` when ``--use-checkpoint-args`` takes a padded vocabulary from a checkpoint of ``sources``
    (:func:`checkpoint_args_sources`) that the tensor-parallel size the run builds its model at
    (:func:`tensor_parallel_size_built`) does not divide. megatron-core 0.19.2's ``load_args_from_checkpoint`` takes
    the first stored ``padded_vocab_size`` (``--pretrained-checkpoint``'s before ``--load``'s; no flag sets one), so
    the tokenizer does not pad the vocabulary for the run's TP; its vocab-parallel embedding and output layer then
    stop on an assertion on every rank when the model is built, after GPU set-up. ``oellm plan`` refuses the same
    case in the same words (:func:`megatron.oellm.plan.checkpoint_vocab_not_split`). ``args`` are the run's as
    parsed, before megatron reads the checkpoints."""
    from megatron.oellm.plan import checkpoint_vocab_not_split

    if not args.use_checkpoint_args:
        return
    stored = [(checkpoint, checkpoint.common.get("args")) for checkpoint in sources]
    taken = next(((checkpoint, saved) for checkpoint, saved in stored
                  if isinstance(getattr(saved, "padded_vocab_size", None), int)), None)
    if taken is None:
        return
    checkpoint, saved = taken
    padded, tp = saved.padded_vocab_size, tensor_parallel_size_built(args, sources)
    if tp < 1 or padded % tp == 0:  # a TP below 1 is megatron's validation's to refuse
        return
    saved_tp = getattr(saved, "tensor_model_parallel_size", None)
    example = (f" (the one it was saved with, {saved_tp}, does)"
               if isinstance(saved_tp, int) and saved_tp >= 1 and padded % saved_tp == 0 else "")
    raise ValueError(f"{checkpoint.named_by} stores a padded vocabulary of {padded} rows, which "
                     f"{checkpoint_vocab_not_split(tp)}; run it at a TP that divides {padded}{example}")


def tensor_parallel_size_built(args: argparse.Namespace, sources: list[StoredCheckpoint]) -> int:
    """The tensor-parallel size megatron-core 0.19.2 builds the model at under ``--use-checkpoint-args`` (``args``
    as parsed, ``sources`` as :func:`checkpoint_args_sources` reads them, in megatron's order): the command line's,
    which ``--use-mp-args-from-checkpoint-args`` replaces with each checkpoint's stored one in turn (the last wins),
    for checkpoints of ``checkpoint_version`` 3 or later; from an older one megatron takes ``model_parallel_size``
    only where the run has no tensor-parallel size, which the parser's default always gives."""
    tp = args.tensor_model_parallel_size
    if not args.use_mp_args_from_checkpoint_args:
        return tp
    for checkpoint in sources:
        stored = getattr(checkpoint.common.get("args"), "tensor_model_parallel_size", None)
        if checkpoint.common.get("checkpoint_version", 0) >= 3 and stored is not None:
            tp = stored
    return tp


def _refuse_taken_architecture(args: argparse.Namespace, read: list[StoredCheckpoint]) -> None:
    """Raise ``ValueError`` when ``--use-checkpoint-args`` would take architecture arguments from a megatron-oellm
    checkpoint of ``read`` (:func:`checkpoint_args_sources`) that disagree with the ``--oellm-model`` card
    (:func:`check_checkpoint_architecture`)."""
    from megatron.oellm.training.stored_checkpoint import oellm_run_args

    for checkpoint in read:
        found = oellm_run_args(checkpoint.common)
        differ = _architecture_differences(found[0], args) if found is not None else []
        if not differ:
            continue
        fields = "; ".join(f"{name}: checkpoint {ckpt!r}, card {card!r}" for name, ckpt, card in differ)
        if all(name in _NORM_DESTINATIONS for name, _, _ in differ):  # megatron takes neither of them
            raise ValueError(_shapeless_refusal(checkpoint.named_by, args.oellm_model, fields, found[1])
                             + " (--use-checkpoint-args does not restore the norm settings in megatron-core 0.19.2)")
        raise ValueError(f"--use-checkpoint-args would take architecture arguments from {checkpoint.named_by} that "
                         f"differ from --oellm-model {args.oellm_model}'s while the model is built from the card "
                         f"({fields}); pass {_checkpoint_card(found[1])} to train the checkpoint's model, or drop "
                         "--use-checkpoint-args")


CHECKPOINT_ARGS_REPLACING = (
    "add_position_embedding", "use_rotary_position_embeddings", "rotary_interleaved", "add_qkv_bias", "squared_relu",
    "apply_query_key_layer_scaling", "attention_dropout", "hidden_dropout", "mtp_hybrid_override_pattern",
    "mtp_num_layers", "mtp_use_repeated_layer", "spec", "moe_layer_freq", "moe_single_grouped_weight",
    "moe_single_grouped_bias", "moe_router_score_function", "moe_router_enable_expert_bias",
    "moe_router_topk_scaling_factor", "mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads",
    "heterogeneous_layers_config_path", "heterogeneous_layers_config_encoded_json", "moe_latent_size",
    "tiktoken_pattern",
)
"""Arguments megatron-core 0.19.2's ``load_args_from_checkpoint`` sets from the checkpoint over the command line's
value (wherever the checkpoint stores one), beyond :data:`CARD_ARCHITECTURE_ARGS` and the card's own flags
(``moe_grouped_gemm``): dropout, router and position-embedding choices a user gives as training flags. The
parallel sizes and tokenizer it replaces only under flags asking for that (``--use-mp-args-from-checkpoint-args``,
``--use-tokenizer-model-from-checkpoint-args``)."""


def _refuse_replaced_flags(args: argparse.Namespace, read: list[StoredCheckpoint], given: AbstractSet[str]) -> None:
    """Raise ``ValueError`` when ``--use-checkpoint-args`` would replace a flag of :data:`CHECKPOINT_ARGS_REPLACING`
    that the command line sets (``given``) with another value a checkpoint of ``read`` stores: the run would train with the
    checkpoint's value, the flag ignored without a word. ``given`` holds what the user's command line or its card
    sets (the parser destinations of :func:`megatron.oellm.training.entry.stated_argv`), not the training defaults
    the entry fills in."""
    for checkpoint in read:
        stored = checkpoint.common.get("args")
        for dest in CHECKPOINT_ARGS_REPLACING:
            ours, theirs = getattr(args, dest, None), getattr(stored, dest, None)
            if theirs is None or ours == theirs or dest not in given:
                continue
            flag = _flag_of(dest)
            raise ValueError(f"--use-checkpoint-args: megatron-core would set {dest} to {theirs!r}, the value "
                             f"{checkpoint.named_by} stores, over {flag}'s {ours!r}, and train with that without a "
                             f"word; drop --use-checkpoint-args, or drop {flag}")


def _flag_of(dest: str) -> str:
    """The command-line flag that sets parser destination ``dest`` (its first option string)."""
    from megatron.oellm.megatron_args import megatron_flag
    from megatron.oellm.training.args import oellm_parser

    options = [action.option_strings for action in oellm_parser()._actions if action.dest == dest]
    return options[0][0] if options and options[0] else megatron_flag(dest)

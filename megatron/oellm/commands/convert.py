"""``oellm convert``: checkpoint conversion between Hugging Face safetensors and megatron-core.

``oellm convert hf-to-mcore --model CARD --hf PATH --out DIR`` writes a megatron-core distributed checkpoint that
megatron training loads at any TP/PP/EP; ``oellm convert mcore-to-hf [--model CARD] --mcore DIR --out PATH`` writes
sharded safetensors plus ``config.json`` that ``from_pretrained`` loads (with ``--tokenizer DIR``, also that folder's
tokenizer files, for ``AutoTokenizer`` and evaluation harnesses). ``--vocab-size N`` (either direction)
converts with the card's vocabulary set to N, for checkpoints of a run trained with ``--vocab-size N``. Both stream
one layer at a time. Bad input exits with status 2, a conversion stopped by SIGTERM / SIGHUP / SIGINT (Ctrl-C)
with 128 + the signal number; the reason goes to stderr as ``oellm convert DIRECTION: error: ...``.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from megatron.oellm.commands import int_at_least, refuse
from megatron.oellm.convert.errors import ConversionWarning

if TYPE_CHECKING:
    from megatron.oellm.cards import ModelCard
    from megatron.oellm.convert.summary import ConversionSummary

HELP = "convert checkpoints: hf-to-mcore (safetensors -> megatron-core dist ckpt) and mcore-to-hf"

_OVERWRITE_HELP = ("replace a previous output of this conversion in a non-empty --out; refused if --out holds "
                   "anything else (files are named)")
_TO_MCORE_VOCAB_HELP = ("the vocabulary of the HF checkpoint, when not the card's (an HF model with an extended "
                        "vocabulary, or the export of a run trained with --vocab-size N): converts with the card's "
                        "vocabulary set to N; train from the result with --vocab-size N (the summary's flags say so)")
_TO_HF_VOCAB_HELP = ("the vocabulary the checkpoint was trained with, when not the card's (a run trained with "
                     "--vocab-size N): converts with the card's vocabulary set to N and drops megatron's padding rows "
                     "past N; default: the card's, or without --model the vocabulary the checkpoint stores")
_TOKENIZER_HELP = ("copy the Hugging Face tokenizer files of this folder (tokenizer_config.json with tokenizer.json, "
                   "tokenizer.model or vocab.json; merges.txt, special_tokens_map.json, added_tokens.json, chat "
                   "templates) into the export, byte for byte, so that AutoTokenizer, lm-eval and vLLM load it as is; "
                   "never the folder's config.json or weights. Its token ids must be below the model's vocabulary "
                   "size. With --overwrite, a previous export's tokenizer files are replaced (without --tokenizer "
                   "they are refused, as any file this conversion does not write)")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


MIN_SHARD_BYTES = 2**20
"""The smallest ``--max-shard-size``: a shard holds at least one tensor, so a size below a tensor's writes one file
per tensor (18,867 files for qwen3-30b-a3b), and a unit left out (``5`` for 5 GB) is bytes."""
_SIZE_UNITS = "units are powers of 1024 (5GB = 5 GiB, 500MB = 500 MiB) and a number without a unit is bytes"


def byte_size(text: str) -> int:
    """``"5GB"`` / ``"500MB"`` / ``"1048576"`` -> bytes (powers of 1024); an argparse type. Below
    :data:`MIN_SHARD_BYTES` is refused: it would write every tensor to a file of its own (tens of thousands of files
    for a large MoE, which parallel file systems serve slowly), almost always by a unit left out."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size like 5GB or 500MB, got {text!r}")
    size = int(float(match[1]) * 1024 ** " KMGT".index(match[2].upper() or " "))
    if size < MIN_SHARD_BYTES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is {size} bytes, below the 1MB minimum: a shard holds at least one tensor, so a smaller size "
            "writes a file per tensor (18,867 files for qwen3-30b-a3b), which parallel file systems (Lustre, GPFS) "
            f"serve slowly; {_SIZE_UNITS}")
    return size


def path_argument(text: str) -> Path:
    """A path flag's value with a leading ``~`` expanded (``--out=~/x`` reaches no shell that would expand it, and
    became a folder named ``~``); an empty value (an unset variable in an sbatch script) is refused, since it would
    read or write the current directory. An argparse type."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path (an unset shell variable?); give a directory")
    try:
        return Path(text).expanduser()
    except RuntimeError as error:  # no home directory known for ``~`` or ``~user``
        raise argparse.ArgumentTypeError(f"cannot expand {text!r}: {error}") from error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oellm convert`` and its two directions."""
    directions = parser.add_subparsers(dest="direction", required=True, metavar="DIRECTION")
    to_mcore = directions.add_parser("hf-to-mcore", help="HF safetensors directory -> megatron-core checkpoint",
                                     description="HF safetensors directory -> megatron-core distributed checkpoint "
                                                 "(DIR/latest_checkpointed_iteration.txt + DIR/release)")
    to_mcore.add_argument("--model", required=True, help="card name, e.g. qwen3.5-35b-a3b (see `oellm models`)")
    to_mcore.add_argument("--hf", required=True, type=path_argument,
                          help="HF checkpoint directory (config.json, *.safetensors)")
    to_mcore.add_argument("--out", required=True, type=path_argument,
                          help="output directory; the training entry starts from it with --pretrained-checkpoint DIR "
                               "--dist-ckpt-strictness log_unexpected (its default strictness fails on the "
                               "_extra_state keys a converted checkpoint lacks; the summary prints these flags)")
    to_mcore.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
    to_mcore.add_argument("--vocab-size", type=int_at_least(1), metavar="N", help=_TO_MCORE_VOCAB_HELP)
    to_hf = directions.add_parser("mcore-to-hf", help="megatron-core checkpoint -> HF safetensors directory",
                                  description="megatron-core distributed checkpoint -> HF safetensors directory")
    to_hf.add_argument("--model", help="card name, e.g. qwen3.5-35b-a3b (see `oellm models`); default: the card the "
                                       "checkpoint stores (hf-to-mcore's, or the --oellm-model of the run that saved "
                                       "it), with the vocabulary it stores unless --vocab-size is given")
    to_hf.add_argument("--mcore", required=True, type=path_argument,
                       help="megatron checkpoint directory (with latest_checkpointed_iteration.txt) or one iteration")
    to_hf.add_argument("--out", required=True, type=path_argument, help="output directory for from_pretrained")
    to_hf.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
    to_hf.add_argument("--vocab-size", type=int_at_least(1), metavar="N", help=_TO_HF_VOCAB_HELP)
    to_hf.add_argument("--max-shard-size", type=byte_size, default="5GB", metavar="SIZE",
                       help=f"safetensors shard size, at least 1MB (default 5GB); {_SIZE_UNITS}")
    to_hf.add_argument("--hf-config", type=path_argument, metavar="DIR",
                       help="take config.json (and generation_config.json) from this HF model directory, checked "
                            "against the card (default: those hf-to-mcore kept with the checkpoint, else the card's)")
    to_hf.add_argument("--tokenizer", type=path_argument, metavar="DIR", help=_TOKENIZER_HELP)


def run(args: argparse.Namespace) -> int:
    """Run one conversion and print a summary; on bad input print the reason on stderr and exit 2 (128 + the signal
    number when SIGTERM / SIGHUP / Ctrl-C stopped it); warnings are one ``warning:`` line each, the conversion's
    own (:class:`~megatron.oellm.convert.errors.ConversionWarning`) under any filter: one that ignores warnings (a job
    script's ``PYTHONWARNINGS=ignore`` for the libraries' noise must not hide a lossy conversion), and one that makes
    them errors too (``-W error``: the conversion goes on, as it does without the filter; a script that must fail on
    one greps stderr for ``warning:``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", ConversionWarning)
        warnings.showwarning = _warning_line(f"oellm convert {args.direction}")
        return _convert(args)


def _warning_line(prefix: str) -> Callable[..., None]:
    """A ``warnings.showwarning`` that prints one ``PREFIX: warning: MESSAGE`` line on stderr (the category named
    unless a ``UserWarning``), without Python's file, line number and source line: the conversion's own warnings
    (e.g. norm weights whose shift to megatron's zero-centred form rounds in their dtype) are for the user, not a
    trace."""
    def show(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
        kind = "" if category in (UserWarning, ConversionWarning) else f"{category.__name__}: "
        print(f"{prefix}: warning: {kind}{message}", file=sys.stderr)
    return show


def _convert(args: argparse.Namespace) -> int:
    """:func:`run` within its warning format. The conversion's termination guard is left only once the summary is
    printed: a signal after the output is complete is recorded, and named in one line after the whole summary. A path
    this user may not access that no check of the inputs named is refused in one line too (:func:`_permission_denied`)."""
    from megatron.oellm.cards import CardError, get_card
    from megatron.oellm.convert.errors import ConversionError
    from megatron.oellm.convert.termination import TerminationGuard
    from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
    from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint

    start = time.perf_counter()
    try:
        card, stored_vocab = _card(args) if args.model is None else (get_card(args.model), None)
        vocab_size = args.vocab_size if args.vocab_size is not None else stored_vocab
        if vocab_size is not None:
            card = card.with_vocab(vocab_size)
    except CardError as error:
        return refuse(f"convert {args.direction}", error)
    except ConversionError as error:
        return refuse(f"convert {args.direction}", error, error.exit_status)
    except PermissionError as error:
        return refuse(f"convert {args.direction}", _permission_denied(error))
    except KeyboardInterrupt:  # Ctrl-C before the conversion set its handlers (from then on, a ConversionInterrupted)
        return refuse(f"convert {args.direction}", "stopped by SIGINT; --out is as it was", 128 + signal.SIGINT)
    try:
        with TerminationGuard() as guard:
            if args.direction == "hf-to-mcore":
                summary = hf_to_mcore_checkpoint(card, args.hf, args.out, overwrite=args.overwrite, guard=guard)
            else:
                summary = mcore_to_hf_checkpoint(card, args.mcore, args.out, overwrite=args.overwrite,
                                                 max_shard_bytes=args.max_shard_size, hf_config_dir=args.hf_config,
                                                 tokenizer_dir=args.tokenizer, guard=guard)
            _print_summary(args, card, summary, time.perf_counter() - start, stored_vocab is not None)
    except ConversionError as error:
        return refuse(f"convert {args.direction}", error, error.exit_status)
    except PermissionError as error:  # a path the checks of the inputs did not look at (they name the flag)
        return refuse(f"convert {args.direction}", _permission_denied(error))
    return 0


def _permission_denied(error: PermissionError) -> str:
    """The refusal of a path this user may not read, enter or write that no check named first: one line naming it
    (exit status 2) rather than a traceback, since the path is the user's to fix, not a defect of the code. An error
    that names no file (``PermissionError('Operation not permitted')``) is named by its own text."""
    what = str(error) if error.filename is None else f"{error.filename} ({error.strerror})"
    return (f"this user may not access {what}; give it the permissions needed (chmod), or pass paths this user may "
            "read (and, for --out, write)")


def _card(args: argparse.Namespace) -> tuple[ModelCard, int | None]:
    """mcore-to-hf without ``--model``: the card the checkpoint stores, and the vocabulary it stores where
    ``--vocab-size`` is not given and it differs from the card's (else None). A :class:`ConversionError` naming
    ``--model`` when the checkpoint stores no card, or one that cannot convert it (no longer registered, or of a
    family without a converter): the user typed no card name, so a bare "unknown model" would not say where it came
    from."""
    from megatron.oellm.cards import CardError, get_card
    from megatron.oellm.convert.errors import ConversionError
    from megatron.oellm.convert.family import family_module
    from megatron.oellm.convert.to_hf import checkpoint_card_default

    name, stored_vocab = checkpoint_card_default(args.mcore)
    if name is None:
        raise ConversionError(f"--mcore {args.mcore} stores no card (neither hf-to-mcore's nor a training run's "
                              "--oellm-model): pass --model CARD (see `oellm models`)")
    try:
        card = get_card(name)
        family_module(card)
    except (CardError, ConversionError) as error:
        raise ConversionError(f"--mcore {args.mcore} stores card {name!r} ({error}); pass --model CARD (see `oellm "
                              "models`)") from error
    if args.vocab_size is not None or stored_vocab == card.vocab_size:
        return card, None
    return card, stored_vocab


def _print_summary(args: argparse.Namespace, card: ModelCard, summary: ConversionSummary, seconds: float,
                   stored_vocab: bool = False) -> None:
    """The report of a finished conversion: what was read and written where, in how long, and what was left out;
    ``stored_vocab``: the vocabulary is the one the checkpoint stores (no ``--vocab-size`` given)."""
    from megatron.oellm.convert.summary import training_flags

    vocab = f" with vocabulary {card.vocab_size}" if args.vocab_size is not None else ""
    if stored_vocab:
        vocab = f" with the checkpoint's vocabulary {card.vocab_size}"
    stored = " (the checkpoint's card)" if args.model is None else ""
    print(f"oellm convert {args.direction}: {card.name}{stored}{vocab}: read {summary.tensors_read} tensors, wrote "
          f"{summary.tensors_written} to {summary.output} in {seconds:.1f} s")
    if summary.source:
        print(f"  {summary.source}")
    if summary.padding_rows:
        print(f"  dropped {summary.padding_rows} vocabulary padding rows past the card's {card.vocab_size} (megatron's "
              "make-vocab-size-divisible-by x TP padding)")
    _print_skipped(summary.skipped)
    for note in summary.notes:
        print(f"  {note}")
    if args.direction == "hf-to-mcore":
        flags = training_flags(card.name, summary.output, args.vocab_size)
        print(f"  train from it: {flags} (--load / --save: the run's own folder, which its later jobs resume from)")


def _print_skipped(skipped: list[str]) -> None:
    """Report lines on the source tensors a conversion left out: parts outside the causal-LM text model, and the
    RoPE buffers older HF checkpoints saved (transformers derives them from the config)."""
    from megatron.oellm.convert.hf_names import is_derived_buffer

    buffers = [name for name in skipped if is_derived_buffer(name)]
    outside = [name for name in skipped if not is_derived_buffer(name)]
    if outside:
        print(f"  skipped {len(outside)} tensors outside the causal-LM text model (vision tower, "
              f"multi-token-prediction head; e.g. {outside[0]})")
    if buffers:
        print(f"  skipped {len(buffers)} rotary_emb.inv_freq buffers (e.g. {buffers[0]}): RoPE frequencies derived "
              "from the config, which transformers recomputes when loading; not weights")

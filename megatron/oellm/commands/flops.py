"""``oellm flops MODEL --seq-length N``: training GFLOP per token with its breakdown, optionally TFLOP/s and MFU."""

from __future__ import annotations

import argparse
import difflib
import json
import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from megatron.oellm.cards import CardError, ModelCard, get_card, placeholder_notes
from megatron.oellm.commands import refuse
from megatron.oellm.flops import (
    CORRECTED_MODE,
    FlopError,
    check_overrides,
    megatron_counts,
    megatron_flops_per_token,
    pad_vocab,
    training_flops_per_token,
)
from megatron.oellm.megatron_args import FlagValue, flags_to_argv, megatron_parser
from megatron.oellm.peaks import GPU_PEAKS, mfu, peak_text, peak_tflops

HELP = "training FLOPs per token of a model (corrected count or Megatron's), with breakdown and MFU"

DEFAULT_GPU = "h100-sxm"
"""GPU whose peak the MFU is against without ``--gpu`` (the MN5 tables' peak)."""
DEFAULT_PRECISION = "bf16"
"""Precision of the MFU peak without ``--precision``."""
PEAK_OPTIONS = ("gpu", "precision", "peak_tflops")
"""Options that only choose the MFU peak: without ``--tokens-per-second-per-gpu`` there is no MFU to print."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``oellm flops``."""
    parser.add_argument("model", help="model card name, e.g. qwen3.5-35b-a3b (see `oellm models`)")
    parser.add_argument("--seq-length", type=int, required=True, help="training sequence length in tokens")
    parser.add_argument("--padded-vocab", type=int, default=None,
                        help="padded vocabulary of the output layer: the run tokenizer's as megatron pads it, e.g. "
                             "384 for the recipes' --tokenizer-model byte at TP 1 (default: the card's, padded to "
                             "128); counted as given, any positive size (`oellm plan`, which knows the TP, checks "
                             "it against megatron's padding)")
    parser.add_argument("--megatron-compatible", action="store_true",
                        help="count as megatron-core 0.19.2's num_floating_point_operations does")
    parser.add_argument("--megatron-flag", action="append", default=[], metavar="NAME=VALUE",
                        help="with --megatron-compatible: set or drop one Megatron flag as a run did, e.g. "
                             "group-query-attention=false, hybrid-layer-pattern=none (repeatable); num-layers on a "
                             "hybrid card needs hybrid-layer-pattern=none, which its pattern otherwise overrides")
    parser.add_argument("--document-lengths", type=int, nargs="+", default=None, metavar="L",
                        help="lengths of the documents packed into one sequence (sum = --seq-length)")
    parser.add_argument("--tokens-per-second-per-gpu", type=float, default=None,
                        help="measured throughput: also print TFLOP/s/GPU and MFU")
    parser.add_argument("--gpu", choices=sorted(GPU_PEAKS), default=None,
                        help=f"with --tokens-per-second-per-gpu: GPU of the MFU peak (default {DEFAULT_GPU})")
    parser.add_argument("--precision", choices=["bf16", "fp8"], default=None,
                        help=f"with --tokens-per-second-per-gpu: precision of the MFU peak (default {DEFAULT_PRECISION})")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="with --tokens-per-second-per-gpu: peak TFLOP/s per GPU (overrides --gpu)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object {model, seq_length, padded_vocab, document_lengths, mode, "
                             "gflops_per_token, breakdown}; --megatron-compatible adds megatron_flags and "
                             "corrected_gflops_per_token, --tokens-per-second-per-gpu adds tokens_per_second_per_gpu, "
                             "tflops_per_gpu, peak_tflops, mfu (and peak_note where the peak has one)")


def parse_flag_overrides(items: list[str]) -> dict[str, FlagValue]:
    """``NAME=VALUE`` strings -> Megatron flag overrides: true/false/none, integers and floats are converted. A flag
    given twice (``num-layers`` and ``num_layers`` are one flag) is refused: only one value could be counted."""
    overrides: dict[str, FlagValue] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise FlopError(f"--megatron-flag {item!r}: write NAME=VALUE, e.g. group-query-attention=false")
        earlier = next((given for given in overrides if given.replace("_", "-") == name.replace("_", "-")), None)
        if earlier is not None:
            raise FlopError(f"--megatron-flag {item!r}: {earlier} is already set ({earlier}={overrides[earlier]}); "
                            "give each Megatron flag once")
        words = {"true": True, "false": False, "none": None}
        if text.lower() in words:
            overrides[name] = words[text.lower()]
            continue
        for kind in (int, float):
            try:
                overrides[name] = kind(text)
                break
            except ValueError:
                continue
        else:
            overrides[name] = text
    return overrides


OWN_OPTIONS = {"seq-length": "--seq-length", "vocab-size": "--padded-vocab", "padded-vocab-size": "--padded-vocab"}
"""Megatron flags this command sets from its own options: as a ``--megatron-flag`` one would be ignored
(the vocabulary) or count a different length than the corrected count beside it (the sequence)."""

VOCAB_PADDING_FLAGS = ("make-vocab-size-divisible-by", "tensor-model-parallel-size")
"""Megatron flags that reach its FLOP count only through the padded vocabulary (``--make-vocab-size-divisible-by`` x
TP): this command takes that vocabulary from ``--padded-vocab``, so as a ``--megatron-flag`` either was ignored."""


def given_texts(items: list[str]) -> dict[str, str]:
    """The value text of each ``--megatron-flag NAME=VALUE`` as the user typed it, by NAME: what a refusal quotes
    (``1e3``, not the ``1000.0`` :func:`parse_flag_overrides` turned it into)."""
    return dict(item.split("=", 1) for item in items)


def check_megatron_flags(overrides: dict[str, FlagValue], texts: dict[str, str]) -> None:
    """Raise :class:`FlopError` in one line for an override that is no flag of megatron-core's parser (whatever its
    value, ``false`` included), that one of this command's own options sets (:data:`OWN_OPTIONS`), a switch given
    a value other than true / false, or whose value that parser refuses; Megatron's parser would print its whole
    usage. The parser reads each value as typed (``texts``, by override name: :func:`given_texts`), so a refusal
    quotes the user's text, not its conversion (``hidden-size=1e3`` is no int, whatever float it makes)."""
    parser = megatron_parser()
    options = parser._option_string_actions
    flags = {name.replace("_", "-"): value for name, value in overrides.items()}  # as megatron_namespace reads them
    for name in flags:
        if name in OWN_OPTIONS:
            raise FlopError(f"--megatron-flag {name}: give it as {OWN_OPTIONS[name]}, which both counts use")
        if name in VOCAB_PADDING_FLAGS:
            raise FlopError(f"--megatron-flag {name}: it changes Megatron's count only through the vocabulary padding "
                            "(to make-vocab-size-divisible-by x tensor-model-parallel-size); give the padded "
                            "vocabulary as --padded-vocab, which both counts use")
        if f"--{name}" not in options:
            close = difflib.get_close_matches(name, [option[2:] for option in options if option[:2] == "--"], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise FlopError(f"unknown Megatron flag --{name} in --megatron-flag{hint}")
        if options[f"--{name}"].nargs == 0 and not isinstance(flags[name], bool | None):
            given = next(item for item in overrides if item.replace("_", "-") == name)
            raise FlopError(f"--megatron-flag {given}={texts[given]}: --{name} is a switch; write {given}=true "
                            f"or {given}=false")
    typed = {name.replace("_", "-"): value if isinstance(value, bool | None) else texts[name]
             for name, value in overrides.items()}  # true / false / none as read: no text of theirs is refused
    parser.exit_on_error = False
    try:
        parser.parse_known_args(flags_to_argv(typed))
    except argparse.ArgumentError as error:
        raise FlopError(f"--megatron-flag: {error}") from None


POSITIVE_OPTIONS = {"seq_length": "a length in tokens",
                    "padded_vocab": "leave it out for the card's vocabulary",
                    "tokens_per_second_per_gpu": "a measured throughput",
                    "peak_tflops": "leave it out for the peak of --gpu"}
"""Options that must be positive when given (a zero would otherwise mean "the default" or a meaningless MFU), with
the hint of their error message."""


def check_positive_options(args: argparse.Namespace) -> None:
    """Raise :class:`FlopError` naming the first of :data:`POSITIVE_OPTIONS` given as zero or less, or as nan or inf
    (``float('nan')`` passes ``<= 0`` and would print ``MFU nan%`` with exit status 0)."""
    for name, hint in POSITIVE_OPTIONS.items():
        value = getattr(args, name)
        if value is not None and not 0 < value < math.inf:
            wanted = "positive" if value <= 0 else "finite"
            raise FlopError(f"--{name.replace('_', '-')} must be {wanted}, got {value:g} ({hint})")


def check_peak_options(args: argparse.Namespace) -> None:
    """Raise :class:`FlopError` when :data:`PEAK_OPTIONS` are given without ``--tokens-per-second-per-gpu``: they
    choose the peak of an MFU that is only computed from a measured throughput, and would be dropped silently."""
    given = [f"--{name.replace('_', '-')}" for name in PEAK_OPTIONS if getattr(args, name) is not None]
    if given and args.tokens_per_second_per_gpu is None:
        raise FlopError(f"{' / '.join(given)} only choose{'s' if len(given) == 1 else ''} the peak of the MFU, which "
                        "needs a measured throughput: add --tokens-per-second-per-gpu N")


def megatron_count(card: ModelCard, seq_length: int, padded_vocab: int, document_lengths: list[int] | None,
                   overrides: dict[str, FlagValue]) -> float:
    """Megatron's training FLOPs per token with the ``--megatron-flag`` overrides; a value its formula cannot count
    with (``moe-layer-freq=0``, a ``moe-layer-freq`` list of the wrong length, ``multi-latent-attention`` beside GQA)
    raises :class:`FlopError` naming the overrides, where megatron's ``num_floating_point_operations`` would end in a
    traceback (its own checks are asserts). Without overrides a failure is a defect of ours and keeps its
    traceback."""
    try:
        return megatron_flops_per_token(card, seq_length, padded_vocab, document_lengths, **overrides)
    except (ArithmeticError, AssertionError, IndexError, KeyError, TypeError) as error:
        if not overrides:
            raise
        flags = ", ".join(f"{name}={value}" for name, value in overrides.items())
        raise FlopError(f"Megatron's count fails with --megatron-flag {flags} ({type(error).__name__}: {error}); "
                        "give values a training run could have used") from None


def flops_report(args: argparse.Namespace, card: ModelCard) -> dict[str, Any]:
    """The JSON report of ``oellm flops`` for ``card``, the card ``args.model`` names (:func:`run` loads it once, for
    the count and its placeholder notes); in megatron-compatible mode the breakdown holds Megatron's one total."""
    padded_vocab = pad_vocab(card.vocab_size) if args.padded_vocab is None else args.padded_vocab
    corrected = training_flops_per_token(card, args.seq_length, padded_vocab, args.document_lengths)
    report: dict[str, Any] = {"model": card.name, "seq_length": args.seq_length, "padded_vocab": padded_vocab,
                              "document_lengths": args.document_lengths}
    if args.megatron_compatible:
        overrides = parse_flag_overrides(args.megatron_flag)
        check_overrides(card, overrides)  # before megatron's parser is imported
        with warnings.catch_warnings():  # megatron.training's import warns of every absent fused kernel (TE, Apex):
            warnings.simplefilter("ignore", UserWarning)  # irrelevant to a FLOP count, a dozen lines on stderr
            check_megatron_flags(overrides, given_texts(args.megatron_flag))
            megatron = megatron_count(card, args.seq_length, padded_vocab, args.document_lengths, overrides) / 1e9
        report["megatron_flags"] = overrides
        report.update(mode="megatron_compatible", gflops_per_token=megatron,
                      breakdown={"megatron_total": megatron}, corrected_gflops_per_token=corrected.gflops_per_token)
    else:
        if args.megatron_flag:
            raise FlopError("--megatron-flag needs --megatron-compatible")
        report.update(mode=CORRECTED_MODE, gflops_per_token=corrected.gflops_per_token,
                      breakdown=corrected.gflops_breakdown())
    if args.tokens_per_second_per_gpu is not None:
        gpu = args.gpu or DEFAULT_GPU
        peak = _table_peak(gpu, args.precision or DEFAULT_PRECISION) if args.peak_tflops is None else args.peak_tflops
        tflops = args.tokens_per_second_per_gpu * report["gflops_per_token"] / 1e3
        report.update(tokens_per_second_per_gpu=args.tokens_per_second_per_gpu, tflops_per_gpu=tflops,
                      peak_tflops=peak, mfu=mfu(tflops, peak))
        if args.peak_tflops is None and GPU_PEAKS[gpu].note:
            report["peak_note"] = GPU_PEAKS[gpu].note
    return report


_CORRECTED = "corrected = our count of the matrix work (docs/flops.md)"
"""What the corrected count is: the start of the line under the table's header in that mode."""
CORRECTED_NOTE = f"{_CORRECTED}; Megatron's own count: --megatron-compatible"
"""What the corrected count is, and where Megatron's is: the line under the table's header in that mode."""
CORRECTED_ONLY_NOTE = (f"{_CORRECTED}; megatron-core 0.19.2 has no CKDA layer, so there is no Megatron count of "
                       "this model")
"""The same line for a CKDA card, which ``--megatron-compatible`` refuses."""
REPORTS_SECTION = "the --megatron-flag sets of docs/flops.md, \"How far the MN5 tables are from the corrected count, and why\""
"""Where the flag sets are that reproduce the MN5 report's TFLOP/s with Megatron's count."""
MN5_PADDED_VOCAB = 262144
"""The padded vocabulary of the MN5 report's runs (the OpenEuroLLM tokenizer's, the ``vocab_size`` of the
``examples/oellm/`` MN5 recipes), which every command reproducing its TFLOP/s in docs/flops.md passes: the cards'
own (248,320 for Qwen3.5, 151,936 for Qwen3-30B-A3B) count other logits, 132.0 TFLOP/s instead of the report's 133.2
for Qwen3.5 at 6,971 tokens/s/GPU."""
MN5_FLAG_SET_MODELS = frozenset({"qwen3-30b-a3b", "qwen3.5-35b-a3b"})
"""The cards whose MN5 report #438 tables :data:`REPORTS_SECTION` reproduces, the only ones the pointer to it is
printed for: the cards of the ``examples/oellm/`` recipes on cluster ``mn5`` (which the package does not ship, so the
set is written here; a test checks it against them) less the CKDA hybrid, whose table megatron-compatible mode cannot
count (megatron-core has no CKDA layer). ``qwen3-235b-a22b``'s table is the Jupiter report's, which quotes TFLOP/s
without tokens/s and has no flag set in docs/flops.md; the ``-tiny`` and ``-proxy`` cards are in no report."""


def _table_peak(gpu: str, precision: str) -> float:
    """The peak table's TFLOP/s of ``--gpu gpu`` at ``--precision precision``; a GPU without FP8 tensor cores under
    ``--precision fp8`` is refused naming the two options that give an MFU instead (the table's refusal spoke of
    quoting a peak, naming neither)."""
    known = GPU_PEAKS.get(gpu)
    if known is not None and precision == "fp8" and known.fp8_tflops is None:
        raise FlopError(f"--gpu {gpu} --precision fp8: the {gpu} has no FP8 tensor cores, so there is no FP8 peak to "
                        f"take an MFU against; pass --precision bf16 (its dense BF16 peak, {peak_text(known.bf16_tflops)} "
                        "TFLOP/s) or --peak-tflops P (a peak of your own, TFLOP/s per GPU)")
    return peak_tflops(gpu, precision)


def count_notes(report: dict[str, Any]) -> list[str]:
    """The lines under the table's header: what the corrected count is and where Megatron's is (in that mode; a CKDA
    card has none, :data:`CORRECTED_ONLY_NOTE`), and, for a card of
    :data:`MN5_FLAG_SET_MODELS` unless ``--megatron-flag`` already sets Megatron's flags, how to reproduce the TFLOP/s
    of the MN5 report (whose counts are higher: Qwen3-30B-A3B's 17.0 % above the corrected count, Qwen3.5's 2.7 %
    above Megatron's on the card's flags) with the options :func:`mn5_options` names. Under the header, not at the end:
    scripts read the total from the last line."""
    corrected = report["mode"] == "corrected"
    note = CORRECTED_NOTE if megatron_counts(get_card(report["model"])) else CORRECTED_ONLY_NOTE
    lines = [note] if corrected else []
    if report["model"] in MN5_FLAG_SET_MODELS and not report.get("megatron_flags"):
        lines.append(f"to reproduce the MN5 report's TFLOP/s: {mn5_options(report)}{REPORTS_SECTION}")
    return lines


def mn5_options(report: dict[str, Any]) -> str:
    """The options the command of ``report`` lacks to reproduce the MN5 report's TFLOP/s besides the flag sets, e.g.
    ``--megatron-compatible --padded-vocab 262144 plus ``: without the report's vocabulary (:data:`MN5_PADDED_VOCAB`)
    the flag sets give other TFLOP/s than the report's; '' when it passes both."""
    missing = [] if report["mode"] != "corrected" else ["--megatron-compatible"]
    if report["padded_vocab"] != MN5_PADDED_VOCAB:
        missing.append(f"--padded-vocab {MN5_PADDED_VOCAB}")
    return f"{' '.join(missing)} plus " if missing else ""


def count_lines(report: dict[str, Any]) -> list[str]:
    """The count as table rows: one per component with GFLOP/token and share of the total (corrected mode), or
    Megatron's total beside the corrected one."""
    total = report["gflops_per_token"]
    documents = report["document_lengths"] or [report["seq_length"]]
    lines = [f"{report['model']}  seq {report['seq_length']}  padded vocab {report['padded_vocab']}  "
             f"documents {len(documents)}  mode {report['mode']}"]
    if report["mode"] != "corrected":
        corrected = report["corrected_gflops_per_token"]
        return [*lines, f"{'Megatron total (training)':<26}{total:>14.4f} GFLOP/token",
                f"Megatron flags changed from the card's: {report['megatron_flags'] or 'none'}",
                f"corrected count {corrected:.4f} GFLOP/token: Megatron's is {100 * (total / corrected - 1):+.1f}%"]
    lines.append(f"{'component':<26}{'GFLOP/token':>14}{'share':>9}")
    for name, value in report["breakdown"].items():
        lines.append(f"{name:<26}{value:>14.4f}{100 * value / total:>8.1f}%")
    return [*lines, f"{'total (training)':<26}{total:>14.4f}{100.0:>8.1f}%"]


def throughput_lines(report: dict[str, Any]) -> list[str]:
    """TFLOP/s/GPU and MFU of the measured throughput (none without one), the peak's note, and a warning when the
    MFU exceeds 100 %."""
    if "mfu" not in report:
        return []
    lines = [f"{report['tokens_per_second_per_gpu']:,.0f} tokens/s/GPU -> {report['tflops_per_gpu']:.1f} "
             f"TFLOP/s/GPU, MFU {100 * report['mfu']:.1f}% of {peak_text(report['peak_tflops'])} TFLOP/s"]
    if "peak_note" in report:
        lines.append(f"note: {report['peak_note']}")
    if report["mfu"] > 1:
        lines.append("warning: MFU above 100 %: the throughput exceeds the GPU's peak; check "
                     "--tokens-per-second-per-gpu (per GPU, not per node or job) and the peak (--gpu, "
                     "--precision, --peak-tflops)")
    return lines


def format_table(report: dict[str, Any], notes: Sequence[str] = ()) -> str:
    """Human-readable report: the count's header, ``notes`` (``note:`` lines about the card), what the count is
    (:func:`count_notes`), the count's rows (:func:`count_lines`), then the measured throughput's TFLOP/s and MFU
    (:func:`throughput_lines`)."""
    header, *rows = count_lines(report)
    return "\n".join([header, *notes, *count_notes(report), *rows, *throughput_lines(report)])


def run(args: argparse.Namespace) -> int:
    """Print the report as a table or JSON (a card's placeholder note then on stderr); bad input exits 2 with the
    reason, the options' own checks made before the card is loaded."""
    try:
        check_positive_options(args)
        check_peak_options(args)
        card = get_card(args.model)
        report = flops_report(args, card)
    except (CardError, FlopError, ValueError) as error:
        return refuse("flops", error)
    notes = placeholder_notes([card])
    if args.json:
        print(json.dumps(report, indent=2))
        for line in notes:  # stdout holds the JSON only
            print(line, file=sys.stderr)
    else:
        print(format_table(report, notes))
    return 0

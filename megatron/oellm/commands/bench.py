"""``oellm bench``: one-GPU training-step benchmark of our model against transformers' on the same card."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from megatron.oellm.bench import DEFAULT_SIDES, SIDES
from megatron.oellm.commands import MISSING_PACKAGE_WARNINGS, int_at_least, refuse
from megatron.oellm.paths import nearest_existing, replace_atomically, symlink_loop
from megatron.oellm.peaks import GPU_PEAKS, peak_text, positive_tflops

if TYPE_CHECKING:
    from megatron.oellm.bench.harness import BenchReport

HELP = ("one-GPU training-step benchmark: ours (megatron-core, torch-native; te: on Transformer Engine) vs "
        "transformers, MBS swept")

def int_list(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``; an argparse type, so bad input is a usage error naming the value."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,4, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,2,4, got {text!r}")
    return values


def side_list(text: str) -> tuple[str, ...]:
    """``"ours,te,hf"`` -> ``("ours", "te", "hf")``, each checked against the known sides, repeats dropped."""
    sides = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise argparse.ArgumentTypeError(f"unknown side(s) {unknown or text!r}; choose from {','.join(SIDES)}")
    return tuple(dict.fromkeys(sides))


def config_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> ``(KEY, value)``, the value read as a Python literal when it is one (``True``, ``4``,
    ``'x'``), else kept as a string without surrounding blanks (``alltoall``): megatron-core compares such strings
    exactly, so ``fp32 `` would silently not be ``fp32``."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (a TransformerConfig field), got {text!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw.strip()
    return key.strip(), value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``oellm bench``."""
    parser.add_argument("--model", default="qwen3.5-35b-a3b-proxy-4L",
                        help="card name, a qwen3.5-35b-a3b flavour (default: the 4-layer full-width proxy)")
    parser.add_argument("--seq-length", type=int_at_least(2, " (one next-token target at least)"), default=4096,
                        help="sequence length in tokens (default 4096)")
    parser.add_argument("--mbs", type=int_list, default=(1, 2, 4, 8),
                        help="micro-batch sizes to sweep per side, until one runs out of memory (default 1,2,4,8)")
    parser.add_argument("--warmup", type=int_at_least(1, " (the first warm-up step's loss is reported)"), default=3,
                        help="untimed steps before timing, at least 1 (default 3)")
    parser.add_argument("--steps", type=int_at_least(1), default=10,
                        help="timed steps; the median is reported (default 10)")
    parser.add_argument("--sides", type=side_list, default=DEFAULT_SIDES,
                        help="comma-separated, benchmarked in this order: ours (megatron-core, torch-native backend), "
                             "te (the same model on Transformer Engine's modules), hf (transformers); "
                             f"default {','.join(DEFAULT_SIDES)}")
    parser.add_argument("--ours-config", type=config_override, action="append", default=[], metavar="KEY=VALUE",
                        help="TransformerConfig field for our sides (ours, te), on top of the benchmark's best settings "
                             "(repeatable), e.g. moe_token_dispatcher_type=allgather")
    parser.add_argument("--plain-ours", action="store_true",
                        help="drop the benchmark's best settings for our sides (spec-builder defaults only)")
    peak = parser.add_mutually_exclusive_group()
    peak.add_argument("--gpu", choices=sorted(GPU_PEAKS), default=None,
                      help="GPU whose dense bf16 peak MFU is quoted against (default: the benchmarked GPU's own, "
                           "from its CUDA name; on a GPU missing from the table MFU is n/a unless this or "
                           "--peak-tflops gives a peak)")
    peak.add_argument("--peak-tflops", type=positive_tflops, default=None, metavar="TFLOPS",
                      help="MFU denominator in TFLOP/s per GPU, for a GPU missing from the --gpu table (e.g. a B200: "
                           "its dense bf16 peak)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="profile one step per side at its best MBS; top CUDA operators to DIR/<side>_top_cuda.txt, "
                             "and grouped by input shape to DIR/<side>_top_cuda_by_shape.txt")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    parser.add_argument("--output", type=Path, default=None, metavar="FILE",
                        help="also write the JSON report here; an existing FILE is replaced only if it is blank or an "
                             "earlier bench report (a JSON object with the report's keys), else the run is refused; "
                             "a device such as /dev/null is written as it is")


def ours_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Our sides' TransformerConfig overrides: the best settings (unless ``--plain-ours``), then ``--ours-config``."""
    from megatron.oellm.bench.sides import BEST_OURS_SETTINGS

    overrides = {} if args.plain_ours else dict(BEST_OURS_SETTINGS)
    overrides.update(dict(args.ours_config))
    return overrides


def asks_megatron_core(args: argparse.Namespace) -> bool:
    """Whether the command line gives what only megatron-core or Transformer Engine can judge (``--ours-config``
    fields, the te side). Those are checked before CUDA is looked for, so that a misspelt field or a missing
    Transformer Engine is named on a login node too, at the cost of their imports (seconds); any other run on a node
    without a GPU is refused before them."""
    return bool(args.ours_config) or "te" in args.sides


def print_report(report: BenchReport) -> None:
    """The human-readable report: setup, settings of each side, the table, the ratio and the top kernels."""
    from megatron.oellm.bench.measure import format_table

    cfg = report.config
    print(f"oellm bench  {cfg['model']}  seq {cfg['seq_length']}  warm-up {cfg['warmup']}  steps {cfg['steps']}  "
          f"on {report.device}")
    print(f"FLOPs        {report.flops_per_token / 1e9:.3f} GFLOP/token (corrected count, training); "
          f"{mfu_basis(report)}")
    note = peak_note(report)
    if note is not None:
        print(f"note         {note}")
    for name, settings in report.settings.items():
        print(f"{name:<12} {json.dumps(settings, sort_keys=True)}")
    print("step         forward + loss + backward, no optimizer step, gradients dropped per step")
    print()
    print(format_table(report.results))
    print_failures(report)
    print_ratios(report.summary)
    for name, kernels in report.profiles.items():
        print(f"\ntop CUDA time, {name} (one step at its best MBS):")
        for k in kernels[:15]:
            print(f"  {100 * k['share']:5.1f} %  {k['cuda_ms']:8.2f} ms  {k['calls']:5d}x  {k['name'][:100]}")


def mfu_basis(report: BenchReport) -> str:
    """What the report's MFU is against: the peak table's entry, the peak given by ``--peak-tflops``, or none."""
    cfg = report.config
    if report.peak_tflops is None:
        return "MFU n/a"
    if cfg.get("peak_tflops") is not None:
        return f"MFU vs {peak_text(report.peak_tflops)} TFLOP/s (--peak-tflops)"
    return f"MFU vs {cfg['gpu']} dense bf16 {peak_text(report.peak_tflops)} TFLOP/s"


def peak_note(report: BenchReport) -> str | None:
    """The one line saying why MFU is n/a and which option gives it, on a GPU without a known peak; None otherwise."""
    if report.peak_tflops is not None:
        return None
    return (f"MFU n/a: no peak known for {report.device!r}; give its dense bf16 peak with --peak-tflops TFLOPS, or "
            f"--gpu with one of {', '.join(sorted(GPU_PEAKS))}")


def print_failures(report: BenchReport) -> None:
    """One line per failure of the run (a ``failed`` row's error, a failed profile), below the table."""
    lines = report.failures()
    if lines:
        print("\n" + "\n".join(f"failed: {line}" for line in lines))


def print_ratios(summary: dict[str, Any]) -> None:
    """One line per side pair of :data:`megatron.oellm.bench.measure.RATIOS` that both measured something: each
    side's best micro-batch size and tokens/s, and their ratio."""
    from megatron.oellm.bench.measure import RATIOS

    lines = []
    for numerator, denominator in RATIOS:
        ratio = summary.get(f"speedup_{numerator}_over_{denominator}")
        if ratio is None:
            continue
        a, b = summary[f"best_{numerator}"], summary[f"best_{denominator}"]
        lines.append(f"best MBS: {numerator} {a['mbs']} ({a['tokens_per_s']:,.0f} tokens/s), {denominator} {b['mbs']} "
                     f"({b['tokens_per_s']:,.0f} tokens/s): {numerator} / {denominator} = {ratio:.2f}x")
    if lines:
        print("\n" + "\n".join(lines))


def _check_folder_can_be_made(flag: str, given: Path, folder: Path, which: str) -> None:
    """Raise ValueError naming ``flag`` when ``folder`` (``given`` itself or its parent) could not be created or
    written. Nothing is created: a refused run (no GPU on this node, a bad card) leaves no empty folders behind."""
    folder = folder.absolute()
    existing = nearest_existing(folder)
    if not existing.is_dir():
        raise ValueError(f"{flag} {given}: {which} cannot be created ({existing} is a file)")
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == folder:
            raise ValueError(f"{flag} {given} cannot be written (no write permission)")
        raise ValueError(f"{flag} {given}: {which} cannot be created (no write permission in {existing})")


def _make_folder(flag: str, given: Path, folder: Path, which: str) -> None:
    """Create ``folder`` once the run is going to start, or raise ValueError naming ``flag`` (a folder removed or
    made read-only since the check)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{flag} {given}: {which} cannot be created ({error.strerror})") from error


REPORT_MAX_BYTES = 16 << 20
"""The largest file :func:`is_replaceable_report` reads to tell whether it is an earlier report (one is a few KiB): a
larger one (a long Slurm log) is somebody's data, refused without reading it into memory."""


def written_in_place(output: Path) -> bool:
    """Whether the report goes into the existing ``output`` as it is rather than replacing a file: a device or a FIFO
    (``--output /dev/null``), which a renamed temporary file would replace by a regular one (as root) or fail to."""
    return output.exists() and not output.is_file()


def is_replaceable_report(output: Path) -> bool:
    """Whether the existing ``output`` may be replaced by the report: it is blank, or holds a report an earlier
    ``oellm bench --output`` wrote (a JSON object with every field of
    :class:`megatron.oellm.bench.harness.BenchReport` that has no default). Any other file (a Slurm log, another
    tool's JSON) is somebody's data the report must not replace. A device or FIFO is written, not replaced
    (:func:`written_in_place`), and is not read here (a FIFO would block)."""
    from megatron.oellm.bench.harness import BenchReport

    if written_in_place(output):
        return True
    try:
        if output.stat().st_size > REPORT_MAX_BYTES:
            return False
        text = output.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    if not text.strip():
        return True
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return False
    required = {field.name for field in dataclasses.fields(BenchReport)
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING}
    return isinstance(data, dict) and required <= data.keys()


def check_output_path(output: Path | None, profile: Path | None = None) -> None:
    """Raise ValueError, before any GPU work, when the JSON report could not be written to ``output`` (a directory,
    a loop of symbolic links, a path the ``profile`` folder will take, or a folder that cannot be created or written)
    or would replace a file that is not an earlier report (:func:`is_replaceable_report`): the bench takes minutes,
    and its report would be lost, or the file it replaced."""
    if output is None:
        return
    loop = symlink_loop(output)
    if loop is not None:
        raise ValueError(f"--output {output} runs into a loop of symbolic links ({loop.strerror}); give a path "
                         "without one")
    if output.is_dir():
        raise ValueError(f"--output {output} is a directory; give a file name")
    if profile is not None and (output.absolute() == profile.absolute() or output.absolute() in
                                profile.absolute().parents):
        raise ValueError(f"--output {output} is where --profile {profile} puts its folder; give another file name")
    if not written_in_place(output):  # the temporary file goes beside the file replaced: a link's target
        _check_folder_can_be_made("--output", output, Path(os.path.realpath(output)).parent, "its folder")
    if output.exists() and not os.access(output, os.W_OK):
        raise ValueError(f"--output {output} cannot be written (no write permission)")
    if output.exists() and not is_replaceable_report(output):
        raise ValueError(f"--output {output} exists and is not an earlier bench report (a JSON object with the "
                         "report's keys), which the report would replace; give another file name, or remove it")


def write_report(output: Path, text: str) -> None:
    """Write the JSON report ``text`` to ``output``: into a device or FIFO as it is (:func:`written_in_place`), else
    through :func:`megatron.oellm.paths.replace_atomically`, so that a failure mid-write keeps an earlier report."""
    if written_in_place(output):
        output.write_text(text)
    else:
        replace_atomically(output, lambda temporary: Path(temporary).write_text(text))


def check_profile_dir(profile: Path | None) -> None:
    """Raise ValueError, before any GPU work, when the profile tables could not be written to the folder
    ``profile`` (a file is in the way, or the folder cannot be created or written): they are written after the
    first side's sweep, and failing there would lose every figure of the run."""
    if profile is None:
        return
    if profile.exists() and not profile.is_dir():
        raise ValueError(f"--profile {profile} is a file; give a folder for the profile tables")
    _check_folder_can_be_made("--profile", profile, profile, "the folder")


def make_output_folders(output: Path | None, profile: Path | None) -> None:
    """Create the folders of ``--profile`` and ``--output`` that :func:`check_profile_dir` and
    :func:`check_output_path` found missing, once nothing else refuses the run."""
    if profile is not None:
        _make_folder("--profile", profile, profile, "the folder")
    if output is not None:
        _make_folder("--output", output, output.parent, "its folder")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print (and write) its report, exit 1 when a side failed (its figures so far, and the
    other sides', are in the report); exit 2, with the reason on stderr, on a bad card/configuration (our side's
    overrides included), on an unwritable ``--output`` or ``--profile`` (checked first, so a refusal names the
    argument even where there is no GPU), or without CUDA. Without CUDA the refusal comes before megatron-core,
    fla and transformers are imported, unless :func:`asks_megatron_core`. On a GPU without a known peak and neither
    ``--gpu`` nor ``--peak-tflops`` it measures all the same, MFU n/a (:func:`peak_note`). The one-rank runtime the
    measurements bring up is shut down after them, whatever their outcome."""
    with warnings.catch_warnings():  # megatron-core's import notes of absent packages came before any refusal
        warnings.filterwarnings("ignore", MISSING_PACKAGE_WARNINGS, UserWarning)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """:func:`run` without the warning filter."""
    import torch

    from megatron.oellm.bench.harness import BenchConfig, run_benchmark, with_device_gpu
    from megatron.oellm.cards import CardError
    from megatron.oellm.runtime import shutdown_single_gpu_runtime

    sides_checked = asks_megatron_core(args)
    try:
        config = BenchConfig(model=args.model, seq_length=args.seq_length, mbs=args.mbs, warmup=args.warmup,
                             steps=args.steps, sides=args.sides, ours_overrides=ours_overrides(args), gpu=args.gpu,
                             peak_tflops=args.peak_tflops, profile_dir=args.profile, check_sides=sides_checked)
        check_profile_dir(args.profile)
        check_output_path(args.output, args.profile)
    except (CardError, ValueError) as error:
        return refuse("bench", error)
    if not torch.cuda.is_available():
        return refuse("bench", "needs a CUDA GPU (torch.cuda.is_available() is False); run it on a GPU node")
    try:
        if not sides_checked:
            config.check_our_sides()
        config = with_device_gpu(config, torch.cuda.get_device_name())
        make_output_folders(args.output, args.profile)
    except ValueError as error:
        return refuse("bench", error)
    try:
        report = run_benchmark(config)
    finally:
        shutdown_single_gpu_runtime()
    data = report.to_dict()
    if args.json:
        print(json.dumps(data, indent=2))
        note = peak_note(report)
        if note is not None:  # stdout holds the JSON only
            print(f"oellm bench: note: {note}", file=sys.stderr)
    else:
        print_report(report)
    if args.output is not None:  # after the figures are on stdout: a full disk or a lost quota keeps them there
        try:
            write_report(args.output, json.dumps(data, indent=2))
        except OSError as error:
            return refuse("bench", f"cannot write the report to --output {args.output} ({error}); the figures are "
                          "printed above", status=1)
    failed = report.failed_sides()
    if failed:
        return refuse("bench", f"side(s) {', '.join(failed)} failed (see the report); the other figures stand",
                      status=1)
    return 0

"""Training entry point: ``torchrun ... -m megatron.oellm.training.entry <Megatron flags> --oellm-model NAME``.

Takes the flags of Megatron-LM's ``pretrain_gpt.py`` / ``pretrain_hybrid.py`` plus the OEL arguments
(:mod:`megatron.oellm.training.args`), fills the named card's architecture flags into the command line (without
``--oellm-model`` the card is read back from Megatron's architecture flags), and runs
``megatron.training``'s pretrain loop with our model provider, data provider and forward step. Checkpoints are
Megatron's (``--save``/``--load``, ``--ckpt-format torch_dist`` for megatron-core distributed checkpointing).
``--help`` prints the entry's own flags and what a run needs (:mod:`megatron.oellm.training.flags`), before torch and
megatron are imported; ``--help-all`` prints Megatron's whole parser.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import megatron.oellm  # noqa: F401  (Python 3.11 provision before megatron.training is imported)
from megatron.oellm.commands import MISSING_PACKAGE_WARNINGS
from megatron.oellm.error_lines import message_or_type, one_line
from megatron.oellm.training.flags import FULL_HELP, SHORT_HELP, asked_help, short_help

if __name__ == "__main__" and asked_help(sys.argv[1:]) in SHORT_HELP:  # before torch and megatron import (seconds)
    sys.stdout.write(short_help())
    raise SystemExit(0)

import torch  # noqa: E402  (after the short --help page, which needs neither torch nor megatron)

if TYPE_CHECKING:
    from megatron.oellm.cards import ModelCard
    from megatron.oellm.models.parallel import ParallelLayout
    from megatron.oellm.training.args import MergedArgv

PROG = "megatron.oellm.training.entry"
"""The entry's name in its one-line error messages (what ``python -m`` runs)."""

JOB_ENVIRONMENT = ("export the job's environment (`oellm recipe RECIPE.toml --dry-run` prints a recipe's [cluster.env] "
                   "exports) to check the line as the job runs")
"""How a login-node user checks a command line with the environment its job runs in, which this node cannot know."""


@contextlib.contextmanager
def missing_package_warnings_ignored(on_gpu_node: bool) -> Iterator[None]:
    """While inside, off a GPU node: megatron-core's and fla's import warnings of a missing Transformer Engine, Apex,
    absl or GPU (:data:`megatron.oellm.commands.MISSING_PACKAGE_WARNINGS`) are not shown. There they are a dozen
    lines before the entry's one refusal, about this node, not the cluster's image the line is checked against; on a
    GPU node they are news about the node that trains, and the warning filters are left alone."""
    if on_gpu_node:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", MISSING_PACKAGE_WARNINGS, UserWarning)
        yield


with missing_package_warnings_ignored(torch.cuda.is_available()):  # megatron-core warns on import
    from megatron.oellm.training.args import (
        add_oellm_arguments,
        check_command_line,
        explicit_destinations,
        merge_card_flags,
        parse_oellm_argv,
        with_backend_implementation,
        with_training_defaults,
    )
    from megatron.oellm.training.load_checks import (
        check_checkpoint_architecture,
        check_checkpoint_padded_vocabulary,
        check_checkpoint_sequence_length,
        check_checkpoint_vocabulary,
        check_converted_glu_layout,
        check_converted_load,
        check_load_strictness,
        check_norm_extra_state,
        checkpoint_args_sources,
    )
    from megatron.oellm.training.startup_checks import refusal_detail, training_batch_detail


def flops_and_peak(args: argparse.Namespace, card: ModelCard | None = None) -> tuple[float, float | None]:
    """Training FLOPs per token of the run's card (``card``, else read from ``args``) and the GPU's peak TFLOP/s
    (None when unknown, said in one ``note:`` line from rank 0, so that an ``MFU: n/a`` names its cause and fix).

    The peak is the dense BF16 one also for FP8 runs, as in the reports' MFU and ``oellm table`` (so a log line and
    a table agree); ``--oellm-peak-tflops`` sets another.
    """
    from megatron.oellm.flops import training_flops_per_token
    from megatron.oellm.training.model_provider import card_from_args
    from megatron.oellm.training.throughput import device_peak_tflops

    card = card_from_args(args) if card is None else card
    flops = training_flops_per_token(card, args.seq_length, padded_vocab=args.padded_vocab_size)
    peak = args.oellm_peak_tflops
    if peak is None:
        device = torch.cuda.get_device_name()
        peak = device_peak_tflops(device, "bf16")
        if peak is None and getattr(args, "rank", 0) == 0:  # one line per job, not one per rank
            print(f"note: the [oellm] throughput line prints MFU n/a: no dense BF16 peak is known for {device!r}; "
                  "--oellm-peak-tflops TFLOPS gives it", flush=True)
    return flops.total, peak


def check_layout(args: argparse.Namespace, card: ModelCard | None = None) -> ParallelLayout:
    """Raise :class:`megatron.oellm.models.parallel.ParallelLayoutError` when the run's parallel layout does not fit
    its card (``card``, else read from ``args``): the spec builders' own check, made before Megatron initialises
    instead of in the model provider (after process groups and GPU memory are set up, on every rank), with the run's
    world size. Megatron's ``validate_args`` passes, for instance, a hybrid pattern whose ``|`` splits a decoder
    layer between two pipeline stages, and a world size that ETP x EP x PP does not divide. Returns the checked
    layout, which keeps its parsed pipeline stages, for the model checks after it (one parse of the layout)."""
    from megatron.oellm.models.parallel import validate_layout
    from megatron.oellm.training.model_provider import card_from_args, check_pipeline_split_flags, layout_from_args

    card = card_from_args(args) if card is None else card
    check_pipeline_split_flags(args, card)
    layout = layout_from_args(args)
    # with the world size: megatron's validate_args checks TP x PP x CP against it, but not ETP x EP x PP, on which
    # megatron-core's parallel state fails on every rank after torch.distributed is up
    validate_layout(card, layout, world_size=getattr(args, "world_size", None))
    return layout


def refuse(error: ValueError) -> int:
    """Print a refused command line as one ``error:`` line on stderr (argparse's form) and return its exit status 2.

    The refusals before Megatron allocates anything (a card conflict, an unknown model, a backend or data flag the
    run cannot honour, flags no card describes) are messages naming the fix; under torchrun a traceback per rank
    would bury them. A message quoting a library's over several lines is joined into one (:func:`one_line`).
    """
    print(f"{PROG}: error: {one_line(error)}", file=sys.stderr)
    return 2


def provenance() -> str:
    """The start-up line naming the code that runs: megatron-oellm's and megatron-core's versions and the directories
    they were imported from. A recipe job made from a source checkout puts that checkout first on the image's
    ``PYTHONPATH``, ahead of the image's installed copy; the log says which one ran. megatron-core's release is
    printed without the ``+<commit>`` its ``__version__`` gets from whatever git repository encloses its folder
    (pyenv's, or a checkout holding the virtual environment: not megatron-core's own commit)."""
    import megatron.core

    import megatron.oellm as oellm
    from megatron.oellm.patches.release import megatron_core_release

    return (f"> megatron-oellm {oellm.__version__} from {Path(oellm.__file__).resolve().parent}, "
            f"megatron-core {megatron_core_release()} from {Path(megatron.core.__file__).resolve().parent}")


def stated_argv(user_argv: Sequence[str]) -> tuple[list[str], MergedArgv | None]:
    """``user_argv`` with the named card's flags filled in: what the user and the card state, before the entry's
    defaults (``ValueError`` for a command line the parser refuses, :func:`check_command_line`, or one contradicting
    the card); and the merge that filled them in (None without ``--oellm-model``), which also holds the parser
    destinations the user's own argv sets. Merged once, for :func:`expanded_argv`, the parser destinations the line
    sets and those the user gave. A card of a family without a spec builder is refused here
    (:func:`check_spec_builder`), before megatron's validation refuses its layer symbols."""
    check_command_line(user_argv)
    merged = merge_card_flags(user_argv)
    if merged:
        check_spec_builder(merged.card)
    return (merged.argv if merged else list(user_argv)), merged


def check_spec_builder(card: ModelCard) -> None:
    """Raise ``ValueError`` when the ``--oellm-model`` ``card``'s family has no spec builder yet
    (:func:`megatron.oellm.models.missing_spec_builder`, ``oellm recipe``'s rule): megatron's ``validate_args``
    refused such a card's layer pattern with its raw "not a valid layer symbol" error (CKDA's 'K'), and no later
    step could build the model."""
    from megatron.oellm.models import SPEC_MODULES, missing_spec_builder

    missing = missing_spec_builder(card.family)
    if missing:
        raise ValueError(f"--oellm-model {card.name}: {missing}, so no run can build its model (megatron's "
                         "validate_args would refuse its layer pattern); train a card of family "
                         f"{' or '.join(sorted(SPEC_MODULES))} (`oellm models` names each card's family)")


def expanded_argv(stated: Sequence[str]) -> list[str]:
    """The :func:`stated_argv` ``stated`` with the training defaults and the backend's implementation filled in: the
    command line Megatron parses."""
    return with_backend_implementation(with_training_defaults(stated))


def training_config(args: argparse.Namespace) -> object:
    """megatron's configuration container of the run (what ``pretrain`` takes), its refusals raised as one
    ``ValueError``. Building it runs megatron-core's ``OptimizerConfig`` checks, which ``validate_args`` leaves to it
    (optimizer state and main-parameter dtypes other than fp32 without ``--use-precision-aware-optimizer``, that
    optimizer with another optimizer than adam, without ``--use-distributed-optimizer`` or without Transformer
    Engine's FusedAdam on this node; off a GPU node the entry builds it from :func:`with_fused_adam_answered`): built
    here, before Megatron initialises, they end in one line instead of a traceback on every rank."""
    from megatron.training.argument_utils import pretrain_cfg_container_from_args

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"\s*It is recommended to use a ModelConfig")
            return pretrain_cfg_container_from_args(args)
    except (AssertionError, ValueError, RuntimeError) as error:
        raise ValueError("megatron's training configuration refuses the run's arguments: "
                         f"{message_or_type(error)}") from error


def asks_transformer_engine_optimizer(args: argparse.Namespace) -> bool:
    """Whether megatron-core's optimizer configuration of validated ``args`` imports Transformer Engine's FusedAdam
    (``--use-precision-aware-optimizer`` without ``--optimizer-cpu-offload``), which imports only beside a GPU."""
    return bool(args.use_precision_aware_optimizer and not args.optimizer_cpu_offload)


def with_fused_adam_answered(args: argparse.Namespace) -> argparse.Namespace:
    """Validated ``args`` for :func:`training_config` on a node without a GPU, where the container is checked, not
    trained with: megatron-core's ``OptimizerConfig`` checks of them as on a GPU node whose Transformer Engine has the
    FusedAdam the precision-aware optimizer needs. Its one question that needs a GPU is that FusedAdam's import, asked
    where :func:`asks_transformer_engine_optimizer`; megatron-core asks it only without ``optimizer_cpu_offload`` (the
    CPU-offloading optimizer, its other one for the precision-aware optimizer, answers it), and reads that field
    nowhere else in the container's checks. So such ``args`` come back as a copy with ``optimizer_cpu_offload`` set:
    every other check (adam only, the distributed optimizer only...) runs as megatron-core has it, not re-implemented
    here; a test compares the verdicts with megatron-core's under a FusedAdam stand-in. Other ``args`` come back as
    they are."""
    if not asks_transformer_engine_optimizer(args):
        return args
    return argparse.Namespace(**{**vars(args), "optimizer_cpu_offload": True})


def validated_args(parse_and_validate: Callable[..., argparse.Namespace],
                   parsed: argparse.Namespace) -> argparse.Namespace:
    """Megatron's ``parse_and_validate_args`` (passed in: importing it imports ``megatron.training``) with the OEL
    arguments; its refusals are ``assert`` statements, raised here as ``ValueError`` naming the failed condition.
    So is a ``TypeError`` raised while an ``assert`` evaluates its condition (``--attention-backend local`` without
    ``--spec``: ``assert args.spec[0] == 'local', ...`` on None), named by that statement, message included. A
    training batch megatron refuses through the evaluation batch sizes is named as the training batch of ``parsed``
    (the command line before validation; :func:`training_batch_detail`).

    It runs before Megatron sets up any GPU or process group, so a refusal there is a bad command line, which under
    torchrun was an assertion traceback per rank."""
    try:
        return parse_and_validate(extra_args_provider=add_oellm_arguments)
    except (AssertionError, TypeError, RuntimeError) as error:
        detail = refusal_detail(error)
        if detail is None:
            raise  # not a refusal: a defect, with its traceback
        raise ValueError("megatron's argument validation refuses the command line: "
                         f"{training_batch_detail(detail, parsed)}") from error


def parse_validate_and_tokenize(*, extra_args_provider: Callable[[argparse.ArgumentParser],
                                                                  argparse.ArgumentParser]) -> argparse.Namespace:
    """On a GPU node, megatron's ``parse_and_validate_args`` up to the tokenizer: its parse and validation
    (:func:`~megatron.oellm.recipes.megatron_validation.parse_and_validate_without_setup`), then the tokenizer megatron
    builds next, which pads the vocabulary the entry's checks read (``padded_vocab_size``). The rest of megatron's
    ``set_global_variables`` (TensorBoard writer, ``wandb.init`` on the last rank, one-logger, timers, signal
    handlers) waits for :func:`set_up_training_globals`, once every check has passed: a refused launch opened a W&B
    run and a TensorBoard event file first."""
    from megatron.training.global_vars import rebuild_tokenizer

    from megatron.oellm.recipes.megatron_validation import parse_and_validate_without_setup

    args = parse_and_validate_without_setup(extra_args_provider=extra_args_provider)
    rebuild_tokenizer(args)
    return args


def set_up_training_globals(args: argparse.Namespace) -> None:
    """megatron's ``set_global_variables`` of checked ``args`` without the tokenizer
    :func:`parse_validate_and_tokenize` built: what ``pretrain`` reads (the global arguments, the microbatch
    calculator, timers) and the run's writers and signal handlers, set up once the entry's checks have passed. A
    refusal there (an ``assert`` or ``ValueError`` the checks did not foresee) is raised as one ``ValueError``, for
    :func:`refuse`; the micro-batch calculator, megatron's first step, is built before any writer opens."""
    from megatron.training.global_vars import set_global_variables

    try:
        set_global_variables(args, build_tokenizer=False)
    except (AssertionError, ValueError) as error:
        detail = refusal_detail(error) if isinstance(error, AssertionError) else message_or_type(error)
        raise ValueError(f"megatron's set-up of the run refuses its arguments: {detail}") from error


def validated_off_gpu(parsed: argparse.Namespace, world_size: int) -> argparse.Namespace:
    """:func:`validated_args` on a node without a GPU: megatron's validation as the cluster's GPUs answer it
    (:func:`megatron.oellm.recipes.megatron_validation.parse_and_validate_on_cluster`), on rank 0 of ``world_size``.
    A refusal this node decided rather than the command line says so: one naming a variable of
    :data:`~megatron.oellm.recipes.megatron_validation.VALIDATION_ENVIRONMENT` (``CUDA_DEVICE_MAX_CONNECTIONS`` for
    tensor parallelism, which a job exports from its recipe's ``[cluster.env]``) names its value in this shell and
    how to check with the job's (:func:`read_here_note`); one naming the world size where no ``WORLD_SIZE`` is
    exported (megatron's then names 1 and no fix) says how to give the job's (:func:`world_size_notes`)."""
    from megatron.oellm.recipes.megatron_validation import VALIDATION_ENVIRONMENT, parse_and_validate_on_cluster

    try:
        return validated_args(functools.partial(parse_and_validate_on_cluster, world_size), parsed)
    except ValueError as error:
        read_here = [name for name in VALIDATION_ENVIRONMENT if name in str(error)]
        notes = [read_here_note("megatron", read_here)] if read_here else []
        notes += world_size_notes(str(error))
        if not notes:
            raise
        raise with_notes(error, notes) from error


def read_here_note(reader: str, names: Sequence[str]) -> str:
    """The note of a refusal off a GPU node that ``reader`` decided on the values of the environment variables
    ``names`` in this shell: they are not the job's, whose environment the job script exports, and how to check the
    line with it."""
    from megatron.oellm.recipes.megatron_validation import environment_read_here

    return f"{reader} read {environment_read_here(names)} from this shell, not the job's environment: {JOB_ENVIRONMENT}"


def world_size_notes(refusal: str) -> list[str]:
    """The note of a ``refusal`` off a GPU node that names the world size where no ``WORLD_SIZE`` is exported (none
    otherwise): that world size is this node's default of 1, not the job's GPU count (the refusal named 1 and no
    fix), and how to give the job's."""
    if "world size" in refusal and "WORLD_SIZE" not in os.environ:
        return ["on a node without a GPU the world size is $WORLD_SIZE, else 1: export the job's GPU count "
                "(e.g. WORLD_SIZE=64)"]
    return []


def with_notes(error: ValueError, notes: Sequence[str]) -> ValueError:
    """``error`` itself without ``notes``, else a ``ValueError`` of its message followed by them."""
    return ValueError("; ".join([str(error), *notes])) if notes else error


def noted_off_gpu(error: ValueError) -> ValueError:
    """A refusal of the entry's checks after megatron's validation, on a node without a GPU, with the notes saying
    what this shell decided rather than the command line: environment variables the entry read from this shell
    (:class:`~megatron.oellm.training.environment_refusal.EnvironmentRefusal`: NVTE attention switches, the allocator
    and NCCL variables of CUDA graphs), which may not be the job's on the GPU node, and a world size that is no
    exported ``WORLD_SIZE`` (:func:`world_size_notes`: the parallel layout check's, :func:`check_layout`)."""
    from megatron.oellm.training.environment_refusal import EnvironmentRefusal

    notes = [read_here_note("the entry", error.names)] if isinstance(error, EnvironmentRefusal) else []
    return with_notes(error, [*notes, *world_size_notes(str(error))])


def launcher_world_size() -> int:
    """The world size megatron reads on a GPU node: the launcher's ``WORLD_SIZE`` (torchrun's, or one exported to
    check a job's parallel sizes on a login node), else 1 (one process started without a launcher). ``ValueError``
    for a ``WORLD_SIZE`` that is not a whole number of at least 1, which torch.distributed could not use either."""
    given = os.environ.get("WORLD_SIZE", "1")
    if not re.fullmatch(r"\s*\+?[0-9]+\s*", given) or int(given) < 1:  # int()'s own forms, ASCII digits only
        raise ValueError(f"WORLD_SIZE={given!r} in the environment is not a number of processes: export the job's GPU "
                         "count (e.g. WORLD_SIZE=64) or unset it for one process")
    return int(given)


def check_gpu_node(world_size: int) -> None:
    """Raise ``ValueError`` when torch sees no CUDA GPU here (a login node, a CPU build of torch, no GPU visible): the
    one place that tells a GPU node from another node. :func:`main` asks it first and, on another node, checks the
    command line as far as a CPU can before it prints this error, which says so. ``world_size`` is the launcher's
    (:func:`launcher_world_size`, which :func:`main` read once): the error names the one the validation ran on.

    megatron's ``validate_args`` asks the GPU for its compute capability on most command lines and training needs
    one, so on a CPU machine every command line was refused as "Torch not compiled with CUDA enabled", which hid the
    refusal that mattered. Without a GPU, :func:`main` answers those questions as the cluster's GPUs would (as
    ``oellm recipe --dry-run`` does, :mod:`megatron.oellm.recipes.megatron_validation`) and leaves out the checks of
    the GPU node's own Transformer Engine, dispatcher kernels and GPU. Its validation reads the variables of
    :data:`~megatron.oellm.recipes.megatron_validation.VALIDATION_ENVIRONMENT` from this shell, not the job's
    environment: the refusal names their values here and how to check with the job's."""
    if torch.cuda.is_available():
        return
    from megatron.oellm.recipes.megatron_validation import environment_read_here

    why = ("a CPU build of torch" if torch.version.cuda is None else
           f"torch {torch.__version__} sees no GPU: check the driver and CUDA_VISIBLE_DEVICES; `oellm doctor` tells")
    raise ValueError(f"the training entry needs a GPU node, and this node has no CUDA GPU ({why}); the command line "
                     "passed the checks that can run here: megatron's validate_args as rank 0 of "
                     f"WORLD_SIZE={world_size} (the launcher's, else 1: export the job's GPU count to check "
                     "its parallel sizes), answered as the cluster's Hopper GPUs and their Transformer Engine "
                     "(--oellm-backend auto resolves to it), then the entry's checks of the data, batch grid, parallel "
                     "layout, --save, checkpoints, model configuration and lr schedule; the GPU node's Transformer "
                     "Engine kernels, MoE dispatcher libraries, packages and GPU are checked where it starts; the checks read "
                     f"{environment_read_here()} from this shell, not the job's environment: {JOB_ENVIRONMENT}")


def help_page(argv: Sequence[str]) -> str | None:
    """The help page ``argv`` asks for (:func:`~megatron.oellm.training.flags.asked_help`), None where it asks none:
    ``--help``/``-h`` the short page of the entry's own flags and what a run needs
    (:func:`~megatron.oellm.training.flags.short_help`), ``--help-all`` Megatron's whole parser with them (about 3,800
    lines, which buried the entry's own flags at their end when ``--help`` printed it), megatron's import warnings of
    the packages a node without a GPU lacks left out (:func:`missing_package_warnings_ignored`)."""
    asked = asked_help(argv)
    if asked != FULL_HELP:
        return short_help() if asked else None
    from megatron.oellm.training.args import full_help_parser

    with missing_package_warnings_ignored(torch.cuda.is_available()):  # building the parser imports megatron.training
        return full_help_parser().format_help()


def main(argv: Sequence[str] | None = None) -> int:
    """Merge the card (if named) and the backend's implementation into the command line, parse it with Megatron's
    parser, train; return 0, or 2 after a one-line :func:`refuse` of a command line refused before training. A
    command line asking for help gets its page (:func:`help_page`) and 0, before any check.

    The launcher's ``WORLD_SIZE`` is checked first, on every node (:func:`launcher_world_size`): megatron's parser,
    which the first checks build, reads it with a bare ``int()``. On a node without a GPU (:func:`check_gpu_node`)
    the backend resolves and megatron's validation runs as on the cluster's GPUs (:func:`validated_off_gpu`, on rank
    0 of that world size), then every later check that needs no GPU; the checks of this node's Transformer Engine
    kernels (the explicit torch backend's feature check runs), MoE dispatcher libraries, packages and activation-logging
    classes, the GPU's peak, and megatron-core's FusedAdam question of ``--use-precision-aware-optimizer`` (not its
    other optimizer checks: :func:`with_fused_adam_answered`) are left to the GPU node; then the
    :func:`check_gpu_node` refusal, status 2. There the import warnings of the packages the node lacks stay out of the
    way (:func:`missing_package_warnings_ignored`)."""
    user_argv = list(sys.argv[1:] if argv is None else argv)
    page = help_page(user_argv)
    if page is not None:
        sys.stdout.write(page)
        return 0
    try:
        world_size = launcher_world_size()
    except ValueError as error:
        return refuse(error)
    try:
        check_gpu_node(world_size)
        no_gpu = None
    except ValueError as error:
        no_gpu = error  # refused once the checks that can run without a GPU have passed
    with missing_package_warnings_ignored(on_gpu_node=no_gpu is None):
        return checked_then_trained(user_argv, world_size, no_gpu)


def checked_then_trained(user_argv: list[str], world_size: int, no_gpu: ValueError | None) -> int:
    """:func:`main` after its checks of the node: ``user_argv`` checked, then trained on a GPU node (``no_gpu`` None)
    and refused with ``no_gpu`` on another, as :func:`main` says; the launcher's ``world_size`` is the one the
    validation off a GPU node takes. There a refusal after that validation carries the notes of what this shell
    decided (:func:`noted_off_gpu`); a GPU node's is the check's own."""
    from megatron.oellm.recipes.megatron_validation import (
        check_model_config_on_cluster,
        cluster_backend,
        pad_vocab_as_megatron,
    )

    on_gpu_node = no_gpu is None
    try:
        stated_line, merged = stated_argv(user_argv)
        with contextlib.nullcontext() if on_gpu_node else cluster_backend():
            argv = expanded_argv(stated_line)
        stated = explicit_destinations(stated_line)  # not the defaults: told apart by value only otherwise
        user_given = merged.user_destinations if merged else stated  # no card: the stated line is the user's
    except ValueError as error:
        return refuse(error)
    sys.argv = [sys.argv[0], *argv]  # Megatron reads sys.argv
    if os.environ.get("RANK", "0") == "0":
        print(provenance(), flush=True)

    from megatron.core.enums import ModelType
    from megatron.training import pretrain

    from megatron.oellm.backends.selection import check_args_support, resolve_backend
    from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step
    from megatron.oellm.training.activation_logs import check_activation_logging
    from megatron.oellm.training.checkpoint_layout import (
        check_checkpoint_format,
        check_optimizer_resharding,
        check_rank_file_layout,
    )
    from megatron.oellm.training.data import train_valid_test_datasets
    from megatron.oellm.training.data_sources import check_data_source, check_tokenizer_given
    from megatron.oellm.training.dispatcher import check_flex_dispatcher, check_flex_layout
    from megatron.oellm.training.fla_kernels import check_fla_backward
    from megatron.oellm.training.forward_step import forward_step
    from megatron.oellm.training.ignored_flags import ignored_flag_warnings
    from megatron.oellm.training.index_cache import check_cache_shared_by_nodes, job_node_count, stale_cache_warnings
    from megatron.oellm.training.lr_schedule import check_lr_schedule
    from megatron.oellm.training.model_provider import card_from_args, model_provider
    from megatron.oellm.training.node_packages import check_parsed_packages, check_validated_packages
    from megatron.oellm.training.run_schedule import check_save_directory, profiler_trace_warnings
    from megatron.oellm.training.sharded_checkpoints import (
        check_fsdp2_resume,
        check_fsdp2_saves_on_this_torch,
        check_fsdp2_torch_dcp,
    )
    from megatron.oellm.training.startup_checks import (
        check_model_args,
        check_parsed_args,
        check_parsed_node_args,
        check_validated_args,
    )
    from megatron.oellm.training.stored_checkpoint import (
        check_checkpoint_folders_not_loops,
        check_exit_on_missing_checkpoint,
        check_load_directory,
        read_loaded_checkpoint,
    )
    from megatron.oellm.training.throughput import ThroughputBasis, install_throughput_logging

    dataset_helpers.apply()
    distrib_optimizer_step.apply()
    try:
        parsed = parse_oellm_argv(argv)
        check_parsed_args(parsed)
        if on_gpu_node:  # the job image's packages: a login node's say nothing of them
            check_parsed_packages(parsed)  # megatron's set-up imports wandb on the last rank
        check_parsed_node_args(parsed)  # before validate_args: the tokenizer megatron builds after it, output folders
        check_checkpoint_folders_not_loops(parsed)  # the checks below take a loop for a missing or unreadable folder
        loaded = read_loaded_checkpoint(parsed)  # once, for every check
        check_load_directory(parsed)
        sources = checkpoint_args_sources(parsed, loaded)  # --use-checkpoint-args' checkpoints: read once, for four
        check_tokenizer_given(parsed, sources)  # megatron builds the tokenizer right after validate_args
        check_checkpoint_architecture(parsed, loaded, stated, sources)  # before megatron overwrites them
        check_checkpoint_vocabulary(parsed, loaded,  # megatron loads as many embedding rows as fit, comparing none
                                    vocab_given="vocab_size" in user_given)
        check_checkpoint_sequence_length(parsed, loaded, sources)  # megatron asserts it bare where none stores one
        check_checkpoint_padded_vocabulary(parsed, sources)  # megatron-core asserts it when the model is built
        # megatron's validation asks the GPU: without one, as the cluster's GPUs would answer
        args = (validated_args(parse_validate_and_tokenize, parsed) if on_gpu_node
                else validated_off_gpu(parsed, world_size))
    except ValueError as error:
        return refuse(error)
    try:
        if on_gpu_node:  # this node's Transformer Engine and kernels
            backend = resolve_backend(args.oellm_backend)
            check_args_support(args.oellm_backend, args)  # unresolved: a refusal under auto says why auto chose torch
            check_flex_dispatcher(args)
        else:  # what is the same on every node
            check_flex_layout(args)
            if args.oellm_backend == "torch":
                check_args_support("torch", args)
        check_validated_args(args)
        check_save_directory(args)  # this node's file system: not in the recipes' checks
        if on_gpu_node:  # this node's packages: a login node's are not the job image's
            check_validated_packages(args)
        if on_gpu_node:  # Transformer Engine's module classes, which import only beside a GPU
            check_activation_logging(args, backend)
        prefixes = check_data_source(args)  # off a GPU node: token ids only where --vocab-size is the vocabulary
        node_local_caches = check_cache_shared_by_nodes(args, prefixes.local, job_node_count(os.environ),
                                                        remote_prefixes=prefixes.remote)
        if not on_gpu_node:  # the card's checks below read the embedding rows the tokenizer gives on a GPU node
            pad_vocab_as_megatron(args)
        if os.environ.get("RANK", "0") == "0":  # node-local or stale index caches, misplaced traces, ignored flags
            for warning in [*node_local_caches, *stale_cache_warnings(args, prefixes.local),
                            *profiler_trace_warnings(args, Path.cwd()),
                            *ignored_flag_warnings(args, explicit_destinations(argv))]:
                print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
        check_exit_on_missing_checkpoint(args)
        check_converted_load(args, loaded)
        check_load_strictness(args, loaded)
        check_norm_extra_state(args, loaded)
        check_checkpoint_format(args, loaded)
        check_rank_file_layout(args, loaded)
        check_optimizer_resharding(args, loaded)
        check_fsdp2_resume(args, loaded)
        check_fsdp2_saves_on_this_torch(args)
        card = card_from_args(args)  # the run's card, read once for the checks and the FLOP count
        layout = check_layout(args, card)
        check_converted_glu_layout(args, loaded, card)
        check_fsdp2_torch_dcp(args, card, loaded)
        if on_gpu_node:
            check_model_args(args, card, layout)
        else:  # megatron-core's TransformerConfig asks Transformer Engine's version and kernels
            check_model_config_on_cluster(args, world_size, {}, layout)
        check_fla_backward(card)
        if on_gpu_node:  # the GPU's peak
            flops_per_token, peak_tflops = flops_and_peak(args, card)
        check_lr_schedule(args)
        if on_gpu_node:
            config_container = training_config(args)
        else:  # checked, FusedAdam's import answered as the GPU node's Transformer Engine would
            training_config(with_fused_adam_answered(args))
            raise no_gpu
    except ValueError as error:
        return refuse(error if on_gpu_node or error is no_gpu else noted_off_gpu(error))
    try:
        set_up_training_globals(args)  # checked: the writers, W&B run and signal handlers of a job that trains
    except ValueError as error:
        return refuse(error)
    if args.num_experts:  # megatron-core's tracker slot, set before pretrain builds a router that records into it
        from megatron.oellm.training.moe_metrics import install_moe_metrics_tracker

        install_moe_metrics_tracker(args.moe_router_load_balancing_type, getattr(args, "hybrid_layer_pattern", None))
    basis = ThroughputBasis(flops_per_token, args.seq_length, peak_tflops, args.oellm_peak_tflops is not None)
    install_throughput_logging(basis)  # the basis line before the first line
    store = None
    if args.inprocess_restart:  # megatron's own restart wrapper, which its pretrain_gpt.py launcher applies too
        from megatron.training.inprocess_restart import maybe_wrap_for_inprocess_restart

        pretrain, store = maybe_wrap_for_inprocess_restart(pretrain)
    pretrain(
        config_container,
        train_valid_test_datasets,
        ModelType.encoder_or_decoder,
        forward_step,
        model_provider=model_provider,
        store=store,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

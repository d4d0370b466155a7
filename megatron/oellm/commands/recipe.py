"""``oellm recipe CONFIG [--dry-run|--submit|--local] [--row N|--nodes N] ...``: run one benchmark table's recipe."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from megatron.oellm.cards import CardError
from megatron.oellm.child_process import exit_status, run_forwarding_signals
from megatron.oellm.commands import MISSING_PACKAGE_WARNINGS, refuse
from megatron.oellm.error_lines import one_line
from megatron.oellm.flops import FlopError, megatron_flops_per_token
from megatron.oellm.models.parallel import ParallelLayoutError
from megatron.oellm.paths import nearest_existing
from megatron.oellm.plan import build_plan, format_plan, micro_batches_per_step, plan_flops
from megatron.oellm.recipes.config import Recipe, RecipeError, slurm_time_text, time_limit_seconds
from megatron.oellm.recipes.host_paths import (
    check_data_paths,
    check_host_paths,
    check_tokenizer_path,
    missing_input_problems,
)
from megatron.oellm.recipes.local import (
    fit_local,
    local_backend_problem,
    local_blocker,
    local_environment,
    missing_spec_builder,
    torchrun_command,
    visible_gpus,
)
from megatron.oellm.recipes.resolve import (
    BYTE_TOKENIZER,
    ResolvedRow,
    RunInputs,
    resolve_row,
    run_vocab_size,
    select_rows,
)
from megatron.oellm.recipes.slurm import (
    check_cluster_directives,
    cross_node_dispatch,
    recipe_dir,
    run_dir,
    sbatch_text,
)
from megatron.oellm.recipes.submission import (
    check_jobs_would_queue,
    check_required_options,
    image_uri_warning,
    job_id,
    missing_required_options,
    prepare_run_dir,
    required_options_text,
    run_dir_problem,
    sbatch_command,
    submit,
)
from megatron.oellm.recipes.timing import RunTime, run_time
from megatron.oellm.recipes.toml_loading import is_open_stream, load_recipe
from megatron.oellm.scaling_table.rows import Window

HELP = "benchmark recipe of a report table: print it (--dry-run), submit it to SLURM (--submit) or run it fitted-down (--local)"

CLUSTER_OVERRIDES = ("partition", "account", "qos", "time", "image", "output_dir")
"""Cluster settings a user may override on the command line."""

OVERRIDE_HELP = {"time": "time limit of every selected row's job (over the config's cluster and row times)"}
"""Help texts of the :data:`CLUSTER_OVERRIDES` that do more than replace the cluster setting."""

SLURM_ONLY_OVERRIDES = tuple(name for name in CLUSTER_OVERRIDES if name != "output_dir")
"""The :data:`CLUSTER_OVERRIDES` that only a SLURM job reads; ``--local`` (torchrun on this machine, no container)
has no use for them (``output_dir`` it does use: its checkpoints go there)."""


@dataclass(frozen=True)
class Job:
    """One row ready to print or submit."""

    number: int
    """The row's 1-based number."""
    directory: Path
    """Its run directory (job script, log, checkpoints)."""
    resolved: ResolvedRow
    """Its validated layout and Megatron flags."""
    script: str
    """Its sbatch script."""
    run_time: RunTime
    """Its time limit and expected run time."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``oellm recipe``."""
    parser.add_argument("config", help="recipe config (examples/oellm/*.toml)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print the validated arguments and sbatch scripts, submit nothing (the default)")
    mode.add_argument("--submit", action="store_true",
                      help="write each row's sbatch script and submit it, once sbatch --test-only accepts every "
                           "selected row; refused without the options the cluster requires (MN5: --account and "
                           "--qos, Jupiter: --account) unless SBATCH_ACCOUNT / SBATCH_QOS / SBATCH_PARTITION give "
                           "them")
    mode.add_argument("--local", action="store_true",
                      help="run the (first selected) row fitted down on this machine's GPUs with torchrun; where "
                           "it cannot (no GPU, no layer for the model yet) print what it would run and the dry "
                           "run, and exit 2")
    rows = parser.add_mutually_exclusive_group()
    rows.add_argument("--row", type=int, help="only this row (1-based, as --dry-run lists them)")
    rows.add_argument("--nodes", type=int, help="only the rows on this many nodes")
    for name in CLUSTER_OVERRIDES:
        parser.add_argument(f"--{name.replace('_', '-')}",
                            help=OVERRIDE_HELP.get(name, f"override the config's cluster {name}"))
    parser.add_argument("--data-path", nargs="+", default=[], help="Megatron data prefixes (default: mock data)")
    parser.add_argument("--tokenizer-model", default="",
                        help="tokenizer of --data-path: a Hugging Face tokenizer, or 'byte' for tools/build_corpus.py")
    parser.add_argument("--save-interval", type=int, default=0,
                        help="save checkpoints every N iterations (default 0: none): a SLURM job in "
                             "<run dir>/checkpoints/job-<job id>, resumed by a requeue of that job "
                             "(scontrol requeue ID, or the job's own after each stop with the recipe's "
                             "requeue = true), never by a new submission; --local in <run dir>/local-checkpoints, "
                             "resumed by the next --local run")
    parser.add_argument("--train-iters", type=int,
                        help="--local only: iterations of the fitted-down run (default: the recipe's [local] value); "
                             "with --save-interval a second, longer run resumes from the saved checkpoint")


def with_cluster_overrides(recipe: Recipe, args: argparse.Namespace) -> Recipe:
    """``recipe`` with the cluster settings given on the command line; a ``--time`` also replaces the rows' own. A bad
    ``--time`` is refused naming the option: the recipe's own check would blame its ``[cluster]`` time. A partition,
    account or QOS ``#SBATCH`` cannot carry is refused here, before any output."""
    if args.time is not None:
        time_limit_seconds(args.time, source="--time ")
    given = {name: getattr(args, name) for name in CLUSTER_OVERRIDES if getattr(args, name) is not None}
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, **given))
    if not args.local:  # a --local run writes no #SBATCH line
        check_cluster_directives(recipe.cluster)
    if args.time is None:
        return recipe
    return dataclasses.replace(recipe, rows=tuple(dataclasses.replace(row, time=args.time) for row in recipe.rows))


def check_local_overrides(args: argparse.Namespace) -> None:
    """Refuse a :data:`SLURM_ONLY_OVERRIDES` option beside ``--local``: the local run would go ahead without it (no
    queue, no time limit, no container), so an ``--image`` or ``--time`` the user meant to apply would be ignored."""
    given = [f"--{name}" for name in SLURM_ONLY_OVERRIDES if getattr(args, name) is not None]
    if given:
        verb, pronoun = ("applies", "it") if len(given) == 1 else ("apply", "them")
        raise RecipeError(f"{', '.join(given)} {verb} to SLURM jobs (--dry-run, --submit) only; a --local run has no "
                          f"queue, time limit or container: drop {pronoun}, or use --dry-run / --submit")


def describe_vocab(recipe: Recipe, inputs: RunInputs) -> str:
    """The run's vocabulary for the header, e.g. `` (vocab 262144)``; '' for the card's."""
    vocab = run_vocab_size(recipe, inputs)
    if inputs.tokenizer_model == BYTE_TOKENIZER:
        return f" (vocab {vocab}: the byte tokenizer's, instead of the recipe's)"
    return "" if vocab is None else f" (vocab {vocab})"


def describe_recipe(recipe: Recipe, inputs: RunInputs, numbers: list[int] | None = None) -> str:
    """Header of ``--dry-run``: the table, model, layout, cluster and the rows with the report's numbers, then the
    ``oellm table`` command of the selected rows ``numbers`` (default: all), the one ``--submit`` of them prints."""
    layout = recipe.parallel
    lines = [f"== {one_line(recipe.title)} ==",  # a TOML multi-line title or label: one line, as the job header's
             f"recipe {recipe.name}: model {recipe.model}{describe_vocab(recipe, inputs)}, seq {recipe.seq_length}, "
             f"{recipe.train_iters} iterations",
             f"parallel: {layout.sizes_label()}" + (f", layout {layout.pipeline_layout}" if layout.pipeline_layout else ""),
             f"cluster {recipe.cluster.name}: {recipe.cluster.gpus_per_node} GPUs/node, image {recipe.cluster.image}"]
    missing = missing_spec_builder(recipe)
    if missing:
        lines.append(f"note: {missing}: --submit refuses this recipe, and megatron's validate_args is not run on it")
    lines += submission_notes(recipe, inputs, numbers or select_rows(recipe))
    if recipe.notes:
        lines += ["", *("  " + line for line in recipe.notes.strip().splitlines())]
    times = [slurm_time_text(time_limit_seconds(recipe.row_time(row))) for row in recipe.rows]
    width = max(8, *map(len, times))  # HH:MM:SS, or D-HH:MM:SS from a day on
    lines += ["", f"{'row':>3}  {'nodes':>5}  {'GPUs':>4}  {'GBS':>5}  {'MBS':>3}  {'seq':>5}  {'iters':>5}  "
              f"{'time':>{width}}  label / overrides"]
    for number, (row, time) in enumerate(zip(recipe.rows, times, strict=True), start=1):
        overrides = {**row.parallel, **row.flags, **row.env}
        text = one_line(row.label) + (f" {overrides}" if overrides else "")
        if row.reference:
            text += "  [report: " + ", ".join(f"{k} {v}" for k, v in row.reference.items()) + "]"
        lines.append(f"{number:>3}  {row.nodes:>5}  {row.nodes * recipe.cluster.gpus_per_node:>4}  "
                     f"{row.global_batch_size:>5}  {row.micro_batch_size:>3}  {recipe.row_seq_length(row):>5}  "
                     f"{recipe.row_train_iters(row):>5}  {time:>{width}}  {text}")
    lines += ["", table_command(recipe, numbers)]
    return "\n".join(lines)


def submission_notes(recipe: Recipe, inputs: RunInputs, numbers: list[int]) -> list[str]:
    """The dry run's lines on what ``--submit`` of rows ``numbers`` will need, refuse or warn of: the ``sbatch``
    options the cluster requires that nothing gives yet (:func:`missing_required_options`), each image, bind source,
    data prefix or tokenizer path that does not exist here (:func:`missing_input_problems`: a dry run away from the
    cluster still runs), each run directory that cannot be created (:func:`run_dir_problems`), and an image given as
    a URI (:func:`image_uri_warning`)."""
    lines = []
    options = missing_required_options(recipe.cluster)
    if options:
        lines.append(f"note: --submit will need {required_options_text(recipe.cluster, options)}")
    problems = [*missing_input_problems(recipe.cluster, inputs.data_path, inputs.tokenizer_model),
                *run_dir_problems(recipe, numbers)]
    lines += [f"note: --submit will refuse this: {problem}" for problem in problems]
    warning = image_uri_warning(recipe.cluster)
    if warning:
        lines.append(f"warning: {warning}")
    return lines


def run_dir_problems(recipe: Recipe, numbers: list[int]) -> list[str]:
    """``--submit``'s refusal of each of rows ``numbers``' run directories that cannot be created
    (:func:`run_dir_problem`: an ``--output-dir`` that is, or lies under, a file), one per existing path the
    directories meet first: an output directory in the way of every row is noted once, not once per row."""
    first_of_each: dict[Path, Path] = {}
    for number in numbers:
        directory = run_dir(recipe, number)
        first_of_each.setdefault(nearest_existing(directory), directory)
    problems = (run_dir_problem(directory) for directory in first_of_each.values())
    return [problem for problem in problems if problem]


def table_command(recipe: Recipe, only: list[int] | None = None) -> str:
    """The ``oellm table`` command that reads the logs of every row's jobs (run directories of the recipe's output
    folder), with the cluster's GPUs per node (the table counts nodes as GPUs / 4 otherwise) and the report's
    efficiency baseline when the recipe names one (``table_baseline_nodes``; the table's own default, its smallest
    run, is another row for the strong-scaling tables; given only to the commands whose rows run on that many nodes)
    and the cluster's GPU model (``--gpu``: the MFU's peak and its note). Rows the report summarised over other
    iterations, or by their mean (``table_window`` / ``table_statistic``), get a command of their own with those
    options, one line each. ``only`` (row numbers, 1-based) limits the commands to those rows' logs (the rows
    selected with ``--row`` / ``--nodes``, or those a submission that failed midway queued): a command of every row
    would name a baseline that none of them runs on, which the table refuses."""
    every_row = range(1, len(recipe.rows) + 1)
    selected = only or every_row
    windows: dict[tuple[str, str], list[int]] = {}
    for number in selected:
        row = recipe.rows[number - 1]
        windows.setdefault((row.table_window, row.table_statistic), []).append(number)
    directory = str(recipe_dir(recipe))
    gpu = f" --gpu {recipe.cluster.gpu}" if recipe.cluster.gpu else ""
    lines = []
    for (window, statistic), numbers in windows.items():
        # quoted whole: oellm table expands them, so a shell that refuses a pattern matching nothing (zsh, bash's
        # failglob) runs the command too while a row is still queued
        logs = (shlex.quote(f"{directory}/row*/slurm-*.out") if len(windows) == 1 and set(selected) == set(every_row)
                else " ".join(shlex.quote(f"{directory}/row{number:02d}-*/slurm-*.out") for number in numbers))
        baseline = (f" --baseline-nodes {recipe.table_baseline_nodes}" if recipe.table_baseline_nodes
                    in {recipe.rows[number - 1].nodes for number in numbers} else "")  # a group without it: default
        options = (f" --window {window}" if window else "") + (f" --statistic {statistic}" if statistic else "")
        command = f"oellm table {logs} --gpus-per-node {recipe.cluster.gpus_per_node}{baseline}{gpu}{options}"
        read = f"{statistic or 'median'} of iterations {window or Window()}"
        lines.append(command if len(windows) == 1 else f"  {_rows_phrase(numbers, f'({read})', f'({read})')}: "
                     f"{command}")
    if len(windows) == 1:
        return f"table of the jobs' logs once they have run: {lines[0]}"
    return "\n".join(["tables of the jobs' logs once they have run:", *lines])


def describe_row(job: Job) -> str:
    """The row's validated layout, how the batch splits, its time limit, and the plan (what each GPU holds, FLOPs
    per token) of the model as megatron builds it."""
    layout, row, resolved = job.resolved.layout, job.resolved.row, job.resolved
    plan = build_plan(resolved.built_card, layout, resolved.world_size)
    micro_batches = micro_batches_per_step(plan, row.global_batch_size, row.micro_batch_size)
    megatron = _megatron_gflops_per_token(resolved) if _has_throughput(row.reference) else None
    note = (cross_node_dispatch_note(resolved) + mock_data_routing_note(resolved)
            + reference_flops_note(row.reference, plan_flops(plan, resolved.card.seq_length).total / 1e9)
            + megatron_column_note(row.reference, megatron))
    return (f"-- row {job.number}: layout ok: {layout.sizes_label()} on {resolved.world_size} GPUs, "
            f"DP {plan.data_parallel}, {micro_batches} micro-batches "
            f"per step\n{note}{job.run_time.describe()}\n{format_plan(plan, resolved.card.seq_length)}")


REFERENCE_FLOPS_TOLERANCE = 0.01
"""Relative difference between the FLOPs per token a row's reference implies and the plan's above which the dry run
says that the report's TFLOP/s and MFU do not compare: its one-decimal TFLOP/s alone are exact to ~0.05 %."""


def _has_throughput(reference: Mapping[str, float]) -> bool:
    """Whether a row's ``reference`` gives both TFLOP/s and tokens/s per GPU, whose ratio is a FLOP count per token."""
    return "tflops_per_gpu" in reference and "tokens_per_s_per_gpu" in reference


def _count_apart(reference: Mapping[str, float], gflops_per_token: float) -> tuple[str, float, str, str] | None:
    """How far the FLOP count per token that a row's ``reference`` TFLOP/s over its tokens/s imply is from
    ``gflops_per_token``: (the notes' opening ``note: the report's ... count N GFLOP/token``, the percentage apart,
    ``above``/``below``, ``higher``/``lower``); None within :data:`REFERENCE_FLOPS_TOLERANCE` or without both
    numbers."""
    if not _has_throughput(reference):
        return None
    tflops, tokens = reference["tflops_per_gpu"], reference["tokens_per_s_per_gpu"]
    implied = tflops * 1e3 / tokens
    off = implied / gflops_per_token - 1
    if abs(off) <= REFERENCE_FLOPS_TOLERANCE:
        return None
    side, reads = ("above", "higher") if off > 0 else ("below", "lower")
    counted = f"note: the report's {tflops} TFLOP/s/GPU at {tokens} tokens/s/GPU count {implied:.2f} GFLOP/token"
    return counted, abs(off) * 100, side, reads


def reference_flops_note(reference: Mapping[str, float], gflops_per_token: float) -> str:
    """A ``note:`` line (with its newline) when a row's ``reference`` TFLOP/s over its tokens/s imply a FLOP count
    per token more than :data:`REFERENCE_FLOPS_TOLERANCE` off ``gflops_per_token`` (the count ``oellm table`` and
    the ``[oellm]`` log line use): the report counted another way (docs/flops.md), so at the same throughput its
    TFLOP/s and MFU read that much apart, and only tokens/s compare; '' otherwise."""
    apart = _count_apart(reference, gflops_per_token)
    if apart is None:
        return ""
    counted, percent, side, reads = apart
    return (f"{counted}, {percent:.1f} % {side} this plan's {gflops_per_token:.2f}: its TFLOP/s and MFU read "
            f"{percent:.1f} % {reads} than oellm table's at the same throughput; compare tokens/s/GPU, if the report's "
            "run built this model (a count that only another model fits says it may not: docs/flops.md, \"How far "
            "the MN5 tables are from the corrected count\")\n")


def _megatron_gflops_per_token(resolved: ResolvedRow) -> float | None:
    """megatron-core's own count for the row's model (what its job log's TFLOP/s use), in GFLOP per token; None
    for a model megatron-core has no formula for (the CKDA layer)."""
    try:
        return megatron_flops_per_token(resolved.built_card, resolved.card.seq_length) / 1e9
    except FlopError:
        return None


def megatron_column_note(reference: Mapping[str, float], megatron_gflops_per_token: float | None) -> str:
    """A ``note:`` line (with its newline) when a row's ``reference`` TFLOP/s over its tokens/s imply a FLOP count
    per token more than :data:`REFERENCE_FLOPS_TOLERANCE` off megatron-core's count for the model the row builds:
    at the same throughput the job log's own TFLOP/s (``oellm table``'s "Megatron TFLOP/s/GPU") then read that much
    apart from the report's. The Qwen3.5 rows: the report's runs built a GPTModel (19.11 GFLOP/token), the recipes a
    HybridModel, whose formula leaves out the attention output gate (18.60). '' otherwise."""
    apart = None if megatron_gflops_per_token is None else _count_apart(reference, megatron_gflops_per_token)
    if apart is None:
        return ""
    counted, percent, side, reads = apart
    return (f"{counted}, {percent:.1f} % {side} megatron-core's {megatron_gflops_per_token:.2f} for the model this "
            f"row builds: they read {percent:.1f} % {reads} than the job log's own TFLOP/s (oellm table's "
            "Megatron TFLOP/s/GPU) at the same throughput (docs/flops.md, \"How far the MN5 tables are from the "
            "corrected count\")\n")


def mock_data_routing_note(resolved: ResolvedRow) -> str:
    """A ``note:`` line (with its newline) when the row routes tokens by the router's choice
    (``moe-router-force-load-balancing`` off) on mock data: the experts' loads, and so the step time, then follow
    megatron's mock token ids instead of text, and the row's throughput does not compare with a report run on text
    (report #438's real-routing runs: the nemotron-cc sample); '' otherwise."""
    flags = resolved.flags
    if not flags.get("mock-data") or flags.get("moe-router-force-load-balancing") or not resolved.card.num_experts:
        return ""
    return ("note: real routing on mock data: the router spreads megatron's mock tokens, not text, over the experts, "
            "so expert loads and throughput differ from a run on text; pass --data-path PREFIX --tokenizer-model NAME "
            "to compare it with the report\n")


def cross_node_dispatch_note(resolved: ResolvedRow) -> str:
    """A ``note:`` line (with its newline) when the row's flex dispatcher (HybridEP or DeepEP) has an expert-parallel
    group larger than one node (:func:`~megatron.oellm.recipes.slurm.cross_node_dispatch`): those kernels then need a
    DeepEP built for RDMA between nodes (HybridEP's multinode build, DeepEP's with NVSHMEM), which the Dockerfile's
    default ``hybridep`` build is not (docs/container.md, "HybridEP across nodes"); '' otherwise."""
    spans = cross_node_dispatch(resolved)
    if spans is None:
        return ""
    backend, group, nodes = spans
    per_node = resolved.world_size // resolved.row.nodes
    build = {"hybridep": "Dockerfile: --build-arg HYBRID_EP_MULTINODE=1",
             "deepep": "DeepEP's internode kernels: NVSHMEM"}[backend]
    return (f"note: the {backend} expert-parallel group ({group} GPUs) spans {nodes} nodes of {per_node} "
            f"GPUs: the image's DeepEP must be built for RDMA between nodes ({build}; docs/container.md, \"HybridEP "
            "across nodes\")\n")


def check_submission(recipe: Recipe, inputs: RunInputs) -> None:
    """What ``--submit`` needs besides valid rows, checked before anything is resolved: a model the job can build,
    the image and bind sources, the data prefixes and a tokenizer path (the login node sees the compute nodes' file
    system), and the ``sbatch`` options the cluster requires (:func:`check_required_options`)."""
    missing = missing_spec_builder(recipe)
    if missing:
        raise RecipeError(f"--submit: {missing}, so every job would stop in megatron's validate_args; --dry-run "
                          "prints the rows")
    check_host_paths(recipe.cluster)
    check_data_paths(inputs.data_path)
    check_tokenizer_path(inputs.tokenizer_model)
    check_required_options(recipe.cluster)


def run(args: argparse.Namespace) -> int:
    """Load the recipe, select rows, then print, submit or run them locally; 2 on a recipe or layout error."""
    with warnings.catch_warnings():  # other warnings, the rows' own, stay visible
        # the cluster image has what a login node lacks: those say nothing about a row (22 lines per dry run)
        warnings.filterwarnings("ignore", MISSING_PACKAGE_WARNINGS, UserWarning)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """:func:`run` without the warning filter."""
    try:
        recipe = with_cluster_overrides(load_recipe(args.config), args)
        numbers = select_rows(recipe, args.row, args.nodes)
        inputs = RunInputs(tuple(args.data_path), args.tokenizer_model, save_interval=args.save_interval)
        if args.train_iters is not None and not args.local:
            raise RecipeError("--train-iters applies to --local runs only (table rows keep the report's iterations)")
        local_blocker_text = ""
        if args.local:
            check_local_overrides(args)
            status = run_local(recipe, numbers[0], inputs, args.train_iters, selected=numbers)
            if isinstance(status, int):
                return status
            local_blocker_text = status
        elif args.submit:
            check_submission(recipe, inputs)
        jobs = (resolve_jobs_for_dry_run(recipe, numbers, inputs) if not (args.local or args.submit)
                else [resolve_job(recipe, number, inputs, read_data=args.submit) for number in numbers])
        if not (args.local or args.submit):  # after the rows resolved: a refusal is the only output, not its tail
            print(describe_recipe(recipe, inputs, numbers))
        if args.submit:  # no sbatch, a row sbatch --test-only rejects, or a run directory that cannot be created,
            sbatch_command()  # stops it before any row is queued
            check_jobs_would_queue({job.number: job.script for job in jobs})
            for job in jobs:
                prepare_run_dir(job.directory)
        if args.submit:
            return submit_jobs(recipe, jobs, args.config)
        for job in jobs:
            print(f"\n{describe_row(job)}\n{job.script}")
        if local_blocker_text:  # a script that asked for training must not read the dry run as success
            raise RecipeError(f"{local_blocker_text}, so it ran nothing (the dry run above shows the rows)")
    except (RecipeError, CardError, ParallelLayoutError) as err:
        return refuse("recipe", err)
    return 0


def submit_jobs(recipe: Recipe, jobs: list[Job], config: str) -> int:
    """Submit ``jobs`` (rows of ``recipe``, which ``sbatch --test-only`` accepted: :func:`check_jobs_would_queue`) in
    row order, after the warning of an image URI (:func:`image_uri_warning`), one line per queued row (after the row's
    :func:`cross_node_dispatch_note` and :func:`mock_data_routing_note`, which the dry run also prints: a user who goes
    straight to ``--submit`` must see that the image needs a multi-node DeepEP build, or that the run's routing follows
    mock tokens), then the ``oellm table`` command of their logs only (:func:`table_command`). 0; 2 when ``sbatch`` still
    refuses a row, and 130 when interrupted (Ctrl-C), after the table command of the rows already queued and a line
    naming them (with their job ids), the row whose ``sbatch`` may or may not have queued it (interrupted) and the
    command that submits the rest: a rerun of the whole command would queue the queued rows a second time."""
    warning = image_uri_warning(recipe.cluster)
    if warning:
        print(f"warning: {warning}")
    queued: dict[int, str] = {}
    try:
        for job in jobs:
            for note in (cross_node_dispatch_note(job.resolved), mock_data_routing_note(job.resolved)):
                if note:
                    print(f"row {job.number}: {note}", end="")
            reply = submit(job.script, job.directory)
            print(f"row {job.number}: {reply} ({job.directory})", flush=True)
            queued[job.number] = job_id(reply)
        print(table_command(recipe, [job.number for job in jobs]))
    except KeyboardInterrupt:
        return _refuse_partial_submission(recipe, jobs, config, queued, None, 130)
    except RecipeError as err:
        return _refuse_partial_submission(recipe, jobs, config, queued, err, 2)
    return 0


def _refuse_partial_submission(recipe: Recipe, jobs: list[Job], config: str, queued: Mapping[int, str],
                               refusal: RecipeError | None, status: int) -> int:
    """Print the ``oellm table`` command of the ``queued`` rows (row -> job id), if any, then refuse with sbatch's
    ``refusal`` of the next row (which queued nothing), or, for None, as interrupted (the next row's ``sbatch`` may
    have queued it), naming the queued rows with their job ids and the command that submits each remaining row;
    return ``status``."""
    if queued:
        print(table_command(recipe, list(queued)))
    rest = [job.number for job in jobs if job.number not in queued]
    ids = list(queued.values())
    rows = (_rows_phrase(list(queued), f"is queued (job {ids[0]})", f"are queued (jobs {', '.join(ids)})")
            if queued else "no row is queued")
    reason = f"interrupted: {rows}; row {rest[0]} may be (see squeue --me)" if refusal is None else f"{refusal}; {rows}"
    given = (f"CONFIG --submit --row N` (CONFIG: the config read from {config}, a stream that is gone; give it "
             "again)" if is_open_stream(Path(config)) else f"{shlex.quote(str(config))} --submit --row N`")
    return refuse("recipe", f"{reason}; submit each remaining row with `oellm recipe {given} and the same options "
                  f"but --nodes (N: {', '.join(map(str, rest))})", status=status)


REFUSED_FLAG = re.compile(r"^\w+: --(?P<name>[a-z0-9][a-z0-9-]*)\b")
"""A refusal about one Megatron flag: ``ValueError: --split '99,1,0' leaves ...``."""


def where_to_set(refusal: str, recipe: Recipe, resolved: ResolvedRow) -> str:
    """Where a recipe sets the Megatron flag a refusal begins with, when the flag is the recipe's to set: given in its
    ``[megatron_flags]`` or the row's ``flags``, or set by nothing else (``--split``: the entry's message says to give
    another value, and ``oellm recipe`` has no ``--split``); '' for a flag the card, layout, row keys or run inputs
    set (``--seq-length`` comes from the row's ``seq_length``, where the message's own fix applies)."""
    match = REFUSED_FLAG.match(refusal)
    if match is None:
        return ""
    name = match["name"]
    if name in resolved.flags and name not in recipe.megatron_flags and name not in resolved.row.flags:
        return ""
    return f" (a recipe sets --{name} in its [megatron_flags] or a row's flags)"


def resolve_job(recipe: Recipe, number: int, inputs: RunInputs, *, read_data: bool = False) -> Job:
    """Row ``number`` validated and resolved. Its Megatron argv must get through the training entry's parser and
    megatron's ``validate_args`` as the cluster runs it (unless the model has no spec builder yet, see
    :func:`check_submission`), and, with ``read_data`` (``--submit``), the entry's checks of the data it names; its
    expected run time must fit its time limit: a job that would stop at start or be killed before its last iteration
    would otherwise wait in the queue for nothing. Every selected row is resolved before any is submitted, so a bad
    row leaves no part of the table queued."""
    from megatron.oellm.recipes.megatron_validation import megatron_refusal  # imports megatron-core: only here
    from megatron.oellm.training.args import argv_refusal

    directory = run_dir(recipe, number)
    # the job script replaces this --save/--load value with its job's own directory under it (JOB_CHECKPOINT_DIR)
    row_inputs = dataclasses.replace(inputs, checkpoint_dir=str(directory / "checkpoints"),
                                     time_limit_s=time_limit_seconds(recipe.row_time(recipe.row(number))))
    try:
        resolved = resolve_row(recipe, recipe.row(number), row_inputs)
        refusal = argv_refusal(resolved.argv)
        if refusal:
            raise RecipeError(f"Megatron's argument parser would stop the job at start: {refusal}")
        if not missing_spec_builder(recipe):
            refusal = megatron_refusal(resolved.argv, resolved.world_size, recipe.row_env(resolved.row),
                                       read_data=read_data)
            if refusal:
                raise RecipeError(f"the training entry would stop the job at start: {refusal}"
                                  f"{where_to_set(refusal, recipe, resolved)}")
        stop = resolved.flags.get("exit-duration-in-mins")
        timing = run_time(resolved.row, recipe.row_time(resolved.row), recipe.row_train_iters(resolved.row),
                          resolved.world_size, resolved.built_card,
                          stop if isinstance(stop, int) and not isinstance(stop, bool) and stop > 0 else None,
                          saves=resolved.flags.get("save") not in (None, False), requeues=recipe.requeue,
                          own_stop=any("exit-duration-in-mins" in flags
                                       for flags in (recipe.megatron_flags, resolved.row.flags)))
        timing.check()
        return Job(number, directory, resolved, sbatch_text(recipe, number, resolved, directory), timing)
    except (RecipeError, CardError, ParallelLayoutError) as err:
        raise RecipeError(f"row {number}: {err}") from err


def resolve_jobs_for_dry_run(recipe: Recipe, numbers: list[int], inputs: RunInputs) -> list[Job]:
    """Each of rows ``numbers`` resolved (:func:`resolve_job`). Where one is refused and more than one was selected,
    the rest are resolved too, and the first refusal ends by naming the other refused rows and those that resolve,
    with the ``--row`` that prints one: a recipe with a refused row (the CKDA table's document-masked rows) printed
    one error and no row."""
    jobs, refused = [], []
    for number in numbers:
        try:
            jobs.append(resolve_job(recipe, number, inputs))
        except RecipeError as err:
            if len(numbers) == 1:
                raise
            refused.append((number, err))
    if not refused:
        return jobs
    message = str(refused[0][1])
    others = [number for number, _err in refused[1:]]
    if others:
        message += f"; {_rows_phrase(others, 'is refused too', 'are refused too')}"
    resolving = [job.number for job in jobs]
    if resolving:
        one = f"resolves (--row {resolving[0]} prints it)"
        message += f"; {_rows_phrase(resolving, one, 'resolve (--row N prints one)')}"
    else:
        message += "; no row resolves"
    raise RecipeError(message)


def _rows_phrase(numbers: list[int], one: str, many: str) -> str:
    """``row 3 <one>`` for one row number, ``rows 1, 2 <many>`` for several."""
    return f"row {numbers[0]} {one}" if len(numbers) == 1 else f"rows {', '.join(map(str, numbers))} {many}"


def _print_notes(resolved: ResolvedRow) -> None:
    """One ``note:`` line per flag the ``--local`` fit set differently from the row on this machine."""
    for note in resolved.notes:
        print(f"note: {note}")


def run_local(recipe: Recipe, number: int, inputs: RunInputs, train_iters: int | None = None,
              selected: list[int] | None = None) -> int | str:
    """Run row ``number`` fitted down with torchrun and return its exit status; where it cannot run here, explain
    why (without a GPU, for a model that has its layers, also what it would run on one GPU) and return the reason
    (the caller prints the dry run, then refuses); that dry run's header is of the ``selected`` rows (``--row`` or
    ``--nodes``; default all), as ``--dry-run``'s.
    The fitted flags pass megatron's ``validate_args`` and the entry's start-up checks first (as ``--submit``'s rows
    do, :func:`megatron.oellm.recipes.megatron_validation.megatron_refusal`), so a refusal is printed once, before
    torchrun starts any rank.

    Checkpoints (with ``--save-interval``) go to ``<run directory>/local-checkpoints`` and are resumed from there.
    """
    from megatron.oellm.recipes.megatron_validation import megatron_refusal  # imports megatron-core: only here

    if train_iters is not None:
        if train_iters < 1:
            raise RecipeError(f"--train-iters must be positive, got {train_iters}")
        recipe = dataclasses.replace(recipe, local=dataclasses.replace(recipe.local, train_iters=train_iters))
    inputs = dataclasses.replace(inputs, checkpoint_dir=str(run_dir(recipe, number) / "local-checkpoints"))
    gpus = visible_gpus()
    blocker = local_blocker(recipe, gpus)
    if not blocker:
        check_data_paths(inputs.data_path)  # else torchrun starts and every rank stops with the same message
        check_tokenizer_path(inputs.tokenizer_model)
        resolved = fit_local(recipe, recipe.row(number), gpus, inputs)
        problem = local_backend_problem(resolved)
        if problem:
            raise RecipeError(f"--local row {number}: {problem}")
        env = local_environment(recipe, recipe.row(number))
        refusal = megatron_refusal(resolved.argv, resolved.world_size, env, read_data=True)
        if refusal:  # else torchrun starts every rank, and each stops with it after importing megatron
            raise RecipeError(f"--local row {number}: the training entry would stop every rank at start: {refusal}")
        command = torchrun_command(resolved)
        _print_notes(resolved)
        print(f"running row {number} fitted down on {gpus} GPU(s):\n{shlex.join(command)}", flush=True)
        return exit_status(run_forwarding_signals(command, env))
    print(f"{blocker}; printing the dry run instead.")
    if gpus == 0 and not missing_spec_builder(recipe):
        example = fit_local(recipe, recipe.row(number), 1, inputs)
        print(f"On one GPU, --local would run row {number} as:\n{shlex.join(torchrun_command(example))}")
        _print_notes(example)
    print()
    print(describe_recipe(recipe, inputs, selected))
    return blocker

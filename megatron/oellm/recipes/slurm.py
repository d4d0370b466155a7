"""SLURM job script of one recipe row: ``srun`` one task per node, Apptainer (or Singularity), ``torchrun`` inside it.

Every value that comes from a user or a config is shell-quoted (``shlex.quote``) in shell lines; ``#SBATCH``
directive values are not parsed by a shell, so they are checked to be plain tokens instead and refused otherwise.
The job binds its run directory, the cluster's ``binds`` and the directories of its inputs (data prefixes, a
tokenizer directory) into the container, and runs in the directory the script was made in (where relative paths were
checked), wherever ``sbatch`` is called. The container command is ``cluster.container_runtime`` (``apptainer``, or
``singularity`` where a site has only that). The cluster environment, with the row's own over it, is exported twice:
as itself, and as ``APPTAINERENV_<NAME>`` (``SINGULARITYENV_<NAME>``), because neither runtime lets a host variable
override one the image sets (the repository's image sets ``PYTORCH_CUDA_ALLOC_CONF``); the names the job's own shell
runs its commands through (:data:`CONTAINER_ONLY_VARIABLES`: ``PATH`` ...) only as the latter. A job made from a source checkout binds it and puts it first on
the image's own ``PYTHONPATH``; the user's own site-packages (``~/.local``, which would come before the image's) are
off; before ``srun``, the job stops with one line when the image does not run on the
node's CPU architecture. A row with checkpoints (``oellm recipe --save-interval``) saves and
resumes them in ``<run dir>/checkpoints/job-<SLURM job id>`` (:data:`JOB_CHECKPOINT_DIR`); a ``save`` / ``load`` the
recipe sets itself stands. A recipe with ``requeue = true`` gets a job that requeues itself while its run makes
progress (:func:`_requeue_start_lines`, :func:`_requeue_end_lines`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import megatron.oellm
from megatron.oellm.doctor.rules import HYBRID_EP_MULTINODE_VARIABLE
from megatron.oellm.error_lines import one_line
from megatron.oellm.paths import source_checkout
from megatron.oellm.recipes.config import (
    CONTAINER_ONLY_VARIABLES,
    CONTAINER_RUNTIMES,
    ClusterSettings,
    Recipe,
    RecipeError,
)
from megatron.oellm.recipes.host_paths import bind_source, input_binds
from megatron.oellm.recipes.resolve import ResolvedRow

ENTRY_MODULE = "megatron.oellm.training.entry"
"""The training entry point ``torchrun -m`` starts on every GPU."""


JOB_CHECKPOINT_DIR = '"$RUN_DIR/checkpoints/job-$SLURM_JOB_ID"'
"""The job's ``--save`` and ``--load`` directory, as a shell word: one per SLURM job id, so a requeued job (same id)
resumes from its own checkpoint, while a new submission of the row measures afresh. With one directory per row, a
second ``--submit`` loaded the first job's final checkpoint, trained no iteration and logged no throughput."""


CHECKPOINT_FLAGS = ("--save", "--load")
"""The argv flags whose value the job replaces with :data:`JOB_CHECKPOINT_DIR` when it is the run directory's
``checkpoints`` folder (what ``oellm recipe --save-interval`` gives them; a recipe's own ``save`` / ``load`` stand)."""


_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9_.:/%@+,=~-]+$")


def run_dir(recipe: Recipe, row_number: int) -> Path:
    """Absolute directory of one row's job scripts, logs and checkpoints (each job's under :data:`JOB_CHECKPOINT_DIR`):
    ``<output_dir>/<recipe>/row<N>-<nodes>n``.
    A leading ``~`` of ``output_dir`` is the home directory, as in a shell (no shell expands it in a TOML value or
    after ``--output-dir=``; read literally it made a directory named ``~``)."""
    return recipe_dir(recipe) / f"row{row_number:02d}-{recipe.row(row_number).nodes}n"


def recipe_dir(recipe: Recipe) -> Path:
    """Absolute directory of all the recipe's run directories: ``<output_dir>/<recipe>``, a leading ``~`` the home
    directory (see :func:`run_dir`)."""
    try:
        output_dir = Path(recipe.cluster.output_dir).expanduser()
    except RuntimeError as error:  # ~NAME of no user (or ~ without a home directory)
        raise RecipeError(f"output directory {recipe.cluster.output_dir!r} starts with a ~ that names no home "
                          "directory; pass --output-dir DIR (or set cluster.output_dir) to a path without it") from error
    return output_dir.absolute() / recipe.name


DIRECTIVE_FIXES = {
    "job-name": "rename the recipe (its file name, or its name key)",
    "partition": "pass another --partition", "account": "pass another --account", "qos": "pass another --qos",
}
"""Where each user-given ``#SBATCH`` value comes from, for the message that refuses it."""


def _directive(name: str, value: object) -> str:
    """One ``#SBATCH --name=value`` line; refuses values a directive cannot carry safely."""
    text = str(value)
    if not _DIRECTIVE_VALUE.match(text):
        raise RecipeError(f"SLURM {name} {text!r} has characters #SBATCH cannot carry (spaces, quotes, $ ...); "
                          "use letters, digits and . _ - : / % @ + , = ~ only"
                          + (f": {DIRECTIVE_FIXES[name]}" if name in DIRECTIVE_FIXES else ""))
    return f"#SBATCH --{name}={text}"


def cluster_directives(cluster: ClusterSettings) -> list[str]:
    """The ``#SBATCH`` lines of the ``partition``, ``account`` and ``qos`` ``cluster`` sets; refuses a value
    ``#SBATCH`` cannot carry (:func:`_directive`)."""
    return [_directive(name, getattr(cluster, name)) for name in ("partition", "account", "qos")
            if getattr(cluster, name)]


def check_cluster_directives(cluster: ClusterSettings) -> None:
    """Refuse a ``partition``, ``account`` or ``qos`` of ``cluster`` that ``#SBATCH`` cannot carry, as every row's
    script would (:func:`cluster_directives`): checked once, before anything is printed, and not blamed on a row."""
    cluster_directives(cluster)


def _output_directive(directory: Path) -> str:
    """``#SBATCH --output`` of the job log in the run directory ``directory``.

    The directory part must be a plain path: SLURM expands ``%`` in it as a file-name pattern (``%j``, ``%u`` ...),
    so the log would go where ``mkdir -p "$RUN_DIR"`` never created a directory, and ``#SBATCH`` cannot carry a
    space. The run directory comes from ``--output-dir`` (default: ``oellm-runs`` under the current directory), so
    the message names that option.
    """
    text = str(directory)
    if "%" in text or not _DIRECTIVE_VALUE.match(text):
        raise RecipeError(f"run directory {text!r} has characters #SBATCH cannot carry in the job log's --output "
                          "path (spaces, quotes, $ ..., and %, which SLURM reads as a file-name pattern): pass "
                          "--output-dir DIR (or set cluster.output_dir) to a path of letters, digits and "
                          ". _ - : / @ + , = ~ only")
    return _directive("output", directory / "slurm-%j.out")


REQUEUE_DIRECTIVE = "#SBATCH --requeue"
"""Makes the job of a ``requeue = true`` recipe requeueable whatever the site's default (``JobRequeue=0`` makes jobs
not requeueable, and SLURM refuses ``scontrol requeue`` of such a job). Alone it requeues nothing: a job whose
script exits with status 0 ends COMPLETED; the script's own ``scontrol requeue`` does (:func:`_requeue_end_lines`)."""


_OPEN_MODE_DIRECTIVE = "#SBATCH --open-mode=append"
"""A requeued job (``scontrol requeue``, a preemption, a node failure; same job id, so the same ``slurm-%j.out``)
appends its new start to the log instead of truncating it, as SLURM does by default (``JobFileAppend=0``): the
iterations and throughput of the earlier start stay for ``oellm table``, which reads every start of a log."""


def _env_lines(name: str, value: str, runtime: str) -> list[str]:
    """``export NAME=value`` and ``export <RUNTIME>ENV_NAME=value`` (``APPTAINERENV_NAME``: wins over the image's own
    value, and the runtime evaluates a ``$`` in it in the container), value quoted; the latter alone for a name of
    :data:`CONTAINER_ONLY_VARIABLES`, which the job's own shell runs its commands through. ``name`` is valid
    (:func:`megatron.oellm.recipes.config.check_env_names`)."""
    quoted = shlex.quote(str(value))
    container = f"export {runtime.upper()}ENV_{name}={quoted}"
    return [container] if name in CONTAINER_ONLY_VARIABLES else [f"export {name}={quoted}", container]


def sbatch_text(recipe: Recipe, row_number: int, resolved: ResolvedRow, directory: Path | None = None) -> str:
    """The complete ``sbatch`` script of row ``row_number`` (resolved by :func:`resolve_row`)."""
    cluster: ClusterSettings = recipe.cluster
    directory = directory or run_dir(recipe, row_number)
    row = resolved.row
    lines = [
        "#!/bin/bash",
        # one_line: a TOML multi-line title's second line would end the comment, and sbatch reads no #SBATCH
        # directive after the first line that is not a comment (bash would run that line as a command)
        f"# {one_line(recipe.title)}: row {row_number}" + (f" ({one_line(row.label)})" if row.label else "")
        + f", {row.nodes} nodes x {cluster.gpus_per_node} GPUs.",
        f"# Generated by `oellm recipe` (megatron-oellm {megatron.oellm.__version__}); edit the recipe, not this file.",
        *_by_hand_note(directory),
        _directive("job-name", f"oellm-{recipe.name}-r{row_number}"),
        _directive("nodes", row.nodes),
        _directive("ntasks-per-node", 1),
        _directive("gpus-per-node", cluster.gpus_per_node),
        _directive("cpus-per-task", cluster.cpus_per_task),
        _directive("time", recipe.row_time(row)),
        "#SBATCH --exclusive",
    ]
    lines += [*cluster_directives(cluster), _output_directive(directory), _OPEN_MODE_DIRECTIVE,
              *([REQUEUE_DIRECTIVE] if recipe.requeue else []), "",
              "set -euo pipefail",
              *_working_directory_lines(), ""]
    # Both prefixes: Apptainer also reads SINGULARITYENV_PYTHONPATH (a Singularity-era shell setting) when
    # APPTAINERENV_PYTHONPATH is unset.
    lines += ["# The container's PYTHONPATH is the image's (or [cluster.env]'s), with a checkout first (below), not the "
              "submitting shell's.",
              "unset PYTHONPATH APPTAINERENV_PYTHONPATH SINGULARITYENV_PYTHONPATH"]
    runtime = cluster.container_runtime
    lines += ["# The user's own site-packages (~/.local, in the $HOME the container mounts) would come before the "
              "image's: off (PYTHONNOUSERSITE = \"\" in [cluster.env] turns them back on).",
              *_env_lines("PYTHONNOUSERSITE", "1", runtime)]
    lines += [line for name, value in recipe.row_env(row).items() for line in _env_lines(name, value, runtime)]
    run_bind = bind_source(str(directory), "run directory", "pass --output-dir DIR (or set cluster.output_dir) "
                            "to a path without them")
    # a checkout is bound and put first on the image's PYTHONPATH, so the job runs the code its dry run validated,
    # not the image's possibly older copy; an installed one (None) stays out: a host's site-packages must not enter
    checkout = source_checkout()
    checkout_binds = [] if checkout is None else [
        bind_source(str(checkout), "megatron-oellm checkout", "move the checkout to a path without them")]
    binds = list(dict.fromkeys([run_bind, *checkout_binds, *cluster.binds, *input_binds(resolved.flags)]))
    checkpoint_values = _checkpoint_values(resolved, directory)
    check_requeue(recipe, resolved)
    lines += [
        "",
        f"RUN_DIR={shlex.quote(str(directory))}",
        f"IMAGE={shlex.quote(cluster.image)}",
        # sed reads every host name: `head -n 1` would exit early, and under pipefail the SIGPIPE scontrol then
        # gets on a long node list (more than one pipe buffer of names) would end the job here.
        # cluster.master_addr_suffix holds host-name characters only (checked when the recipe loads)
        f'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p){cluster.master_addr_suffix}"',
        f"MASTER_PORT={int(cluster.master_port)}",
        'mkdir -p "$RUN_DIR"',
        *_image_architecture_lines(runtime),
        *_hybrid_ep_build_lines(runtime, resolved),
        *_checkpoint_lines(checkpoint_values),
        "",
        "MEGATRON_ARGS=(",
        *_argv_lines(resolved.argv, checkpoint_values),
        ")",
        "",
        *_requeue_start_lines(recipe, resolved, checkpoint_values),
        # Slurm >= 22.05: srun does not inherit sbatch's --cpus-per-task (the step would get one CPU per task).
        # --export=ALL: under sbatch --export=NONE (SBATCH_EXPORT=NONE at a site or in a user's shell) the job holds
        # SLURM_EXPORT_ENV=NONE, which srun reads as its own --export: the step would lose every variable set above.
        f"srun --kill-on-bad-exit=1 --export=ALL --cpus-per-task={int(cluster.cpus_per_task)} \\",
        f"  {runtime} exec --nv " + " ".join(f"--bind {shlex.quote(b)}" for b in binds) + ' "$IMAGE" \\',
        *_python_path_lines(checkout),
        *_rendezvous_host_lines(cluster.master_addr_suffix),
        f'  torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {int(cluster.gpus_per_node)}'
        + (f" --numa-binding {cluster.numa_binding}" if cluster.numa_binding else "") + " \\",
        '    --rdzv-id "$SLURM_JOB_ID" --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \\',
        f'    -m {ENTRY_MODULE} "${{MEGATRON_ARGS[@]}}"' + (" || {" if recipe.requeue else ""),
        *_requeue_end_lines(recipe, resolved, checkpoint_values),
        "",
    ]
    return "\n".join(lines)


def _python_path_lines(checkout: Path | None) -> list[str]:
    """The container-side command prefix that puts ``checkout`` first on the image's own ``PYTHONPATH``.

    Apptainer passes a host ``PYTHONPATH`` only when the image sets none, and ``APPTAINERENV_PYTHONPATH`` replaces
    the image's value (its site paths) instead of extending it; so the prefix is made inside the container, from the
    value the container starts with. Nothing for an installed ``megatron.oellm``: the image's copy runs."""
    if checkout is None:
        return []
    return ["  bash -c 'export PYTHONPATH=\"$0${PYTHONPATH:+:$PYTHONPATH}\"; exec \"$@\"' "
            f"{shlex.quote(str(checkout))} \\"]


def _rendezvous_host_lines(master_addr_suffix: str) -> list[str]:
    """With a ``master_addr_suffix``, the container-side command prefix that tells each node's ``torchrun`` whether it
    hosts the c10d rendezvous store: ``--rdzv-conf is_host=1`` on the job's first node (``SLURM_NODEID`` 0, the
    first host name of ``MASTER_ADDR``), ``is_host=0`` on the others, after any ``PET_RDZV_CONF`` the recipe's
    environment gives torchrun (its own way to read ``--rdzv-conf``), which a second option would replace.

    Left to itself, torchrun hosts the store on the node whose host name or addresses match the endpoint's host; a
    suffixed name (JUWELS' ``<name>i``) matches none, so every node waited for a store as a client and the job hung at
    start. ``SLURM_NODEID`` is each ``srun`` task's own, read in the task's shell: the batch script runs on the first
    node only; the shell is named ``oellm-rendezvous-host``, so that an error of its own (no ``SLURM_NODEID``: the
    script run without ``srun``) is not read as ``torchrun``'s. Nothing without a suffix: the name ``scontrol`` gives
    is the node's own."""
    if not master_addr_suffix:
        return []
    return ["  bash -c 'launcher=$1; shift; exec \"$launcher\" --rdzv-conf \"${PET_RDZV_CONF:+$PET_RDZV_CONF,}is_host=$(("
            "${SLURM_NODEID:?is set by srun in each task: submit this script with sbatch} == 0))\" \"$@\"' "
            "oellm-rendezvous-host \\"]


IMAGE_CHECK_ERRORS = "$RUN_DIR/image-check-$SLURM_JOB_ID.err"
"""Where the job keeps the error output of its image check's ``runtime exec`` (used inside double quotes), for the
one-line error that quotes its last line: one file per job, removed when the check passes."""


def _image_exec(runtime: str) -> str:
    """``runtime exec`` for the job's checks of the image itself, before ``srun``: run under ``env`` without the
    :data:`CONTAINER_ONLY_VARIABLES` the job exported for its ranks (``APPTAINERENV_PATH`` ...), so that they test
    the image alone. The runtime puts such a value over the image's own (``PATH = "/opt/tools/bin"`` replaced the
    image's ``PATH``, and ``uname`` was not found), and a folder or library it names may exist only in the ranks'
    binds; the check then failed and blamed the image. Every runtime's prefix is unset: Apptainer also reads a
    submitting shell's Singularity-era ``SINGULARITYENV_PATH``, and a site's ``singularity`` may be Apptainer."""
    unset = " ".join(f"-u {other.upper()}ENV_{name}" for name in CONTAINER_ONLY_VARIABLES
                     for other in CONTAINER_RUNTIMES)
    return f"env {unset} {runtime} exec"


def _image_architecture_lines(runtime: str) -> list[str]:
    """Shell lines that stop the job, before ``srun`` starts any rank, when the image cannot run a program of its
    own on this node: an image built for another CPU architecture (an x86_64 one on Jupiter's aarch64 GH200) would
    otherwise fail every rank with ``exec format error``. Under an emulator (binfmt) the image's ``uname -m`` names
    its own architecture, which the check compares with the node's. A node without the container ``runtime`` on its
    ``PATH``, and an image file that is not there (moved or deleted since the script was made; an image URI such as
    ``docker://...`` is left to the runtime), are named as such first, rather than as an image to rebuild; so is a
    ``runtime exec`` that fails (an image URI the node cannot pull, an unreadable image; without an emulator an image
    of another architecture, ``exec format error``), with the last line of its error output, which the job keeps in
    :data:`IMAGE_CHECK_ERRORS`. The image runs without the recipe's container-only variables
    (:func:`_image_exec`)."""
    return [
        "# An image built for another CPU architecture fails every rank with 'exec format error': check it once here.",
        f"if ! command -v {runtime} > /dev/null; then",
        f'  echo "error: {runtime} is not on the PATH of node $(hostname): make it available in the shell that'
        f' submits this job (e.g. module load {runtime}), whose environment sbatch passes on (under sbatch'
        ' --export=NONE or SBATCH_EXPORT=NONE the job starts from your login environment instead: load it there),'
        f' or set cluster.container_runtime to the one the site provides ({" or ".join(CONTAINER_RUNTIMES)})" >&2',
        "  exit 1",
        "fi",
        'if [[ "$IMAGE" != *://* && ! -e "$IMAGE" ]]; then',
        '  echo "error: image $IMAGE does not exist on node $(hostname) (relative to $PWD): build it'
        ' (docs/container.md) or pass --image PATH" >&2',
        "  exit 1",
        "fi",
        'NODE_ARCH="$(uname -m)"',
        f'IMAGE_ARCH="$({_image_exec(runtime)} "$IMAGE" uname -m 2> "{IMAGE_CHECK_ERRORS}")" || {{',
        f'  echo "error: {runtime} exec of image $IMAGE failed on node $(hostname), so the image cannot run here'
        f' (its last error line: $(tail -n 1 "{IMAGE_CHECK_ERRORS}"); all of them in {IMAGE_CHECK_ERRORS}): an image'
        f' URI needs network access on every node ({runtime} pull a .sif on the login node), an exec format error'
        ' an image built for $NODE_ARCH (docs/container.md); then pass --image PATH.sif" >&2',
        "  exit 1",
        "}",
        f'rm -f "{IMAGE_CHECK_ERRORS}"',
        'if [ "$IMAGE_ARCH" != "$NODE_ARCH" ]; then',
        '  echo "error: image $IMAGE runs as $IMAGE_ARCH, but node $(hostname) is $NODE_ARCH: build the image for'
        ' $NODE_ARCH (docs/container.md: aarch64 for Jupiter, x86_64 for MareNostrum 5) and pass --image" >&2',
        "  exit 1",
        "fi",
    ]


def cross_node_dispatch(resolved: ResolvedRow) -> tuple[str, int, int] | None:
    """(backend, expert-parallel group in GPUs, nodes it spans) when the row's flex dispatcher (HybridEP or DeepEP)
    has an expert-parallel group larger than one node, whose kernels then need a DeepEP built for RDMA between nodes;
    None otherwise."""
    backend = resolved.flags.get("moe-flex-dispatcher-backend")
    if resolved.flags.get("moe-token-dispatcher-type") != "flex" or backend not in ("hybridep", "deepep"):
        return None
    group, per_node = resolved.layout.ep * resolved.layout.etp, resolved.world_size // resolved.row.nodes
    return None if group <= per_node else (str(backend), group, -(-group // per_node))


def _hybrid_ep_build_lines(runtime: str, resolved: ResolvedRow) -> list[str]:
    """Shell lines that stop the job before ``srun`` when its HybridEP group spans nodes and the image says its
    DeepEP was built for one node (:data:`HYBRID_EP_MULTINODE_VARIABLE` ``0``): every rank would otherwise build the
    model and fail or hang at its first dispatch. An image that does not say (another build) is left to run; the
    image runs without the recipe's container-only variables (:func:`_image_exec`), as a ``PATH`` without
    ``printenv`` read as an image that does not say."""
    spans = cross_node_dispatch(resolved)
    if spans is None or spans[0] != "hybridep":
        return []
    _, group, nodes = spans
    return [
        f"# This row's HybridEP group ({group} GPUs) spans {nodes} nodes: an image built for one node cannot run it.",
        f'if [ "$({_image_exec(runtime)} "$IMAGE" printenv {HYBRID_EP_MULTINODE_VARIABLE})" = 0 ]; then',
        f'  echo "error: image $IMAGE was built with HYBRID_EP_MULTINODE=0 (HybridEP within one node), but this row\'s'
        f' HybridEP group of {group} GPUs spans {nodes} nodes: build the hybridep image with --build-arg'
        ' HYBRID_EP_MULTINODE=1 (docs/container.md) and pass --image" >&2',
        "  exit 1",
        "fi",
    ]


def _working_directory_lines() -> list[str]:
    """``cd`` into the directory the script was made in: the image, ``--data-path`` and ``--tokenizer-model`` paths
    were checked from there and may be relative, so a job submitted by hand from another directory must not read
    them from where ``sbatch`` ran."""
    return ["# Relative paths (image, data, tokenizer) are those checked where the script was made.",
            f"cd {shlex.quote(str(Path.cwd()))}"]


def _by_hand_note(directory: Path) -> list[str]:
    """Comment lines telling how to submit the script by hand: SLURM opens ``--output`` (in ``directory``) before
    the script runs and does not create directories, so without the ``mkdir`` the job log would be lost (``oellm
    recipe --submit`` creates the directory itself)."""
    return ["# To submit this script by hand (`oellm recipe --submit` does both), create its log directory first:",
            f"#   mkdir -p {shlex.quote(str(directory))} && sbatch <this file>"]


def _saves_checkpoints(resolved: ResolvedRow) -> bool:
    """Whether the row saves checkpoints (``--save-interval`` > 0; benchmark rows save none)."""
    interval = resolved.flags.get("save-interval")
    return isinstance(interval, int) and not isinstance(interval, bool) and interval > 0


def _checkpoint_lines(checkpoint_values: Mapping[str, str]) -> list[str]:
    """``CHECKPOINT_DIR=...`` (see :data:`JOB_CHECKPOINT_DIR`) when the job's argv names it
    (``checkpoint_values``, from :func:`_checkpoint_values`), else nothing."""
    if not checkpoint_values:
        return []
    return ["# One checkpoint directory per job: a requeue (same job id) resumes, a new submission starts afresh.",
            f"CHECKPOINT_DIR={JOB_CHECKPOINT_DIR}"]


def _checkpoint_values(resolved: ResolvedRow, directory: Path) -> dict[str, str]:
    """The shell words of the :data:`CHECKPOINT_FLAGS` values in the job's argv: ``"$CHECKPOINT_DIR"`` for each one
    whose value is ``directory``'s ``checkpoints`` folder when the row saves checkpoints, else none. A ``save`` or
    ``load`` the recipe or the row sets itself (a checkpoint to start from, a shared folder) is the user's and
    stands as written."""
    if not _saves_checkpoints(resolved):
        return {}
    run_checkpoints = str(directory / "checkpoints")
    return {flag: '"$CHECKPOINT_DIR"' for flag in CHECKPOINT_FLAGS
            if resolved.flags.get(flag.removeprefix("--")) == run_checkpoints}


def _argv_lines(argv: list[str], shell_values: Mapping[str, str] | None = None) -> list[str]:
    """The argv as bash-array lines, one flag (with its quoted values) per line; a flag of ``shell_values`` gets that
    shell word (not quoted: it expands in the job) instead of its one value."""
    shell_values = shell_values or {}
    lines: list[str] = []
    replaced = False
    for token in argv:
        if token.startswith("--") or not lines:
            lines.append("  " + shlex.quote(token))
            replaced = token in shell_values
            if replaced:
                lines[-1] += " " + shell_values[token]
        elif not replaced:
            lines[-1] += " " + shlex.quote(token)
    return lines


CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
"""The file in megatron's ``--save`` directory that names its latest checkpoint (megatron-core 0.19.2's
``get_checkpoint_tracker_filename``): the iteration in digits, or ``release`` for a converted checkpoint, which
megatron loads as iteration 0."""


REQUEUE_LOG_PREFIX = "oellm requeue:"
"""Lead of the job log's lines that say whether the job requeues itself, and why."""


def check_requeue(recipe: Recipe, resolved: ResolvedRow) -> None:
    """Refuse ``requeue = true`` for a row whose job could not continue across jobs: without ``--save`` no start
    leaves anything for the next one; with a ``--load`` other than ``--save`` a requeued start would not resume from
    what the one before saved; without ``--exit-duration-in-mins`` nothing ends a start before its time limit, where
    SLURM kills it and fails the job, which then never requeues; with ``--finetune`` every start begins again at
    iteration 0. The job compares the checkpoint with the row's ``--train-iters``: a recipe cannot replace it, and megatron refuses ``--train-samples`` beside it."""
    if not recipe.requeue:
        return
    flags = resolved.flags
    if flags.get("save") in (None, False):
        raise RecipeError("requeue = true needs checkpoints, as each requeued start resumes from the one before: pass "
                          "--save-interval N (the job then saves to and resumes from its own <run dir>/checkpoints/"
                          "job-<job id> and stops before its time limit), or set save, load and exit-duration-in-mins "
                          "in the recipe")
    if flags.get("load") != flags["save"]:
        load = "unset" if flags.get("load") in (None, False) else repr(flags["load"])
        raise RecipeError(f"requeue = true needs load to be the save directory {flags['save']!r}, as a requeued start "
                          f"must resume from what the one before saved; load is {load}: set it to the same directory")
    if flags.get("finetune") not in (None, False):
        raise RecipeError("requeue = true cannot go on with finetune: megatron's --finetune starts every load at "
                          "iteration 0, so each requeued start would begin the run again; give the checkpoint to "
                          "fine-tune from as pretrained-checkpoint instead (megatron fine-tunes from it only while the "
                          "load directory holds no checkpoint, and resumes from its own after that)")
    if flags.get("exit-duration-in-mins") in (None, False, 0, "0"):
        raise RecipeError("requeue = true needs exit-duration-in-mins (megatron saves and exits with status 0 then): "
                          "without it each start runs into its time limit, where SLURM kills it and fails the job, "
                          "which is never requeued; give --save-interval a time limit of over 5 minutes (it derives "
                          "the stop from it), or set exit-duration-in-mins in the recipe")


def _save_word(resolved: ResolvedRow, checkpoint_values: Mapping[str, str]) -> str:
    """The shell word of the run's ``--save`` directory: the job's own (``"$CHECKPOINT_DIR"``, from
    :func:`_checkpoint_values`) or the one the recipe sets, quoted."""
    return checkpoint_values.get("--save") or shlex.quote(str(resolved.flags["save"]))


def _requeue_start_lines(recipe: Recipe, resolved: ResolvedRow, checkpoint_values: Mapping[str, str]) -> list[str]:
    """With ``requeue = true`` (checked by :func:`check_requeue`), the lines before ``srun``: the shell function
    ``checkpoint_iteration DIR``, megatron's latest checkpoint in ``DIR`` as it reads its :data:`CHECKPOINT_TRACKER`
    (``none`` without one, ``unreadable`` for text megatron does not read either), and ``CHECKPOINT_BEFORE``, the
    checkpoint this start of the job begins from, logged. Nothing without it."""
    if not recipe.requeue:
        return []
    return [
        "# requeue = true: after a start that ends with status 0 (megatron stopped at --exit-duration-in-mins and",
        "# saved), the job requeues itself (same job id: it resumes from its checkpoint) when the start moved the",
        "# checkpoint forward and it is still short of --train-iters; the log says what it decided and why.",
        "checkpoint_iteration() {",
        f"  # megatron's latest checkpoint in directory $1: its {CHECKPOINT_TRACKER} holds the iteration, or",
        "  # 'release' (a converted checkpoint, loaded as iteration 0)",
        f'  local tracker="$1/{CHECKPOINT_TRACKER}" text',
        '  if [ ! -f "$tracker" ]; then echo none; return; fi',
        "  text=\"$(tr -d '[:space:]' < \"$tracker\")\"",
        '  case "$text" in',
        "    release) echo 0 ;;",
        "    '' | *[!0-9]*) echo unreadable ;;",
        '    *) echo "$text" ;;',
        "  esac",
        "}",
        f'CHECKPOINT_BEFORE="$(checkpoint_iteration {_save_word(resolved, checkpoint_values)})"',
        f'echo "{REQUEUE_LOG_PREFIX} start ${{SLURM_RESTART_COUNT:-0}} of job $SLURM_JOB_ID; checkpoint before it:'
        f' $CHECKPOINT_BEFORE (--train-iters {int(resolved.flags["train-iters"])})"',
        "",
    ]


def _requeue_end_lines(recipe: Recipe, resolved: ResolvedRow, checkpoint_values: Mapping[str, str]) -> list[str]:
    """With ``requeue = true``, the lines after ``srun``, whose line then ends in ``|| {``: a failed start (``srun``
    not 0) ends the job with its status, not requeued (it would fail again); after a start that ended with status 0
    the job requeues itself (``scontrol requeue``) only when the start moved the checkpoint forward
    (:func:`_requeue_start_lines`) and it is short of ``--train-iters``, so that a run that makes no progress or is
    complete ends. Each case logs a line saying so; a refused ``scontrol requeue`` fails the job. Nothing without
    it."""
    if not recipe.requeue:
        return []
    prefix = REQUEUE_LOG_PREFIX
    return [
        "  srun_status=$?",
        f'  echo "{prefix} not requeued: srun ended with status $srun_status, and a failed start is not repeated" >&2',
        '  exit "$srun_status"',
        "}",
        "",
        "requeue_if_progressed() {",
        "  # $1: the checkpoint directory; $2: its checkpoint before this start (checkpoint_iteration)",
        f'  local before=$2 after last={int(resolved.flags["train-iters"])}',
        '  after="$(checkpoint_iteration "$1")"',
        '  if [ "$after" = unreadable ]; then',
        f"    echo \"{prefix} not requeued: $1/{CHECKPOINT_TRACKER} holds neither an iteration nor 'release',"
        ' so megatron would not resume from it"',
        '  elif [ "$after" = none ]; then',
        f'    echo "{prefix} not requeued: this start left no checkpoint in $1, so another would start over"',
        '  elif [ "$after" -ge "$last" ]; then',
        f'    echo "{prefix} not requeued: the checkpoint is at iteration $after of $last: the run is complete"',
        '  elif [[ $before =~ ^[0-9]+$ ]] && [ "$after" -le "$before" ]; then',
        f'    echo "{prefix} not requeued: the checkpoint did not move forward in this start (iteration $before before'
        ' it, $after after it), so another start would not get further; the log above says how this one ended"',
        "  else",
        f'    echo "{prefix} requeueing job $SLURM_JOB_ID: this start moved the checkpoint from $before to iteration'
        ' $after of $last; the next start resumes there"',
        '    scontrol requeue "$SLURM_JOB_ID" || {',
        f'      echo "{prefix} scontrol requeue failed: requeue the job by hand (scontrol requeue $SLURM_JOB_ID) to'
        ' resume from iteration $after" >&2',
        "      return 1",
        "    }",
        "  fi",
        "}",
        f'requeue_if_progressed {_save_word(resolved, checkpoint_values)} "$CHECKPOINT_BEFORE"',
    ]

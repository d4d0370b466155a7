"""Recipe configuration: one benchmark table of a report as a frozen dataclass, with its checks.

A recipe is a model card name (plus a vocabulary override), a parallel layout, the training settings as Megatron
flags, the cluster settings, the fitted-down ``--local`` settings and the table's rows (nodes, batch sizes and
per-row overrides). Configs live beside their ``examples/oellm/*.sh`` wrappers; a config may ``extends`` a base
config (a path relative to the real config file's folder, links followed) whose tables it deep-merges over, so the
tables of one report share one base
(:mod:`megatron.oellm.recipes.toml_loading` reads the files).
Pure Python: no torch, no megatron-core.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from megatron.oellm.megatron_args import FlagValue
from megatron.oellm.models.parallel import ParallelLayout
from megatron.oellm.peaks import GPU_PEAKS
from megatron.oellm.recipes.toml_types import fits_type, toml_type_name, with_article
from megatron.oellm.scaling_table.rows import TableError, Window


class RecipeError(ValueError):
    """A recipe config is malformed or a requested row does not exist; the message names the fix."""


REFERENCE_KEYS = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "tflops_per_gpu_low", "tflops_per_gpu_high",
                  "mfu_percent")
"""The report numbers a row's ``reference`` may hold. All but ``mfu_percent`` give the row's expected run time
(:mod:`megatron.oellm.recipes.timing`), so a misspelt one would silently leave the row's time limit unchecked."""


CONTAINER_RUNTIMES = ("apptainer", "singularity")
"""Commands ``cluster.container_runtime`` may name. Both take ``exec --nv --bind``; each passes a host variable
``<RUNTIME>ENV_<NAME>`` into the container as ``NAME`` (``APPTAINERENV_`` / ``SINGULARITYENV_``)."""

NUMA_BINDINGS = ("node", "socket", "exclusive", "core-complex")
"""Values of ``cluster.numa_binding``: the modes of torchrun's ``--numa-binding`` (it pins each worker to the CPUs
near its GPU)."""

SBATCH_INPUT_VARIABLES: Mapping[str, str] = {
    "account": "SBATCH_ACCOUNT", "qos": "SBATCH_QOS", "partition": "SBATCH_PARTITION"}
"""The options ``cluster.required_options`` may name (a :class:`ClusterSettings` field and ``oellm recipe`` flag
each) -> the input environment variable ``sbatch`` reads the same option from, so a user who exports it has given
it."""

HOST_NAME_CHARACTERS = re.compile(r"[A-Za-z0-9.-]*")
"""What ``cluster.master_addr_suffix`` may hold (matched whole): characters of a host name."""

MAX_TCP_PORT = 65535
"""The largest ``cluster.master_port``: torchrun's rendezvous listens on a TCP port."""

JOB_SCRIPT_VARIABLES: Mapping[str, str] = {
    "MASTER_PORT": "set cluster.master_port instead",
    "MASTER_ADDR": "the job's first node is the rendezvous host (cluster.master_addr_suffix names another of its "
                   "interfaces)",
    "RUN_DIR": "set cluster.output_dir (or pass --output-dir) instead",
    "IMAGE": "set cluster.image (or pass --image) instead",
    "CHECKPOINT_DIR": "oellm recipe --save-interval places the checkpoints",
    "MEGATRON_ARGS": "set Megatron flags in [megatron_flags] or a row's flags instead",
    "NODE_ARCH": "rename the variable",
    "IMAGE_ARCH": "rename the variable",
    "CHECKPOINT_BEFORE": "rename the variable",
}
"""Shell variables the job script assigns after it exports the recipe's environment (``CHECKPOINT_BEFORE``: with
``requeue = true``; name -> what to do instead):
an ``env`` entry of one of these names would be overwritten without a word (``MASTER_PORT = "29600"`` in
``[cluster.env]`` still ran the rendezvous on ``cluster.master_port``)."""

CONTAINER_ONLY_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "LD_PRELOAD")
"""``env`` names the job script exports for the container only (as ``<RUNTIME>ENV_<NAME>``), not in its own shell:
the shell runs ``scontrol``, ``sed``, ``srun`` and the container runtime through them, and a value meant for the
container (``"/opt/tools/bin:$PATH"``, whose ``$PATH`` the runtime evaluates in the container) left the job without
its commands (``export PATH='/opt/tools/bin:$PATH'``: no ``scontrol``, and the job ended under ``set -e``)."""

SLURM_JOB_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_NNODES",
                       "SLURM_JOB_NUM_NODES", "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
                       "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_RESTART_COUNT", "SLURM_EXPORT_ENV")
"""Names SLURM assigns in every job and step, which the job script (``$SLURM_JOB_NODELIST``, ``$SLURM_NNODES``,
``$SLURM_JOB_ID``, ``$SLURM_RESTART_COUNT``), ``srun`` (the step's tasks and nodes, its ``--export``) and each task
(``SLURM_NODEID``) read: an ``env`` entry of one would replace SLURM's own value, so it is refused. The ``SLURM_*``
settings ``srun`` reads as its options (``SLURM_CPU_BIND``, ``SLURM_HINT``, ``SLURM_MPI_TYPE``) are a recipe's to set."""


@dataclass(frozen=True)
class TableRow:
    """One row of a report table: a run at ``nodes`` nodes with its batch sizes and overrides."""

    nodes: int
    """Nodes of the run (GPUs = nodes x the cluster's ``gpus_per_node``)."""
    global_batch_size: int
    """Sequences per optimizer step."""
    micro_batch_size: int
    """Sequences per forward/backward pass on one data-parallel rank."""
    label: str = ""
    """What distinguishes the row in its table (e.g. ``real routing``, ``attention auto``)."""
    seq_length: int | None = None
    """Sequence length of this row; None = the recipe's."""
    train_iters: int | None = None
    """Iterations of this row; None = the recipe's."""
    time: str | None = None
    """SLURM wall-clock limit of this row's job (e.g. ``01:20:00``); None = the cluster's ``time``."""
    parallel: Mapping[str, Any] = field(default_factory=dict)
    """Overrides of :class:`ParallelLayout` fields (e.g. ``{"ep": 32}`` or another ``pipeline_layout``); ``false``
    drops a ``vpp`` or ``pipeline_layout`` the recipe set."""
    flags: Mapping[str, FlagValue] = field(default_factory=dict)
    """Megatron flag overrides (name without ``--``); ``false`` removes a flag set by the recipe."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment of this row's job over the cluster's (:meth:`Recipe.row_env`), e.g. the
    ``CUDA_DEVICE_MAX_CONNECTIONS`` of a row with EP communication overlap beside rows that need 1."""
    reference: Mapping[str, float] = field(default_factory=dict)
    """The report's numbers for this row (keys of :data:`REFERENCE_KEYS`), listed by ``--dry-run``; its throughput
    (``step_time_s``, ``tokens_per_s_per_gpu`` or ``tflops_per_gpu[_low|_high]``) also gives the run time checked
    against the time limit (:mod:`megatron.oellm.recipes.timing`)."""
    table_window: str = ""
    """Iterations ``FIRST-LAST`` the report summarised for this row, where not ``oellm table``'s default 3-10 (e.g.
    ``11-40`` for a 40-iteration real-routing run); the printed ``oellm table`` command reads the row's logs with it."""
    table_statistic: str = ""
    """The report's summary of this row's iterations where not the median: ``mean``."""


@dataclass(frozen=True)
class ClusterSettings:
    """Where and how the SLURM job runs."""

    name: str
    """Cluster name, e.g. ``mn5`` or ``jupiter`` (used in job names only)."""
    gpus_per_node: int
    """GPUs per node (MN5 H100 and Jupiter GH200: 4)."""
    image: str
    """Apptainer / Singularity image (``.sif``) the job runs in; build it from the repository's Dockerfile."""
    gpu: str = ""
    """GPU model of the nodes, a name of :data:`megatron.oellm.peaks.GPU_PEAKS` (``h100-sxm`` on MN5, ``gh200`` on
    Jupiter): the printed ``oellm table`` command passes it as ``--gpu``, so the MFU has that GPU's peak and its
    footnote names what the peak does not reflect (Jupiter's 680 W cap); empty = the table's default peak."""
    container_runtime: str = "apptainer"
    """Command that runs the image on the nodes: ``apptainer``, or ``singularity`` (SingularityCE) on a site that
    provides only that; one of :data:`CONTAINER_RUNTIMES`."""
    partition: str = ""
    """SLURM partition; empty = the cluster's default (override with ``--partition``)."""
    account: str = ""
    """SLURM account / project; empty = the user's default (override with ``--account``)."""
    qos: str = ""
    """SLURM quality of service (MN5 needs one, e.g. ``acc_ehpc``); empty = none."""
    time: str = "00:30:00"
    """SLURM wall-clock limit of the job of every row without its own ``time`` (e.g. ``HH:MM:SS``)."""
    cpus_per_task: int = 80
    """CPU cores of the one task per node (torchrun and its workers)."""
    output_dir: str = "oellm-runs"
    """Directory for the job scripts, logs and checkpoints (``<output_dir>/<recipe>/<row>/``)."""
    binds: tuple[str, ...] = ()
    """Extra container bind mounts (``SRC[:DST]``), e.g. the data and scratch file systems."""
    master_port: int = 29500
    """TCP port of torchrun's c10d rendezvous on the first node."""
    numa_binding: str = ""
    """torchrun's ``--numa-binding`` mode (one of :data:`NUMA_BINDINGS`) for the workers of every node; empty = no
    binding (torchrun's default). Binding keeps a rank's host threads (data loading, kernel launches) on the socket
    of its GPU on two-socket nodes; the image's torchrun must know the flag (PyTorch 2.11 does)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment exported in the job before ``srun`` (NCCL channels, allocator, connections)."""
    required_options: tuple[str, ...] = ()
    """The ``sbatch`` options among ``account``, ``qos`` and ``partition`` (:data:`SBATCH_INPUT_VARIABLES`) the site
    refuses or misplaces a job without (MN5: ``account`` and ``qos``; Jupiter: ``account``). ``--submit`` stops
    before any ``sbatch`` call when one is set neither here nor by its flag nor by the variable sbatch reads it from
    (``SBATCH_ACCOUNT`` ...); ``--dry-run`` names it in a note. Empty = the site's defaults do."""
    master_addr_suffix: str = ""
    """Text appended to the job's first host name to give torchrun's rendezvous address (``MASTER_ADDR``), for sites
    whose node names resolve to a management network: on JSC's JUWELS and JURECA ``<name>i`` is the node's
    InfiniBand interface, so set ``"i"`` there. Host-name characters only; empty (the default, and Jupiter's, whose
    public job scripts add it on JUWELS, JURECA and JUSUF only) = the name ``scontrol`` gives. With a suffix the job
    tells torchrun which node hosts the rendezvous (``--rdzv-conf is_host=``, 1 on the first node only): torchrun
    finds it by matching the address to a node's own names, which a suffixed name is not."""


@dataclass(frozen=True)
class LocalSettings:
    """How ``--local`` fits the recipe onto this machine's GPUs (same code path, smaller model)."""

    num_layers: int
    """Decoder layers of the proxy card (``<model>-proxy-<N>L``; keep the mixer pattern: a multiple of its period)."""
    num_experts: int = 0
    """Routed experts of the fitted-down model; 0 = the card's."""
    seq_length: int = 0
    """Sequence length; 0 = the recipe's."""
    train_iters: int = 10
    """Iterations of the local run."""
    global_batch_size_per_dp_rank: int = 4
    """Micro-batches accumulated per data-parallel rank (global batch = this x data-parallel size, MBS 1)."""


@dataclass(frozen=True)
class Recipe:
    """One report table: model, parallel layout, training settings, cluster settings and the table's rows."""

    name: str
    """Recipe name (file stem), used in job names and output paths."""
    title: str
    """The table it reproduces, e.g. ``MN5 #438: Qwen3.5-35B-A3B strong scaling``."""
    model: str
    """Model card name (``megatron.oellm.cards.get_card``)."""
    parallel: ParallelLayout
    """Parallel layout of every row (rows may override fields)."""
    seq_length: int
    """Training sequence length."""
    train_iters: int
    """Iterations per run (the reports: 10, medians over 3-10)."""
    cluster: ClusterSettings
    """SLURM and container settings."""
    local: LocalSettings
    """Fitted-down settings for ``--local``."""
    rows: tuple[TableRow, ...]
    """The table's rows, in report order."""
    vocab_size: int | None = None
    """Vocabulary override (e.g. the 262,144 padded OEL vocabulary); None = the card's."""
    megatron_flags: Mapping[str, FlagValue] = field(default_factory=dict)
    """Training settings as Megatron flags (name without ``--`` -> value), applied after the model and layout flags."""
    notes: str = ""
    """Free text printed by ``--dry-run`` (placement arithmetic, what the reference rows ran with)."""
    table_baseline_nodes: int | None = None
    """Nodes of the row the report's efficiency column is relative to (``oellm table --baseline-nodes``, which the
    printed table command passes); None or 0 (what a recipe extending one that sets it writes) = ``oellm table``'s
    default, its smallest run."""
    requeue: bool = False
    """Continue a long run across SLURM jobs: the job script asks for ``#SBATCH --requeue`` and, after a start that
    ends with status 0 (megatron stopped at ``exit-duration-in-mins`` and saved), requeues its own job (``scontrol
    requeue``: the same job id, so the same checkpoint directory and log) when that start moved megatron's checkpoint
    (``<save>/latest_checkpointed_iteration.txt``) forward and it is still short of the row's ``train_iters``. A
    start without progress, a finished run and a failed start end the job, each with a line in the log saying so.
    A row needs ``save``, ``load`` the same directory and ``exit-duration-in-mins`` (``oellm recipe --save-interval
    N`` gives all three under a time limit of over 5 minutes), refused otherwise by ``--dry-run`` and ``--submit``;
    the time check then lets the run take more than one job. ``--local`` runs ignore it."""

    def __post_init__(self) -> None:
        check_field_types(self, f"recipe {self.name}: ")
        check_field_types(self.cluster, f"recipe {self.name} [cluster]: ")
        check_field_types(self.local, f"recipe {self.name} [local]: ")
        if not self.rows:
            raise RecipeError(f"recipe {self.name}: no [[rows]]; add at least one table row")
        self._check_values()
        for number, row in enumerate(self.rows, start=1):
            check_row(row, f"recipe {self.name} row {number}: ")

    def _check_values(self) -> None:
        """Counts, sizes and the time limit of the recipe, its cluster and its local settings: a zero must not fall
        back to a default, a negative must not reach a job."""
        check_positive(self, ("seq_length", "train_iters", "vocab_size"), f"recipe {self.name}: ")
        check_positive(self.local, ("num_layers", "train_iters", "global_batch_size_per_dp_rank"),
                       f"recipe {self.name} [local]: ")
        for name in ("num_experts", "seq_length"):
            if getattr(self.local, name) < 0:
                raise RecipeError(f"recipe {self.name} [local]: {name} must be >= 0 (0: the recipe's), "
                                  f"got {getattr(self.local, name)}")
        for name in ("gpus_per_node", "cpus_per_task"):
            if getattr(self.cluster, name) < 1:
                raise RecipeError(f"recipe {self.name}: cluster.{name} must be >= 1, got "
                                  f"{getattr(self.cluster, name)}")
        if not 1 <= self.cluster.master_port <= MAX_TCP_PORT:
            raise RecipeError(f"recipe {self.name}: cluster.master_port must be a TCP port (1..{MAX_TCP_PORT}), got "
                              f"{self.cluster.master_port}; torchrun's rendezvous would fail only after the queue")
        if self.cluster.gpu and self.cluster.gpu not in GPU_PEAKS:
            raise RecipeError(f"recipe {self.name}: cluster.gpu must be one of {', '.join(sorted(GPU_PEAKS))} (or "
                              f"empty for the table's default peak), got {self.cluster.gpu!r}")
        if self.cluster.container_runtime not in CONTAINER_RUNTIMES:
            raise RecipeError(f"recipe {self.name}: cluster.container_runtime must be one of "
                              f"{', '.join(CONTAINER_RUNTIMES)}, got {self.cluster.container_runtime!r}")
        if self.cluster.numa_binding and self.cluster.numa_binding not in NUMA_BINDINGS:
            raise RecipeError(f"recipe {self.name}: cluster.numa_binding must be one of {', '.join(NUMA_BINDINGS)} "
                              f"(or empty for none), got {self.cluster.numa_binding!r}; torchrun would refuse it "
                              "only after the queue")
        check_sbatch_settings(self.cluster, f"recipe {self.name}: ")
        time_limit_seconds(self.cluster.time, f"recipe {self.name} [cluster]: ")
        nodes = sorted({row.nodes for row in self.rows})
        if self.table_baseline_nodes and self.table_baseline_nodes not in nodes:
            raise RecipeError(f"recipe {self.name}: table_baseline_nodes = {self.table_baseline_nodes} names no row "
                              f"(the rows run on {nodes} nodes); set it to the nodes of the efficiency column's "
                              "baseline row, or to 0 for the table's default (its smallest run)")
        check_env_names(self.cluster.env, f"recipe {self.name} [cluster.env]: ")

    def row_seq_length(self, row: TableRow) -> int:
        """Sequence length of ``row``: its own, else the recipe's."""
        return self.seq_length if row.seq_length is None else row.seq_length

    def row_train_iters(self, row: TableRow) -> int:
        """Iterations of ``row``: its own, else the recipe's."""
        return self.train_iters if row.train_iters is None else row.train_iters

    def row_env(self, row: TableRow) -> dict[str, str]:
        """Environment of ``row``'s job: the cluster's ``env`` with the row's own ``env`` over it."""
        return {**self.cluster.env, **row.env}

    def row_time(self, row: TableRow) -> str:
        """SLURM time limit of ``row``'s job: its own, else the cluster's."""
        return self.cluster.time if row.time is None else row.time

    def row(self, number: int) -> TableRow:
        """Row ``number`` (1-based, as ``--dry-run`` lists them); another is refused listing the rows with their nodes
        and global batch: the refusal itself says which to pick, also for a recipe whose dry run without ``--row`` is
        refused (a row megatron-oellm cannot run yet), and whether or not ``--dry-run`` was given."""
        if not 1 <= number <= len(self.rows):
            listed = "; ".join(f"{index}: {row.nodes} nodes, GBS {row.global_batch_size}"
                               for index, row in enumerate(self.rows, start=1))
            raise RecipeError(f"recipe {self.name} has rows 1..{len(self.rows)}, not {number} ({listed})")
        return self.rows[number - 1]

    def row_numbers_with_nodes(self, nodes: int) -> list[int]:
        """1-based numbers of the rows that run on ``nodes`` nodes."""
        return [i for i, row in enumerate(self.rows, start=1) if row.nodes == nodes]


def check_field_types(settings: Any, where: str) -> None:
    """Raise :class:`RecipeError` naming the first field of the dataclass ``settings`` whose value does not have its
    annotated type (e.g. a TOML string where a number goes); ``where`` prefixes the message."""
    hints = typing.get_type_hints(type(settings))
    for item in dataclasses.fields(settings):
        value = getattr(settings, item.name)
        if not fits_type(value, hints[item.name]):
            raise RecipeError(f"{where}{_misfit_text(item.name, value, hints[item.name])}")


def _misfit_text(name: str, value: Any, hint: Any) -> str:
    """Why field ``name`` = ``value`` does not fit its type ``hint``: for a table of one value type (such as
    ``megatron_flags``) its first entry of another type (``megatron_flags.lr = {'a': 1} is not a boolean or ...``),
    rather than the whole table, merged from every file of the recipe; otherwise the value and the type."""
    if typing.get_origin(hint) is Mapping and isinstance(value, Mapping):
        entry_hint = typing.get_args(hint)[1]
        for key, entry in value.items():
            if isinstance(key, str) and not fits_type(entry, entry_hint):
                return f"{name}.{key} = {entry!r} is not {with_article(toml_type_name(entry_hint))}"
    return f"{name} = {value!r} is not {with_article(toml_type_name(hint))}"


def check_sbatch_settings(cluster: ClusterSettings, where: str) -> None:
    """Refuse a ``cluster.required_options`` entry that is not an option :data:`SBATCH_INPUT_VARIABLES` knows (the
    submission check would never find it given) and a ``cluster.master_addr_suffix`` with characters no host name
    has (the rendezvous would fail only after the queue); ``where`` prefixes the message."""
    for name in cluster.required_options:
        if name not in SBATCH_INPUT_VARIABLES:
            raise RecipeError(f"{where}cluster.required_options entry {name!r} is not one of "
                              f"{', '.join(SBATCH_INPUT_VARIABLES)}")
    if not HOST_NAME_CHARACTERS.fullmatch(cluster.master_addr_suffix):
        raise RecipeError(f"{where}cluster.master_addr_suffix {cluster.master_addr_suffix!r} is not part of a host "
                          "name; use letters, digits, . and - only (e.g. \"i\" on JUWELS and JURECA)")


def check_row(row: TableRow, where: str) -> None:
    """Types, counts, reference numbers, time limit and parallel overrides of one row; ``where`` prefixes errors."""
    check_field_types(row, where)
    check_layout_types(row.parallel, where)
    check_env_names(row.env, f"{where}env ")
    check_positive(row, ("nodes", "global_batch_size", "micro_batch_size", "seq_length", "train_iters"), where)
    for key, value in row.reference.items():
        if key not in REFERENCE_KEYS:
            raise RecipeError(f"{where}reference key {key!r} is not one of {list(REFERENCE_KEYS)}; a misspelt "
                              "throughput would leave the row's run time unchecked against its time limit")
        if not math.isfinite(value) or value <= 0:
            raise RecipeError(f"{where}reference {key} = {value!r} must be a positive finite number")
    if row.time is not None:
        time_limit_seconds(row.time, where)
    if row.table_window or row.table_statistic:
        try:
            Window.parse(row.table_window or str(Window()), row.table_statistic or "median")
        except TableError as error:
            raise RecipeError(f"{where}table_window / table_statistic: {error}") from None
    fields = [item.name for item in dataclasses.fields(ParallelLayout)]
    unknown = set(row.parallel) - set(fields)
    if unknown:
        raise RecipeError(f"{where}unknown parallel override(s) {sorted(unknown)}; use fields of ParallelLayout: "
                          f"{fields}")


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""An environment variable name a job script can ``export`` (matched whole: a trailing newline is no part of it)."""


def check_env_names(env: Mapping[str, str], where: str) -> None:
    """Refuse a name of the environment table ``env`` that is not a shell variable name (:data:`ENV_NAME`), that
    the job script assigns itself (:data:`JOB_SCRIPT_VARIABLES`), or that SLURM assigns to the job
    (:data:`SLURM_JOB_VARIABLES`): the first cannot be exported by the job script, and ``--local`` would hand it to
    torchrun unchecked (or stop in a traceback for a ``=``); the second's value would be silently replaced; the
    third would replace SLURM's value where the job script and ``srun`` read it. Checked when the recipe loads, so
    every mode refuses it first; ``where`` prefixes the message."""
    for name in env:
        if not ENV_NAME.fullmatch(name):
            raise RecipeError(f"{where}{name!r} is not a valid environment variable name; use letters, digits and _, "
                              "not starting with a digit")
        if name in JOB_SCRIPT_VARIABLES:
            raise RecipeError(f"{where}{name} is a variable the job script sets itself after exporting the "
                              f"environment, so this value would be lost; {JOB_SCRIPT_VARIABLES[name]}")
        if name in SLURM_JOB_VARIABLES:
            raise RecipeError(f"{where}{name} is a variable SLURM assigns in every job, which the job script, srun or "
                              "each task reads, so this value would replace SLURM's own; remove it (the row's nodes "
                              "and [cluster] give the job's SLURM options)")


def check_positive(settings: Any, names: Sequence[str], where: str) -> None:
    """Raise :class:`RecipeError` for the first of the fields ``names`` of ``settings`` that is set (not None) but
    not >= 1: a zero or negative count would otherwise fall back to a default or fail late on the cluster."""
    optional = {item.name for item in dataclasses.fields(settings) if item.default is None}
    for name in names:
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise RecipeError(f"{where}{name} must be >= 1, got {value}"
                              + ("; leave it out for the default" if name in optional else ""))


_SLURM_TIME = re.compile(r"^(?:(?P<days>\d+)-)?(?P<first>\d+)(?::(?P<second>\d+))?(?::(?P<third>\d+))?$")


def time_limit_seconds(text: str, where: str = "", source: str = "time = ") -> int:
    """Seconds of a SLURM time limit in one of sbatch's forms: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM``, ``D-HH:MM:SS``; anything else, and a zero limit (SLURM: none), raises :class:`RecipeError`. The
    message names the value as ``where`` + ``source`` (the recipe field by default, ``"--time "`` for the option)."""
    match = _SLURM_TIME.match(text)
    if match is None:
        raise RecipeError(f"{where}{source}{text!r} is not a SLURM time limit; write MM, MM:SS, HH:MM:SS, D-HH, "
                          "D-HH:MM or D-HH:MM:SS")
    fields = [int(part) for part in match.group("first", "second", "third") if part is not None]
    if match.group("days") is None:  # MM, MM:SS, HH:MM:SS
        units = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(fields)]
        seconds = 0
    else:  # D-HH, D-HH:MM, D-HH:MM:SS
        units = (3600, 60, 1)[:len(fields)]
        seconds = int(match.group("days")) * 86400
    seconds += sum(field * unit for field, unit in zip(fields, units, strict=True))
    if seconds == 0:
        raise RecipeError(f"{where}{source}{text!r} is zero; give the job a positive time limit")
    return seconds


def slurm_time_text(seconds: int) -> str:
    """``seconds`` as SLURM's normalized time limit, ``HH:MM:SS`` or ``D-HH:MM:SS`` (as squeue and sacct print it):
    unlike sbatch's short forms (``30`` is minutes, ``30:00`` minutes and seconds, ``1-12`` a day and hours) it reads
    one way."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def time_limit_text(text: str) -> str:
    """A time limit as written (a valid one, :func:`time_limit_seconds`) with its unit: as written when it is already
    SLURM's normalized form (:func:`slurm_time_text`), else followed by it, e.g. ``30 (= 00:30:00)``: a bare ``30``
    gave no unit (SLURM reads minutes)."""
    normalized = slurm_time_text(time_limit_seconds(text))
    return text if text == normalized else f"{text} (= {normalized})"


def _unsettable_layout_fields() -> set[str]:
    """:class:`ParallelLayout` fields that ``false`` may reset to their default None (``vpp``, ``pipeline_layout``):
    TOML has no null, and a row must be able to drop, say, a base's custom pipeline layout."""
    return {item.name for item in dataclasses.fields(ParallelLayout) if item.default is None}


def check_layout_types(values: Mapping[str, Any], where: str) -> None:
    """Raise :class:`RecipeError` for a known :class:`ParallelLayout` field in ``values`` with a value of the wrong
    type (unknown fields are refused by :class:`Recipe`); ``false`` fits the fields :func:`layout_overrides` resets."""
    hints = typing.get_type_hints(ParallelLayout)
    unsettable = _unsettable_layout_fields()
    for name, value in values.items():
        if value is False and name in unsettable:
            continue
        if name in hints and not fits_type(value, hints[name]):
            more = "; write false to drop it" if name in unsettable else ""
            raise RecipeError(f"{where}parallel {name} = {value!r} is not {with_article(toml_type_name(hints[name]))}{more}")


def layout_overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """Parallel overrides as :class:`ParallelLayout` takes them: ``false`` on an optional field (``vpp``,
    ``pipeline_layout``) becomes None, its default, so a row can drop what its base set."""
    unsettable = _unsettable_layout_fields()
    return {name: None if value is False and name in unsettable else value for name, value in values.items()}



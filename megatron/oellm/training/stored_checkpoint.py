"""The checkpoint a run will load, read before Megatron initialises, and the megatron-oellm run arguments it stores:
the one reader behind the entry's checkpoint checks (:func:`megatron.oellm.training.load_checks.check_converted_load`,
:func:`megatron.oellm.training.load_checks.check_checkpoint_architecture`,
:func:`megatron.oellm.training.checkpoint_layout.check_optimizer_resharding`), which the entry calls once per run. A
checkpoint megatron recognises but cannot read (a data file its ``.metadata`` names missing or short, a truncated
``.metadata`` or rank file) is refused here, naming the file: megatron-core would stop on it after allocating the
model on every rank, and none of those checks could be made.

megatron-core 0.19.2 keeps a checkpoint's run arguments in a different place per ``--ckpt-format``
(``_get_checkpoint_format`` tells the formats apart by what the iteration directory holds):

* ``torch_dist`` (``metadata.json``): in the common state, stored in the DCP files (a legacy ``common.pt`` in
  older checkpoints);
* ``torch`` (``mp_rank_XX[_YYY][_ZZZ]/model_optim_rng.pt``, one file per model-parallel rank): in each rank file,
  next to that rank's whole model shard; it is read memory-mapped, so its tensors are not read;
* ``torch_dcp`` / ``fsdp_dtensor`` (only a DCP ``.metadata``): as the ``args`` object of the DCP state dict.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from megatron.oellm.convert.hf_config import CONFIG_NAME
from megatron.oellm.convert.mcore_checkpoint import (
    CARD_KEY,
    ITERATION_PREFIX,
    RELEASE,
    is_hugging_face_model,
    iteration_directory_name,
    iteration_of,
)
from megatron.oellm.convert.mcore_checkpoint import ITERATION_FILE as TRACKER_FILE
from megatron.oellm.paths import SymlinkLoopError, resolved_path, symlink_loop

if TYPE_CHECKING:
    from torch.distributed.checkpoint.metadata import Metadata

NON_PERSISTENT = "non_persistent"
"""megatron-core's default directory of global non-persistent checkpoints under ``--load`` / ``--save``."""
RANK_FILE = "model_optim_rng.pt"
RANK_ZERO_DIRECTORIES = ("mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000")
"""Where megatron-core's ``find_checkpoint_rank_0`` looks for a ``torch``-format checkpoint's first rank file:
without pipeline and expert parallelism, with one of them, with both."""


LOAD = "--load"
SAVE = "--save"
PRETRAINED = "--pretrained-checkpoint"


@dataclass(frozen=True)
class StoredCheckpoint:
    """The iteration directory megatron loads, its ``--ckpt-format`` (``torch_dist``, ``torch`` or ``torch_dcp``,
    the last standing also for ``fsdp_dtensor``) and the non-tensor state holding its run arguments."""

    directory: Path
    ckpt_format: str
    common: dict
    metadata: Metadata | None
    """The DCP metadata of a ``torch_dist`` / ``torch_dcp`` checkpoint as the reader read it (None for ``torch``):
    its ``.metadata`` unpickled once, for the read and for the checks that look at the stored keys."""
    flag: str
    """The flag that named it: ``--load``, or ``--pretrained-checkpoint`` (megatron-core loads that one in place of an
    empty ``--load`` and sets ``--finetune`` itself: iteration 0, no optimizer or RNG state, no comparison of run
    arguments)."""
    given: Path
    """The directory the user gave that flag."""

    @property
    def named_by(self) -> str:
        """``--load DIR`` / ``--pretrained-checkpoint DIR`` as the user gave it, for messages."""
        return f"{self.flag} {self.given}"

    @property
    def fine_tunes(self) -> bool:
        """megatron-core loads it as ``--pretrained-checkpoint`` and so fine-tunes from it."""
        return self.flag == PRETRAINED


def loads_optimizer_state(args: argparse.Namespace, checkpoint: StoredCheckpoint | None) -> bool:
    """Whether megatron-core 0.19.2 reads optimizer state from ``checkpoint`` (the one the run loads) for validated
    ``args``: not without one (a first job), when fine-tuning (``--finetune``, or ``--pretrained-checkpoint`` in place
    of an empty ``--load``), under ``--no-load-optim``, from a ``release`` checkpoint, or from one saved with
    ``--no-save-optim``."""
    if checkpoint is None or checkpoint.fine_tunes or args.finetune or args.no_load_optim:
        return False
    return checkpoint.directory.name != RELEASE and not getattr(checkpoint.common.get("args"), "no_save_optim", False)


def has_tracker(load_dir: Path) -> bool:
    """Whether ``load_dir`` holds a ``latest_checkpointed_iteration.txt`` file, as megatron-core's
    ``os.path.isfile`` answers it (False for a missing ``load_dir``: a first job). Raises ``ValueError`` when
    ``load_dir`` cannot be searched: megatron's ``isfile`` then sees no tracker, so the run starts without its
    checkpoint (from random weights, or from ``--pretrained-checkpoint``) and fails only when it saves."""
    try:
        return stat.S_ISREG((load_dir / TRACKER_FILE).stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        if error.errno == errno.ELOOP:  # the path is the fault, not its permissions
            raise ValueError(f"{load_dir / TRACKER_FILE} runs into a loop of symbolic links ({error.strerror}): "
                             f"megatron-core sees no {TRACKER_FILE}; name the folder by a path without one, and the "
                             "tracker file a regular file") from error
        raise ValueError(f"{load_dir} cannot be searched ({error.strerror}): megatron-core sees no {TRACKER_FILE} "
                         "in it and starts without its checkpoint (from random weights, or from "
                         "--pretrained-checkpoint); make the directory readable by the job's user") from error


LOOP_OUTCOMES = {
    SAVE: "megatron-core cannot create it or write into it and stops at its first save, after --save-interval "
          "iterations of training",
    LOAD: f"megatron-core sees no {TRACKER_FILE} in it and starts without its checkpoint (from random weights, or "
          "from --pretrained-checkpoint)",
    PRETRAINED: f"megatron-core sees no {TRACKER_FILE} in it and stops with FileNotFoundError after allocating the "
                "model on every rank",
}
"""What megatron-core 0.19.2 does with each checkpoint folder flag's path that runs into a loop of symbolic links."""


def check_checkpoint_folders_not_loops(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` naming the flag when ``--save``, ``--load`` or ``--pretrained-checkpoint`` runs into a
    loop of symbolic links (:func:`megatron.oellm.paths.symlink_loop`): the checks that follow take such a path for
    a missing or unreadable folder, and their fixes (a first job, make it readable) do not apply. Object-storage
    paths are left to their client."""
    for flag, outcome in LOOP_OUTCOMES.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        if not value or on_object_storage(args, value):
            continue
        loop = symlink_loop(Path(value))
        if loop is not None:
            raise ValueError(f"{flag} {value} runs into a loop of symbolic links ({loop.strerror}): {outcome}; name "
                             "the folder by a path without one")


def tracked_checkpoint(load_dir: Path) -> int | str | None:
    """What ``load_dir``'s ``latest_checkpointed_iteration.txt`` names, read as megatron-core 0.19.2's
    ``read_metadata`` reads it: ``int()`` of the stripped text (so ``05`` and ``+5`` both name iteration 5), else
    ``release``; None without a tracker file (:func:`has_tracker`, whose ``ValueError`` it passes on). megatron
    reads the tracker whenever it is a file, ``--ckpt-step`` or not. Also raises ``ValueError`` where megatron would
    fail on the tracker after allocating the model on every rank:

    * it cannot be read: megatron stops with that error;
    * it names neither an iteration nor ``release``: megatron prints an error and calls ``sys.exit()``, which ends
      the job with exit status 0, as if it had finished;
    * it names a negative iteration: megatron fails an assertion.
    """
    if not has_tracker(load_dir):
        return None
    tracker = load_dir / TRACKER_FILE
    try:
        text = tracker.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not text"
        raise ValueError(f"{tracker} cannot be read ({reason}): megatron-core stops on it after allocating the "
                         "model on every rank") from error
    if text == RELEASE:
        return RELEASE
    try:
        iteration = int(text)
    except ValueError:
        raise ValueError(f"{tracker} holds {text[:40]!r}, neither an iteration nor {RELEASE!r}: megatron-core prints "
                         "an error and ends the job with exit status 0 (as if it had finished) after allocating the "
                         "model on every rank; write the iteration to resume from into it") from None
    if iteration < 0:
        raise ValueError(f"{tracker} names iteration {iteration}: megatron-core fails an assertion on a negative "
                         "iteration after allocating the model on every rank; write the iteration to resume from")
    return iteration


def persistent_iteration_directory(load_dir: Path, ckpt_step: int | None = None) -> Path | None:
    """The iteration directory megatron-core's ``_load_base_checkpoint`` reads for ``--load load_dir``: the one
    ``latest_checkpointed_iteration.txt`` names (``release`` included), another iteration under ``--ckpt-step``
    (except for a ``release`` tracker, which megatron keeps). None when megatron loads nothing (no tracker file and
    no ``--ckpt-step``); ``ValueError`` for a tracker megatron would fail on (:func:`tracked_checkpoint`)."""
    tracked = tracked_checkpoint(load_dir)
    if tracked == RELEASE:
        return load_dir / RELEASE
    if ckpt_step:
        return load_dir / iteration_directory_name(ckpt_step)
    return load_dir / iteration_directory_name(tracked) if tracked is not None else None


def checkpoint_format(directory: Path) -> str | None:
    """``directory``'s format as megatron-core's ``_get_checkpoint_format`` detects it (None if none)."""
    if (directory / "metadata.json").is_file():
        return "torch_dist"
    if any(child.name.startswith("mp_rank_0") for child in directory.iterdir()):
        return "torch"
    return "torch_dcp" if (directory / ".metadata").is_file() else None


def _rank_zero_state(directory: Path) -> dict:
    """The first rank file of a ``torch``-format checkpoint, memory-mapped (a legacy non-zip file is read whole): its
    pickled structure (run arguments, iteration, optimizer settings) is read, the model shard's tensors are not.
    ``ValueError`` naming the file when there is none or it cannot be read."""
    import torch

    for name in RANK_ZERO_DIRECTORIES:
        path = directory / name / RANK_FILE
        if path.is_file():
            # a file of torch.save's legacy (non-zip) format cannot be memory-mapped; megatron loads it all the same
            mmap = zipfile.is_zipfile(path)
            try:
                return torch.load(path, map_location="cpu", mmap=mmap, weights_only=False)
            except Exception as error:  # a truncated or damaged file raises about any type (zip reader, unpickling)
                raise ValueError(f"{path} cannot be read ({_reason(error)}); the file is truncated or "
                                 "damaged") from error
    raise ValueError(f"{directory} holds rank directories but no {RANK_FILE} of rank 0 (in "
                     f"{' / '.join(RANK_ZERO_DIRECTORIES)})")


def _dcp_state(directory: Path, metadata: Metadata) -> dict:
    """The ``args`` and ``iteration`` objects of a ``torch_dcp`` / ``fsdp_dtensor`` checkpoint (what megatron-core
    reads from it for ``--use-checkpoint-args``), ``metadata`` its DCP metadata, which DCP's load takes from here
    (:class:`~megatron.oellm.convert.dist_ckpt.GivenMetadataReader`) rather than reading it again; empty when it
    stores none. ``ValueError`` naming the file when a data file ``metadata`` names is missing or short, or the
    objects cannot be read."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from megatron.oellm.convert.dist_ckpt import GivenMetadataReader, check_data_files

    check_data_files(directory, metadata)
    state = {key: None for key in ("args", "iteration") if key in metadata.state_dict_metadata}
    if state:
        try:
            dcp.load(state, storage_reader=GivenMetadataReader(directory, metadata), no_dist=True)
        except (Exception, CheckpointException) as error:  # unpickling damaged bytes raises about any type, which
            # DCP wraps in a CheckpointException (a BaseException)
            raise ValueError(f"the run arguments stored in {directory} cannot be read ({_reason(error)}); a data "
                             "file is damaged") from error
    return state


def _reason(error: BaseException) -> str:
    """``error`` as a short single-line reason for a message: its type and the first line of its text."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:160]}" if text else type(error).__name__


def _persistent_iteration(persistent: Path | None, ckpt_step: int | None) -> int:
    """The iteration megatron-core's ``_load_base_checkpoint`` weighs a non-persistent checkpoint against:
    ``--ckpt-step``, else that of the tracker's directory ``persistent`` (0 for ``release``), else -1 (no
    persistent checkpoint)."""
    if ckpt_step:
        return ckpt_step
    if persistent is None:
        return -1
    return 0 if persistent.name == RELEASE else iteration_of(persistent.name)


def load_source(args: argparse.Namespace) -> tuple[str, Path] | None:
    """(flag, directory) megatron-core 0.19.2's ``load_checkpoint`` loads from: ``--load`` unless
    ``--pretrained-checkpoint`` is given and ``--load`` is unset or holds no ``latest_checkpointed_iteration.txt``
    (a fine-tuning run's first job), when it loads ``--pretrained-checkpoint`` and sets ``--finetune``. None when
    neither is given."""
    pretrained = getattr(args, "pretrained_checkpoint", None)
    if pretrained and not (args.load and has_tracker(Path(args.load))):
        return PRETRAINED, Path(pretrained)
    return (LOAD, Path(args.load)) if args.load else None


def iteration_directory_loaded(args: argparse.Namespace, load_dir: Path | None = None) -> Path | None:
    """The iteration directory megatron-core's ``_load_base_checkpoint`` reads for ``load_dir`` (default: the
    run's :func:`load_source`): under ``--non-persistent-ckpt-type global`` the non-persistent checkpoint
    (``--non-persistent-global-ckpt-dir``, else ``load_dir``/non_persistent) when it is at least as new as the
    persistent one, else :func:`persistent_iteration_directory`. None when megatron loads none, or may load a ``local``
    non-persistent checkpoint (its manager is not read here)."""
    if load_dir is None:
        source = load_source(args)
        load_dir = source[1] if source else None
    non_persistent = getattr(args, "non_persistent_ckpt_type", None)
    if non_persistent == "local" or load_dir is None:
        return None
    ckpt_step = getattr(args, "ckpt_step", None)
    persistent = persistent_iteration_directory(load_dir, ckpt_step)
    if non_persistent != "global":
        return persistent
    global_dir = getattr(args, "non_persistent_global_ckpt_dir", None)
    np_dir = Path(global_dir) if global_dir else load_dir / NON_PERSISTENT
    latest = persistent_iteration_directory(np_dir)
    if latest is None or latest.name == RELEASE:  # megatron refuses a release non-persistent checkpoint itself
        return persistent
    newer = iteration_of(latest.name) >= _persistent_iteration(persistent, ckpt_step)
    return latest if newer else persistent


def read_loaded_checkpoint(args: argparse.Namespace) -> StoredCheckpoint | None:
    """The checkpoint megatron loads for the run (:func:`load_source`, :func:`iteration_directory_loaded`) with its
    non-tensor state; None as for :func:`read_stored_checkpoint`."""
    source = load_source(args)
    return read_checkpoint_of(args, source[0]) if source is not None else None


def read_checkpoint_of(args: argparse.Namespace, flag: str) -> StoredCheckpoint | None:
    """The checkpoint megatron-core reads for ``flag`` alone (``--load`` or ``--pretrained-checkpoint``), as
    ``--use-checkpoint-args`` reads each of them; None when the flag is unset or as for
    :func:`read_stored_checkpoint`."""
    value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
    if not value:
        return None
    return _read_directory(iteration_directory_loaded(args, Path(value)), flag, Path(value))


def read_stored_checkpoint(load_dir: Path, ckpt_step: int | None = None) -> StoredCheckpoint | None:
    """The checkpoint megatron loads for ``--load load_dir`` (:func:`persistent_iteration_directory`) with its
    non-tensor state. None when megatron loads none, or finds no checkpoint there (:func:`check_load_directory`
    reports those); ``ValueError`` when it is damaged (:func:`_read_directory`)."""
    return _read_directory(persistent_iteration_directory(load_dir, ckpt_step), LOAD, load_dir)


def _read_directory(directory: Path | None, flag: str, given: Path) -> StoredCheckpoint | None:
    """Iteration directory ``directory`` (None: none), found from ``flag given``, with its format and non-tensor
    state; None when it holds no checkpoint megatron recognises (missing, not listable, no format: what
    :func:`check_load_directory` reports). ``ValueError`` naming the file when it holds one that cannot be read (a
    truncated ``.metadata``, a missing data file, a damaged rank file): megatron-core would stop on it after
    allocating the model on every rank, and none of the checks of the checkpoint could be made."""
    ckpt_format = _recognised_format(directory)
    if ckpt_format is None:
        _check_not_unfinished_save(directory, flag, given)
        return None
    with _refused_as_damaged(flag, given, ckpt_format):
        metadata = _dcp_metadata(directory, ckpt_format)
    if ckpt_format == "torch_dcp":
        _check_finished_save(directory, metadata, flag, given)
    with _refused_as_damaged(flag, given, ckpt_format):
        common = _non_tensor_state(directory, ckpt_format, metadata)
    if not isinstance(common, dict):
        return None
    return StoredCheckpoint(directory, ckpt_format, common, metadata, flag, given)


@contextlib.contextmanager
def _refused_as_damaged(flag: str, given: Path, ckpt_format: str) -> Iterator[None]:
    """Raise a reader's ``ValueError`` (:class:`~megatron.oellm.convert.dist_ckpt.ConversionError` is one too) as the
    refusal of a damaged ``ckpt_format`` checkpoint that ``flag given`` leads megatron-core to."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{flag} {given} leads megatron-core to a damaged {ckpt_format} checkpoint, which it would "
                         f"stop on after allocating the model on every rank: {error}; name an intact checkpoint, or "
                         "copy this one again") from error


def _check_finished_save(directory: Path, metadata: Metadata, flag: str, given: Path) -> None:
    """Raise ``ValueError`` when ``directory`` (found from ``flag given``, without ``metadata.json``; ``metadata`` its
    DCP metadata) is an unfinished ``torch_dist`` save
    (:func:`megatron.oellm.convert.dist_ckpt.is_unfinished_torch_dist`): megatron-core reads it as a ``torch_dcp``
    checkpoint and fails after allocating the model on every rank, and the format refusal would send the user looking
    for a ``--ckpt-format`` that never saved it. The fix names the finished save the run's
    ``latest_checkpointed_iteration.txt`` names, where it names another one."""
    from megatron.oellm.convert.dist_ckpt import is_unfinished_torch_dist, unfinished_save_problem

    if not is_unfinished_torch_dist(metadata):
        return
    raise ValueError(f"{flag} {given}: {unfinished_save_problem(directory)}; megatron-core would read it as a "
                     f"torch_dcp checkpoint and fail after allocating the model on every rank; "
                     f"{_finished_save_fix(directory)}")


def _check_not_unfinished_save(directory: Path | None, flag: str, given: Path) -> None:
    """Raise ``ValueError`` when ``directory``, the iteration directory megatron-core reads for ``flag given``, is a
    save stopped before its ``.metadata`` was written
    (:func:`megatron.oellm.convert.dist_ckpt.is_unfinished_save_without_metadata`): megatron finds no format there and
    stops with ``NotImplementedError`` after allocating the model on every rank; "holds no checkpoint" would hide the
    commonest cause. The fix names the run's last finished save where its tracker names another one."""
    if directory is None or not directory.is_dir() or (directory / ".metadata").is_file():
        return
    from megatron.oellm.convert.dist_ckpt import is_unfinished_save_without_metadata, unfinished_save_problem

    if checkpoint_format(directory) is None and is_unfinished_save_without_metadata(directory):
        raise ValueError(f"{flag} {given}: {unfinished_save_problem(directory)}; megatron-core would find no "
                         "checkpoint format there and stop with NotImplementedError after allocating the model on "
                         f"every rank; {_finished_save_fix(directory)}")


def _finished_save_fix(directory: Path) -> str:
    """What to load instead of the unfinished save in ``directory``: the finished one its run's tracker names, where
    it names another; else wait for a copy or take another save."""
    from megatron.oellm.convert.mcore_checkpoint import finished_tracked_iteration

    tracked = finished_tracked_iteration(directory)
    if tracked is None:
        return ("wait for the copy to finish (or copy it again), or load a finished save (an iteration directory "
                "holding metadata.json) with --ckpt-step or the tracker file")
    step = "" if tracked.name == RELEASE else f", or pass --ckpt-step {iteration_of(tracked.name)}"
    return (f"{directory.parent / TRACKER_FILE} names {tracked.name}, the run's last finished save: load it (drop "
            f"--ckpt-step{step})")


def _recognised_format(directory: Path | None) -> str | None:
    """:func:`checkpoint_format` of ``directory``; None also when it is None, missing or cannot be listed."""
    if directory is None:
        return None
    try:
        return checkpoint_format(directory)
    except OSError:  # missing, not a directory, not listable
        return None


def _dcp_metadata(directory: Path, ckpt_format: str) -> Metadata | None:
    """The DCP metadata of a ``torch_dist`` / ``torch_dcp`` checkpoint in ``directory`` (None for ``torch``), read
    once for the state reader and the checks of the stored keys. ``ValueError`` naming ``.metadata`` when it is
    missing (``metadata.json`` marks a ``torch_dist`` directory without it) or cannot be read."""
    from megatron.oellm.convert.dist_ckpt import CHECKPOINT_CONFIG_FILE, METADATA_FILE, read_metadata

    if ckpt_format == "torch":
        return None
    if not (directory / METADATA_FILE).is_file():
        raise ValueError(f"{directory / METADATA_FILE} is missing, while {CHECKPOINT_CONFIG_FILE} marks the directory "
                         "as a torch_dist checkpoint")
    return read_metadata(directory)


def _non_tensor_state(directory: Path, ckpt_format: str, metadata: Metadata | None) -> object:
    """The non-tensor state of the ``ckpt_format`` checkpoint in ``directory`` (``metadata``: its DCP metadata,
    :func:`_dcp_metadata`): a ``torch_dist`` checkpoint's common state after checking that every data file is there
    in full, a ``torch`` one's first rank file (:func:`_rank_zero_state`), a ``torch_dcp`` one's stored objects
    (:func:`_dcp_state`); no tensor is read. ``ValueError`` naming the file that cannot be read."""
    from megatron.oellm.convert.dist_ckpt import CheckpointReader

    if ckpt_format == "torch":
        return _rank_zero_state(directory)
    if ckpt_format == "torch_dist":
        return CheckpointReader(directory, metadata).common_state()
    return _dcp_state(directory, metadata)


def converted_args(checkpoint: StoredCheckpoint | None) -> argparse.Namespace | None:
    """The run arguments stored with ``checkpoint`` if ``oellm convert hf-to-mcore`` wrote it (a ``release``
    checkpoint recording its card): only those every load compares, which megatron's ``check_checkpoint_args``
    finds incomplete for some runs (:func:`megatron.oellm.training.load_checks.check_converted_load`). None for any other
    checkpoint, or none."""
    if checkpoint is None or checkpoint.directory.name != RELEASE or CARD_KEY not in checkpoint.common:
        return None
    stored = checkpoint.common.get("args")
    return stored if isinstance(stored, argparse.Namespace) else None


def oellm_run_args(common: dict) -> tuple[argparse.Namespace, str | None] | None:
    """(run arguments, card name) a checkpoint's ``common`` state stores if megatron-oellm wrote it: an ``oellm
    convert hf-to-mcore`` checkpoint (it records its card) or one the training entry saved (its arguments hold
    ``oellm_model``). None for any other checkpoint or one without stored arguments."""
    stored = common.get("args")
    if not isinstance(stored, argparse.Namespace):
        return None
    if isinstance(common.get(CARD_KEY), dict):
        return stored, common[CARD_KEY].get("name")
    return (stored, stored.oellm_model) if hasattr(stored, "oellm_model") else None


def check_load_directory(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` when megatron-core 0.19.2 would find no checkpoint where the user named one:

    * ``--load`` names a file: megatron finds no tracker in it and trains from random weights, printing only a
      warning;
    * ``--load`` names a checkpoint's iteration directory itself (it holds a checkpoint but no
      ``latest_checkpointed_iteration.txt``) without ``--ckpt-step``: megatron finds no tracker there, loads nothing
      (or ``--pretrained-checkpoint``) and trains from random weights, printing only a warning;
    * ``--pretrained-checkpoint`` is what megatron loads (:func:`load_source`) and holds no tracker: megatron stops
      with ``FileNotFoundError`` after allocating the model on every rank (a Hugging Face model folder there is
      named as one, with its conversion);
    * ``--load`` is what megatron loads and it would load nothing from it (:func:`_check_load_holds_checkpoint`):
      megatron prints a warning after building the model and trains from random weights;
    * under ``--ckpt-step``, the checks of :func:`_check_ckpt_step`; without it, the tracker of what megatron loads
      names an iteration directory that is missing or holds no checkpoint (:func:`_check_tracked_directory`).
    """
    if on_object_storage(args, args.load):
        return  # read through megatron's object-storage client: nothing on this node's file system to look at
    pretrained = getattr(args, "pretrained_checkpoint", None)
    step = getattr(args, "ckpt_step", None)
    if args.load and Path(args.load).is_file():
        raise ValueError(f"--load {args.load} is a file: megatron-core looks for {TRACKER_FILE} in the folder --load "
                         "names, finds none here and trains from random weights, printing only a warning; name the "
                         "folder megatron saved the checkpoint into")
    if args.load and not step:
        outcome = ("fine-tunes from --pretrained-checkpoint instead, without a word" if pretrained else
                   "loads nothing and trains from random weights")
        _check_iteration_directory(LOAD, Path(args.load), outcome, plain_step=not pretrained)
    source = load_source(args)
    if source is not None and source[0] == PRETRAINED and on_object_storage(args, pretrained):
        return  # --pretrained-checkpoint in object storage (as given: a Path would fold its '//'): megatron reads it
    if source is not None and source[0] == PRETRAINED and not has_tracker(source[1]):
        outcome = "stops with FileNotFoundError after allocating the model"
        _check_iteration_directory(PRETRAINED, source[1], outcome, plain_step=False)
        _check_not_hugging_face(args, PRETRAINED, source[1], outcome)
        where = f"--load {args.load} holds none either, so " if args.load else ""
        raise ValueError(f"--pretrained-checkpoint {source[1]} holds no {TRACKER_FILE}: {where}megatron-core finds "
                         "no checkpoint to start from and stops with FileNotFoundError after allocating the model on "
                         "every rank; name the directory megatron saved into (the one holding that file)")
    if source is not None and source[0] == LOAD:
        _check_load_holds_checkpoint(args, source[1])
    if step and source is not None:
        _check_ckpt_step(args, step, *source)
    elif source is not None:
        _check_tracked_directory(args, *source)


def on_object_storage(args: argparse.Namespace, path: str | Path | None) -> bool:
    """Whether megatron-core 0.19.2 reads ``path`` from object storage (``msc://...`` under ``--enable-msc``) rather
    than this node's file system, where the directory checks cannot look."""
    if path is None or not getattr(args, "enable_msc", False):
        return False
    from megatron.core.datasets.object_storage_utils import is_object_storage_path

    return is_object_storage_path(str(path))


def same_directory(first: str | Path | None, second: str | Path | None) -> bool:
    """Whether both paths are given and name the same folder: ``--load`` and ``--save`` spelled differently for one
    run. Each path is taken to its deepest existing folder (symbolic links, ``..`` and the current folder resolved),
    which is compared by device and inode, and the missing parts below it by name: one folder reached through two
    mount points (an Apptainer bind, an export mounted twice) is one folder, also before a first job creates it."""
    if first is None or second is None:
        return False
    try:
        try:
            return _anchored(first) == _anchored(second)
        except OSError:  # an existing folder that cannot be stat'ed: its resolved path is all there is to compare
            return resolved_path(Path(first)) == resolved_path(Path(second))
    except SymlinkLoopError as error:
        raise ValueError(f"{first} or {second} runs into a loop of symbolic links ({error}); name the folder by a "
                         "path without one") from error


def _anchored(path: str | Path) -> tuple[int, int, tuple[str, ...]]:
    """(device, inode) of ``path``'s deepest existing folder, and the names of the missing parts below it."""
    existing, missing = resolved_path(Path(path)), []
    while not existing.exists() and existing != existing.parent:
        missing.append(existing.name)
        existing = existing.parent
    status = existing.stat()
    return status.st_dev, status.st_ino, tuple(reversed(missing))


def _check_not_hugging_face(args: argparse.Namespace, flag: str, directory: Path, outcome: str) -> None:
    """Raise ``ValueError`` when ``directory`` (given as ``flag``, holding no tracker) is a Hugging Face model
    folder (:func:`is_hugging_face_model`), where megatron-core ``outcome``; the fix names the conversion."""
    if not is_hugging_face_model(directory):
        return
    card = getattr(args, "oellm_model", None) or "CARD"
    raise ValueError(f"{flag} {directory} is a Hugging Face model folder ({CONFIG_NAME} and *.safetensors), not a "
                     f"megatron checkpoint: megatron-core finds no {TRACKER_FILE} in it and {outcome}; convert it "
                     f"first with `oellm convert hf-to-mcore --model {card} --hf {directory} --out DIR` and pass "
                     f"{flag} DIR")


def _check_load_holds_checkpoint(args: argparse.Namespace, load: Path) -> None:
    """Raise ``ValueError`` when megatron-core 0.19.2 would load nothing from ``--load load`` (no tracker file, no
    ``--ckpt-step``, no non-persistent checkpoint: :func:`iteration_directory_loaded`) and so trains from random
    weights, printing a warning only after it built the model, though the user named a checkpoint:

    * ``load`` is a Hugging Face model folder (:func:`_check_not_hugging_face`), ``--save`` or not;
    * ``load`` is not the run's ``--save`` (:func:`same_directory`), so this run never saves there either: it does
      not exist (a typo), is empty, or holds no checkpoint megatron finds (:func:`_what_load_holds`).

    ``--load`` equal to ``--save`` and missing, empty or without a tracker is a run's first job (or one that stopped
    before its first save) and passes, as does a ``local`` non-persistent checkpoint (its manager is not read here).
    Under ``--exit-on-missing-checkpoint`` (which ``--ckpt-convert-format`` turns on) megatron exits instead:
    :func:`check_exit_on_missing_checkpoint` names that."""
    if (getattr(args, "exit_on_missing_checkpoint", False) or getattr(args, "ckpt_convert_format", None)
            or getattr(args, "non_persistent_ckpt_type", None) == "local"
            or iteration_directory_loaded(args, load) is not None):
        return
    outcome = "trains from random weights, printing only a warning once the model is built"
    _check_not_hugging_face(args, LOAD, load, outcome)
    save = getattr(args, "save", None)
    if same_directory(load, save):
        return
    not_save = f"is not the run's --save {save}" if save else "is not a --save folder (the run has none)"
    holds, fix = _what_load_holds(load, save)
    raise ValueError(f"--load {load} {holds} and {not_save}: megatron-core loads nothing from it and {outcome}; "
                     f"{fix}")


def _what_load_holds(load: Path, save: str | None) -> tuple[str, str]:
    """(what ``load`` holds instead of a checkpoint megatron-core loads, the fix) for
    :func:`_check_load_holds_checkpoint`: nothing (missing, empty), checkpoint directories without the tracker that
    would name one (resume the newest), or other files (the first few named; start from scratch or resume the run's
    ``--save``)."""
    resume = f"--load {save}, the run's --save folder" if save else "--load the folder a run saved into"
    fresh = f"drop --load to start from scratch, or give {resume}, to resume from its checkpoints"
    try:
        names = sorted(child.name for child in load.iterdir()) if load.exists() else None
    except OSError as error:  # searchable (has_tracker passed) but not listable
        return f"cannot be listed ({error.strerror}), holds no {TRACKER_FILE}", fresh
    if names is None:
        return "does not exist", fresh
    if not names:
        return "is empty", fresh
    held = [name for name in names if (name == RELEASE or iteration_of(name) is not None) and (load / name).is_dir()]
    if not held:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        return f"holds no checkpoint (no {TRACKER_FILE}, no {ITERATION_PREFIX}* directory; it holds {shown})", fresh
    holds = f"holds {', '.join(held[-3:])} but no {TRACKER_FILE}"
    iterations = sorted(step for name in held if (step := iteration_of(name)) is not None)
    if iterations:
        return holds, (f"to resume iteration {iterations[-1]}, add --ckpt-step {iterations[-1]} or write it into "
                       f"{load / TRACKER_FILE}")
    return holds, f"to load {load / RELEASE}, write {RELEASE} into {load / TRACKER_FILE}"


def _check_ckpt_step(args: argparse.Namespace, step: int, flag: str, given: Path) -> None:
    """Raise ``ValueError`` where megatron-core 0.19.2 would apply ``--ckpt-step step`` to a checkpoint other than
    the user's, or to a missing one (``flag given`` is what it loads, :func:`load_source`):

    * ``--load`` holds ``iter_<step>`` but no tracker while ``--pretrained-checkpoint`` is given: megatron falls back
      to the pretrained checkpoint (it looks for the tracker only) and fine-tunes from that one's iteration ``step``
      without a word, or stops if it has none;
    * the iteration directory megatron reads does not exist: ``FileNotFoundError`` after allocating the model.
    """
    if step < 0:  # megatron takes it as the "no checkpoint" iteration
        raise ValueError(f"--ckpt-step {step}: megatron-core reads a negative step as no checkpoint, loads nothing "
                         f"from {flag} {given} and trains from random weights; give the iteration to load (>= 1)")
    iteration = iteration_directory_name(step)
    if flag == PRETRAINED and args.load and (Path(args.load) / iteration).is_dir():
        raise ValueError(f"--load {args.load} holds {iteration} but no {TRACKER_FILE}, so megatron-core loads "
                         f"--pretrained-checkpoint {given} in its place (at --ckpt-step {step}) and fine-tunes from it "
                         f"without a word; to resume --load's iteration {step}, drop --pretrained-checkpoint or write "
                         f"{Path(args.load) / TRACKER_FILE} naming {step}")
    missing = _loaded_checkpoint_missing(args, flag, given)
    if missing is not None:
        raise ValueError(f"--ckpt-step {step}: megatron-core reads {missing.directory} for {flag} {given}, "
                         f"{missing.problem} after allocating the model on every rank; {missing.holds}")


def _check_tracked_directory(args: argparse.Namespace, flag: str, given: Path) -> None:
    """Raise ``ValueError`` when the ``latest_checkpointed_iteration.txt`` of ``flag given`` (what megatron loads,
    without ``--ckpt-step``) names an iteration whose directory does not exist or holds no checkpoint (a copy or
    clean-up that left the tracker behind): megatron-core stops there after allocating the model on every rank."""
    missing = _loaded_checkpoint_missing(args, flag, given)
    if missing is not None:
        directory, problem, holds, holds_iterations = missing
        tracker = directory.parent / TRACKER_FILE  # given's, or a global non-persistent checkpoint's
        other = (f"write an iteration it holds into {tracker}" if holds_iterations else
                 f"name the folder that holds the run's checkpoints with {flag}")  # no iteration to point the tracker to
        raise ValueError(f"{flag} {given}: megatron-core reads {directory}, the iteration {tracker} names, {problem} "
                         f"after allocating the model on every rank; {holds}: restore that directory, or {other}")


def _loaded_checkpoint_missing(args: argparse.Namespace, flag: str, given: Path) -> _MissingCheckpoint | None:
    """The iteration directory megatron loads for ``flag given`` (its tracker read once), refused when it is an
    unfinished save, and what it misses (:func:`_missing_checkpoint`; None when it holds a checkpoint)."""
    loaded_directory = iteration_directory_loaded(args)
    _check_not_unfinished_save(loaded_directory, flag, given)
    return _missing_checkpoint(loaded_directory, given)


class _MissingCheckpoint(NamedTuple):
    """An iteration directory megatron-core reads that does not exist or holds no checkpoint."""

    directory: Path
    problem: str
    """What megatron-core does with it."""
    holds: str
    """What the folder given to the flag holds, in words."""
    holds_iterations: bool
    """Whether that folder holds an iteration directory (one a tracker could name instead)."""


def _missing_checkpoint(directory: Path | None, given: Path) -> _MissingCheckpoint | None:
    """What is missing (:class:`_MissingCheckpoint`) when the iteration ``directory`` megatron reads for ``given``
    does not exist or holds no checkpoint; None when it holds one, or megatron reads none."""
    if directory is None:
        return None
    if not directory.is_dir():
        problem = "which does not exist, and stops with FileNotFoundError"
    elif checkpoint_format(directory) is None:
        problem = "which holds no checkpoint, and stops with NotImplementedError (unknown checkpoint format)"
    else:
        return None
    held: list[int] = []
    try:
        held = sorted(iteration for d in given.glob(f"{ITERATION_PREFIX}*")
                      if d.is_dir() and (iteration := iteration_of(d.name)) is not None)
    except OSError as error:  # not listable: say so rather than what it holds
        holds = f"{given} cannot be listed ({error.strerror})"
    else:
        holds = f"it holds iterations {', '.join(map(str, held))}" if held else "it holds no iteration directory"
    return _MissingCheckpoint(directory, problem, holds, bool(held))


def _check_iteration_directory(flag: str, load_dir: Path, outcome: str, plain_step: bool) -> None:
    """Raise ``ValueError`` when ``load_dir`` (given as ``flag``) is a checkpoint's iteration directory without
    ``latest_checkpointed_iteration.txt``, where megatron-core finds no checkpoint and ``outcome`` follows. The fix
    names ``--ckpt-step`` only where ``plain_step`` (no ``--pretrained-checkpoint`` in the run): megatron applies it
    to both flags, and looks for the tracker before falling back to ``--pretrained-checkpoint``."""
    try:
        if (load_dir / TRACKER_FILE).exists():
            return
        _check_not_unfinished_save(load_dir, flag, load_dir)
        if checkpoint_format(load_dir) is None:
            return
    except OSError:  # not a directory: megatron finds no checkpoint either way (a first job's empty --load)
        return
    step = iteration_of(load_dir.name)
    naming = str(step) if step is not None else repr(load_dir.name)
    fix = (f"{flag} {load_dir.parent} --ckpt-step {step}" if step is not None and plain_step
           else f"{flag} {load_dir.parent} with a {TRACKER_FILE} naming {naming}")
    raise ValueError(f"{flag} {load_dir} is a checkpoint's iteration directory without {TRACKER_FILE}, where "
                     f"megatron-core {outcome}; pass {fix}")


def check_exit_on_missing_checkpoint(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for ``--exit-on-missing-checkpoint`` (which megatron's ``validate_args`` also turns on for
    ``--ckpt-convert-format``) in a run with no checkpoint to load: without ``--load`` and
    ``--pretrained-checkpoint`` megatron-core 0.19.2 never looks for one, so the flag does nothing and the run trains
    from random weights; with a ``--load`` that holds none (no ``latest_checkpointed_iteration.txt``, no newer
    non-persistent checkpoint) it builds the model and optimizer on every rank, then ends the job with ``sys.exit()``:
    exit status 0, as if it had trained or converted. ``args`` are megatron's validated arguments."""
    if not args.exit_on_missing_checkpoint:
        return
    flag = "--exit-on-missing-checkpoint" + (" (on for --ckpt-convert-format)" if args.ckpt_convert_format else "")
    source = load_source(args)
    if source is None:
        raise ValueError(f"{flag} without --load: megatron-core loads no checkpoint, so the flag does nothing and the "
                         "run trains from random weights; give --load DIR of the checkpoint")
    given = args.load if source[0] == LOAD else args.pretrained_checkpoint
    if on_object_storage(args, given):
        return  # megatron's object-storage client looks for it
    loads_local = getattr(args, "non_persistent_ckpt_type", None) == "local"
    if not loads_local and iteration_directory_loaded(args, source[1]) is None:
        raise ValueError(f"{flag} with {source[0]} {source[1]}, which holds no checkpoint ({TRACKER_FILE}): "
                         "megatron-core builds the model on every rank, then ends the job with exit status 0 without "
                         "training or converting anything; name the directory megatron saved into")

"""What a job reads on the cluster, checked from the login node before it is queued (which shares the compute
nodes' file system): the image and bind sources, the ``--data-path`` prefixes and a ``--tokenizer-model`` path; and
the container binds that make those inputs visible at the same paths.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from megatron.oellm.megatron_args import FlagValue
from megatron.oellm.recipes.config import ClusterSettings, RecipeError
from megatron.oellm.recipes.resolve import BYTE_TOKENIZER, check_file_system_data


def data_prefixes(data_path: Sequence[str]) -> list[str]:
    """The dataset prefixes megatron-core reads from a ``--data-path`` list, by its own ``get_blend_from_list``: the
    second of each ``WEIGHT PREFIX`` pair when the list is such pairs, else every entry. A number elsewhere (a weight
    written after its prefix, a lone weight) is then a prefix to megatron-core too, which the job would stop on at
    start. A list megatron-core asserts on (numbers mixed into some weights' places) gives every entry, so that the
    check names the number."""
    from megatron.core.datasets.utils import get_blend_from_list

    entries = list(data_path)
    if not entries:
        return []
    try:
        prefixes, _weights = get_blend_from_list(entries)
    except AssertionError:
        return entries
    return list(prefixes)


def input_binds(flags: Mapping[str, FlagValue]) -> list[str]:
    """Apptainer binds that make the run's inputs visible in the container at the same absolute paths: the
    directory of every ``--data-path`` prefix and the ``--tokenizer-model`` when it is a path here (a Hugging Face
    hub name is not), where the job reads them; then the folders their symbolic links lead to
    (:func:`link_target_folders`), those inside a folder bound already aside."""
    data_path = flags.get("data-path")
    entries = [str(entry) for entry in data_path] if isinstance(data_path, (list, tuple)) else []
    folders, files = [], []
    for prefix in data_prefixes(entries):
        folders.append(Path(prefix).absolute().parent)
        files += [Path(prefix + suffix).absolute() for suffix in (".bin", ".idx")]
    tokenizer = flags.get("tokenizer-model")
    if isinstance(tokenizer, str) and Path(tokenizer).exists():
        path = Path(tokenizer).absolute()
        folders.append(path if path.is_dir() else path.parent)
        files += sorted(path.iterdir()) if path.is_dir() else [path]
    targets = [target for target in link_target_folders(files)
               if not any(target.is_relative_to(folder) for folder in folders)]
    return [bind_source(source, "input directory", "move or link the data to a path without them")
            for source in dict.fromkeys(str(folder) for folder in [*folders, *targets])]


SYSTEM_FOLDERS = frozenset(map(Path, ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc",
                                      "/run", "/sbin", "/sys", "/usr", "/var")))
"""Folders a bind would put over the image's own (its system, or everything under ``/``): a link's target there is
bound alone, not its folder."""


def link_target_folders(files: Iterable[Path]) -> list[Path]:
    """What to bind, resolved, for the symbolic links among ``files`` to lead somewhere in the container, every link
    of a chain included: a bind carries a link but not what it points at, so without them the link dangles there (a
    Hugging Face cache's ``snapshots/<hash>/tokenizer.json`` -> ``../../blobs/<sha>``, a dataset linked from another
    folder). A link's target folder is bound itself; a target file, by its folder, unless that is a
    :data:`SYSTEM_FOLDERS` one (the file alone then); a target that is a system folder, not at all. A link that
    dangles here too (or loops) leads nowhere to bind."""
    binds = []
    for file in files:
        if not file.exists():
            continue
        while file.is_symlink():
            file = _link_target(file)
            bind = file if file.is_dir() or file.parent in SYSTEM_FOLDERS else file.parent
            if bind not in SYSTEM_FOLDERS:
                binds.append(bind)
    return binds


def _link_target(link: Path) -> Path:
    """What the symbolic link ``link`` points at, one step (the target may be a link again), in a resolved folder:
    a relative target is read from the link's own folder, as the kernel reads it."""
    target = link.parent / os.readlink(link)
    return target.parent.resolve() / target.name


def bind_source(source: str, what: str, fix: str) -> str:
    """``source`` as an Apptainer ``--bind`` value; refused when it holds ':' or ',', which ``--bind`` reads as the
    separators of ``SRC:DST`` and of a list (the job would stop at start, after its wait in the queue)."""
    if ":" in source or "," in source:
        raise RecipeError(f"{what} {source!r} has ':' or ',', which a container --bind (Apptainer, Singularity) cannot carry; {fix}")
    return source


def check_data_paths(data_path: Sequence[str]) -> None:
    """Refuse a ``--data-path`` entry that is a URL, or a prefix without its ``.bin`` and ``.idx`` here
    (:func:`missing_data_path_problems`)."""
    check_file_system_data(data_path)
    _refuse_first(missing_data_path_problems(data_path))


def missing_data_path_problems(data_path: Sequence[str]) -> list[str]:
    """One refusal per ``--data-path`` prefix without its ``.bin`` and ``.idx`` here: the login node shares the
    compute nodes' file system, so a job would not find them either (relative paths: from the current directory,
    where the job starts)."""
    from megatron.oellm.training.data_sources import missing_dataset_files, reads_as_number

    problems = []
    for prefix in data_prefixes(data_path):
        if missing := missing_dataset_files(prefix):
            fix = ("megatron-core reads this number as a dataset prefix: write each weight before its prefix "
                   "(WEIGHT PREFIX WEIGHT PREFIX ...)" if reads_as_number(prefix) else
                   "give the prefix of a Megatron dataset, without .bin/.idx")
            problems.append(f"--data-path prefix {prefix!r}: {' and '.join(map(repr, missing))} not found "
                            f"(relative to {Path.cwd()}); {fix}")
    return problems


def check_tokenizer_path(tokenizer_model: str) -> None:
    """Refuse a ``--tokenizer-model`` written as a path that does not exist here
    (:func:`missing_tokenizer_problems`)."""
    _refuse_first(missing_tokenizer_problems(tokenizer_model))


def missing_tokenizer_problems(tokenizer_model: str) -> list[str]:
    """The refusal of a ``--tokenizer-model`` written as a path that does not exist here (the training entry's rule,
    :func:`megatron.oellm.training.data_sources.absent_tokenizer_path`), or none: it can be no Hugging Face hub name,
    the login node shares the compute nodes' file system, and the job would stop when it builds the tokenizer, after
    the queue (relative paths: from the current directory, where the job starts). Hub names (``org/name``) are left
    to the run. A recipe's tokenizer other than ``byte`` is megatron-core's ``HuggingFaceTokenizer``, which loads a
    folder or a hub name, never a single file: an existing file or a folder without tokenizer files is refused too
    (:func:`megatron.oellm.training.data_sources.unloadable_tokenizer_folder`, the entry's rule), and so is a folder
    whose tokenizer file is a Git LFS pointer (a clone without git-lfs)."""
    from megatron.oellm.training.data_sources import (
        absent_tokenizer_path,
        lfs_pointer_in_tokenizer_folder,
        lfs_pointer_refusal,
        unloadable_tokenizer_folder,
    )

    if tokenizer_model == BYTE_TOKENIZER:
        return []
    if absent_tokenizer_path(tokenizer_model):
        return [f"--tokenizer-model {tokenizer_model!r} does not exist (relative to {Path.cwd()}); give a Hugging Face "
                "tokenizer directory on the shared file system (AutoTokenizer loads no single file), a hub name "
                "(org/name; compute nodes without network need the directory), or 'byte'"]
    reason = unloadable_tokenizer_folder(tokenizer_model)
    if reason is not None:
        return [f"--tokenizer-model {tokenizer_model!r} {reason}; give the Hugging Face tokenizer's folder (what its "
                "save_pretrained wrote), a hub name (org/name), or 'byte'"]
    pointer = lfs_pointer_in_tokenizer_folder(tokenizer_model)
    return [] if pointer is None else [lfs_pointer_refusal(pointer, "--tokenizer-model")]


def check_host_paths(cluster: ClusterSettings) -> None:
    """Refuse an image or bind source that does not exist here (:func:`missing_host_path_problems`), before a job
    waits in the queue for nothing."""
    _refuse_first(missing_host_path_problems(cluster))


def missing_host_path_problems(cluster: ClusterSettings) -> list[str]:
    """One refusal per image or bind source of ``cluster`` that does not exist here.

    A relative path is checked from the current directory, where the job starts; an image URI (``docker://``,
    ``oras://`` ...) is left to Apptainer. An empty path is refused: ``Path("")`` is the current directory, which
    exists.
    """
    problems = []
    if not cluster.image:
        problems.append("the container image path is empty (an unset variable in --image?); pass --image PATH")
    elif "://" not in cluster.image and not Path(cluster.image).exists():
        problems.append(f"container image {cluster.image!r} does not exist (relative to {Path.cwd()}); build it "
                        "(docs/container.md) or pass --image PATH")
    for bind in cluster.binds:
        source = bind.split(":", 1)[0]
        if not source:
            problems.append(f"cluster.binds entry {bind!r} has an empty source path; write SRC[:DST]")
        elif not Path(source).exists():
            problems.append(f"bind source {source!r} of cluster.binds entry {bind!r} does not exist")
    return problems


def missing_input_problems(cluster: ClusterSettings, data_path: Sequence[str], tokenizer_model: str) -> list[str]:
    """Every refusal of the login-node checks ``--submit`` runs on what its jobs read (:func:`check_host_paths`,
    :func:`check_data_paths`, :func:`check_tokenizer_path`), for a dry run to name all at once: on a machine away from
    the cluster (a laptop) the paths are expected to be missing, so a dry run notes them rather than refuse."""
    return [*missing_host_path_problems(cluster), *missing_data_path_problems(data_path),
            *missing_tokenizer_problems(tokenizer_model)]


def _refuse_first(problems: Sequence[str]) -> None:
    """Raise :class:`RecipeError` with the first of ``problems``, if any: a submission is refused on one."""
    if problems:
        raise RecipeError(problems[0])

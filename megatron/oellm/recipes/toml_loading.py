"""Loading a recipe TOML file: follow its ``extends`` chain, deep-merge the tables, and build the
:class:`~megatron.oellm.recipes.config.Recipe` with every unknown, missing or mistyped key named as the config
author wrote it. Each file's Megatron flags are checked against the training entry's parser before the merge, so a
refusal names the file that holds the flag (:mod:`megatron.oellm.recipes.flag_names` imports megatron-core for it);
the rest is pure Python.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import re
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from megatron.oellm.megatron_args import FlagValue
from megatron.oellm.models.parallel import ParallelLayout
from megatron.oellm.paths import SymlinkLoopError, resolved_path, source_checkout
from megatron.oellm.recipes.config import (
    ClusterSettings,
    LocalSettings,
    Recipe,
    RecipeError,
    TableRow,
    check_layout_types,
    layout_overrides,
)
from megatron.oellm.recipes.flag_names import check_flag_names, check_flag_values
from megatron.oellm.recipes.toml_types import fits_type, toml_type_name, with_article

SettingsT = TypeVar("SettingsT")
"""One of the recipe's settings dataclasses (a row, ``[cluster]``, ``[local]``, the recipe itself)."""


def load_recipe(path: str | Path) -> Recipe:
    """Read a recipe TOML file (following ``extends``) and build the :class:`Recipe`; errors name the file. The file
    may be a pipe; one given as an open stream (``oellm recipe <(sed ... X.toml)``, read as ``/dev/fd/N``, or
    ``/dev/stdin < X.toml``: :func:`is_open_stream`) sets its ``name`` in the config: the recipe is named after its
    file otherwise, and its runs' folder and job names after the recipe."""
    path = Path(path)
    data = _read_with_bases(path, seen=())
    if is_open_stream(path) and "name" not in data:
        raise RecipeError(f"recipe config {path} is an open stream (standard input or a file descriptor), and its name "
                          f"{path.stem!r} names no recipe (the runs' folder and job names come from it); set "
                          "name = \"...\" in the config, or give the config file's own path")
    try:
        return _build(path.stem, data)
    except RecipeError as err:  # the merged recipe's own checks name the key; the file they came from is this one
        raise RecipeError(f"{path}: {err}") from err
    except KeyError as err:
        raise RecipeError(f"{path}: the [{err.args[0]}] table is missing (add it here or in the extended base); "
                          "compare with the configs in examples/oellm/") from err
    except TypeError as err:
        raise RecipeError(f"{path}: {err}; compare with the repository's examples/oellm/*.toml") from err


OPEN_STREAM = re.compile(r"/+(?:dev/stdin|dev/fd/\d+|proc/(?:self|thread-self|\d+)/fd/\d+)")
"""The paths, as given, of a process's open streams: standard input and its file descriptors by number (a leading
``//``, which POSIX lets a path keep, names the same file)."""


def is_open_stream(path: Path) -> bool:
    """Whether ``path``, as given, names an open stream rather than a file: ``/dev/stdin``, ``/dev/fd/N`` (a shell's
    ``<(...)``), ``/proc/self/fd/N`` or ``/proc/PID/fd/N``. Its name (``stdin``, ``63``) names no recipe, and its
    folder holds no base configs. Decided by the path as given, not by what it opens: ``/dev/stdin < X.toml`` opens a
    regular file, and a named pipe (``mkfifo configs/X.toml``) has a folder and a name of its own."""
    return OPEN_STREAM.fullmatch(str(path)) is not None


def _read_with_bases(path: Path, seen: tuple[Path, ...], rows_replaced: bool = False) -> dict[str, Any]:
    """The TOML table of ``path`` deep-merged over its ``extends`` chain; ``seen`` holds the configs that extend it,
    outermost first, so that a cycle is reported with the chain that led to it; ``rows_replaced``: one of them has
    ``rows`` of its own, which replace those of ``path`` whole (so its rows' flags are not checked)."""
    resolved = _resolved_config(path, f"recipe config {path}")
    if resolved in seen:
        chain = " -> ".join(str(item) for item in (*seen, resolved))
        raise RecipeError(f"{seen[0]}: 'extends' loops back to a config already in the chain: {chain}")
    if path.is_dir():
        configs = sorted(item.name for item in path.glob("*.toml") if not item.name.startswith("_"))
        found = f"one of its configs: {', '.join(configs)}" if configs else "a config; it holds no .toml recipe"
        raise RecipeError(f"recipe config {path} is a folder; name {found}")
    if path.exists() and not _is_file_or_pipe(path):
        raise RecipeError(f"recipe config {path} {NOT_REGULAR_FILE}; name a .toml recipe config")
    if not path.exists():
        raise RecipeError(f"recipe config {path} does not exist; {_shipped_config_hint(path)}")
    try:
        text = path.read_text(encoding="utf-8")  # TOML is UTF-8, whatever the locale
    except UnicodeDecodeError as err:
        raise RecipeError(f"{path}: not UTF-8 text, which TOML is ({err.reason} at byte {err.start}); save it as "
                          "UTF-8") from err
    except OSError as err:
        raise RecipeError(f"cannot read recipe config {path} ({err.strerror or err})") from err
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        if _is_shell_script(path, text):
            raise RecipeError(_shell_script_refusal(path)) from err
        raise RecipeError(f"{path}: not valid TOML ({err})") from err
    _check_megatron_flags(path, data, with_rows=not rows_replaced)
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise RecipeError(f"{path}: extends = {base!r} is not a string; give the base config's path, absolute or "
                          f"{RELATIVE_TO}, e.g. extends = \"_mn5.toml\"")
    if not base.strip():
        raise RecipeError(f"{path}: extends = {base!r} is empty; give the base config's path, absolute or "
                          f"{RELATIVE_TO}, or drop the key")
    if is_open_stream(path) and not resolved.is_file() and not Path(base).is_absolute():
        raise RecipeError(f"{path}: extends = {base!r} is relative, but this config is read from a pipe (an open "
                          "stream that is no file), which has no folder to resolve it against; give the base config's "
                          "absolute path, or give the config file's own path")
    base_path = resolved.parent / base  # beside the real file: a link to a config elsewhere still finds its base
    _resolved_config(base_path, f"{path}: extends = {base!r}, but the base config {base_path}")  # names the extends
    if not _is_file_or_pipe(base_path):
        raise RecipeError(f"{path}: extends = {base!r}, but the base config {base_path} {_not_a_file(base_path)}; "
                          f"give the path of a .toml config, absolute or {RELATIVE_TO}")
    return _deep_merge(_read_with_bases(base_path, seen + (resolved,), rows_replaced or "rows" in data), data)


def _check_megatron_flags(path: Path, data: Mapping[str, Any], with_rows: bool) -> None:
    """Refuse a Megatron flag that config file ``path`` (read as ``data``, before the merge) sets in its
    ``[megatron_flags]`` or, ``with_rows`` (its rows are the recipe's, no config extending it replaced them), a row's
    ``flags``, whose name the training entry's parser does not know or whose value it
    would not read as meant (:func:`check_flag_names`, :func:`check_flag_values`), or which is no TOML value a flag
    takes (a table, a date), naming ``path``: after the merge,
    a flag from a shared base would be refused without saying which file holds it. A table of another type is left
    to :func:`_build`, which names it."""
    for where, flags in _flag_tables(data, with_rows):
        for name, value in flags.items():
            if not fits_type(value, FlagValue):  # a date, a table: what no flag's value is
                raise RecipeError(f"{path}: {name} = {value!r} in {where} is not "
                                  f"{with_article(toml_type_name(FlagValue))}")
        try:
            check_flag_names(where, flags)
            check_flag_values(where, flags)
        except RecipeError as err:
            raise RecipeError(f"{path}: {err}") from err


def _flag_tables(data: Mapping[str, Any], with_rows: bool) -> list[tuple[str, Mapping[str, Any]]]:
    """The Megatron flag tables of one config file's ``data``, each with where it is for a refusal: its
    ``[megatron_flags]`` and, ``with_rows``, its rows' ``flags`` (numbered as ``--row`` numbers them: these rows are
    the recipe's, as a file's ``rows`` replace its base's whole)."""
    tables: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(data.get("megatron_flags"), Mapping):
        tables.append(("[megatron_flags]", data["megatron_flags"]))
    rows = data.get("rows") if with_rows else None
    for number, row in enumerate(rows if isinstance(rows, list) else [], start=1):
        if isinstance(row, Mapping) and isinstance(row.get("flags"), Mapping):
            tables.append((f"row {number}'s flags", row["flags"]))
    return tables


NOT_REGULAR_FILE = "is neither a regular file nor a pipe (a device or socket)"
"""What a recipe config path that exists but is neither a folder, a file nor a pipe is: ``/dev/zero`` reads
forever."""

RELATIVE_TO = "relative to the folder of this config's real file (a symbolic link's target)"
"""Where a relative ``extends`` is resolved, for the refusals that ask for one."""


def _is_file_or_pipe(path: Path) -> bool:
    """Whether ``path`` is a config that can be read to its end: a regular file or a pipe (its writer ends it), not a
    device (``/dev/zero`` reads forever) or a socket."""
    return path.is_file() or path.is_fifo()


def _resolved_config(path: Path, named: str) -> Path:
    """``path`` resolved (:func:`~megatron.oellm.paths.resolved_path`); a loop of symbolic links in it is a
    :class:`RecipeError` beginning with ``named`` (the config, or the ``extends`` that names it), not a traceback."""
    try:
        return resolved_path(path)
    except SymlinkLoopError as error:
        raise RecipeError(f"{named} runs into a loop of symbolic links ({error}); name it by a path without "
                          "one") from error


def _not_a_file(path: Path) -> str:
    """What ``path``, which is neither a regular file nor a pipe, is instead, for a refusal: a folder, something else
    (a device or socket), or nothing."""
    if path.is_dir():
        return "is a folder"
    return NOT_REGULAR_FILE if path.exists() else "does not exist"


def _shipped_config_hint(path: Path) -> str:
    """Where the shipped recipe configs are, for a config ``path`` that does not exist: run from a checkout, the
    shipped config of ``path``'s name (``qwen3_5_35b_a3b_mn5_strong``, its ``.sh`` or ``.toml`` in another folder) by
    absolute path, else the up to three closest (a misspelt name may be closest to another model's recipe, e.g.
    ``qwen3_30b_a3b_mn5_strong`` to Qwen3.5's strong one before ``qwen3_30b_a3b_mn5``), else the checkout's config
    folder; an installed copy (a wheel) ships no configs, so there it says where they are in the repository."""
    checkout = source_checkout()
    shipped = None if checkout is None else checkout / "examples" / "oellm"
    if shipped is None or not shipped.is_dir():
        return "the shipped configs are examples/oellm/*.toml of the repository (a checkout, not the wheel)"
    names = sorted(item.stem for item in shipped.glob("*.toml") if not item.name.startswith("_"))
    name = path.stem if path.suffix in (".toml", ".sh") else path.name
    if name in names:
        return f"did you mean {shipped / name}.toml?"
    close = difflib.get_close_matches(name, names, n=3)
    if close:
        return f"did you mean one of {', '.join(f'{item}.toml' for item in close)} in {shipped}?"
    return f"the shipped configs are {shipped}/*.toml"


def _is_shell_script(path: Path, text: str) -> bool:
    """Whether ``path``, whose ``text`` is no valid TOML, is a shell script: named ``*.sh`` or starting with a ``#!``
    line, as the recipe wrappers of examples/oellm/ do. Asked only of text TOML refuses, since a ``#!`` line is also
    a TOML comment, and a valid config must load whatever its first line."""
    return path.suffix == ".sh" or text.startswith("#!")


def _shell_script_refusal(path: Path) -> str:
    """The refusal of shell script ``path`` given as a recipe config: a recipe's wrapper (``X.sh`` with its ``X.toml``
    beside it) named both ways to run the recipe, instead of TOML's parse error at the script's first command."""
    config = path.with_suffix(".toml")
    if config.is_file():
        return (f"{path} is the shell wrapper of the recipe {config.name}, not a TOML config: run the wrapper "
                f"(bash {shlex.quote(str(path))} --dry-run ...) or give oellm recipe its config "
                f"(oellm recipe {shlex.quote(str(config))} --dry-run ...)")
    return (f"{path} is a shell script, not a recipe config: oellm recipe reads a TOML config (the shipped ones are "
            "examples/oellm/*.toml); run a script with bash")


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``: tables merge key by key, everything else (arrays too) replaces."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def _quoted_time(table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` with an unquoted TOML ``time = 00:30:00`` (read as a local time) turned into its text."""
    table = dict(table)
    if isinstance(table.get("time"), datetime.time):
        table["time"] = table["time"].isoformat()
    return table


def _table(data: dict[str, Any], key: str, name: str, default: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The TOML table ``key`` popped from ``data`` (``default`` when absent; a missing table without default raises
    the ``KeyError`` :func:`load_recipe` reports); a value that is not a table raises :class:`RecipeError`."""
    value = data.pop(key) if default is None else data.pop(key, default)
    if not isinstance(value, Mapping):
        raise RecipeError(f"recipe {name}: {key} = {value!r} is not a table; write it as [{key}] with its keys "
                          "below, as in the configs in examples/oellm/")
    return dict(value)


def _row_tables(rows: Any, name: str) -> list[Mapping[str, Any]]:
    """The ``rows`` value of a config as its list of row tables; anything else (``rows = 5``, ``rows = [1]``) raises
    :class:`RecipeError` naming ``[[rows]]``, instead of a Python error about iterables or mappings."""
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        raise RecipeError(f"recipe {name}: rows = {rows!r} is not a list of tables; write each table row as "
                          "[[rows]] with its keys below, as in the configs in examples/oellm/")
    return rows


def _check_env_strings(env: Any, where: str) -> None:
    """Refuse a value of the environment table ``env`` that is not a string (the job exports text; a TOML number
    would be refused later as a type without saying how to write it); ``where`` prefixes the message."""
    for key, value in env.items() if isinstance(env, Mapping) else ():
        if not isinstance(value, str):
            raise RecipeError(f"{where}{key} = {value!r} is not a string; quote it ({key} = \"{value}\") so the "
                              "job exports exactly that text")


def _settings(cls: type[SettingsT], values: Mapping[str, Any], where: str) -> SettingsT:
    """``cls(**values)`` for one table of a recipe, with an unknown or missing key named as the config author wrote
    it (an unknown one with the closest known key) instead of Python's ``__init__() got an unexpected keyword
    argument``; ``where`` prefixes the message."""
    known = {item.name: item for item in dataclasses.fields(cls) if item.init}
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(sorted(known))}"
            raise RecipeError(f"{where}unknown key {key!r} ({hint})")
    missing = [name for name, item in known.items() if name not in values
               and item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]
    if missing:
        raise RecipeError(f"{where}{' and '.join(missing)} not set")
    return cls(**values)


def _build(name: str, data: dict[str, Any]) -> Recipe:
    """The :class:`Recipe` of a merged TOML table; an unknown or missing key raises :class:`RecipeError` naming its
    table (:func:`_settings`)."""
    data = dict(data)
    name = data.pop("name", name)
    cluster = _table(data, "cluster", name)
    for key in ("binds", "required_options"):  # TOML arrays, tuple fields
        values = cluster.get(key, ())
        cluster[key] = tuple(values) if isinstance(values, list) else values
    cluster = _quoted_time(cluster)
    _check_env_strings(cluster.get("env", {}), f"recipe {name} [cluster.env]: ")
    rows = _row_tables(data.pop("rows", []), name)
    for number, row in enumerate(rows, start=1):
        _check_env_strings(row.get("env", {}), f"recipe {name} row {number} env: ")
    rows = tuple(_settings(TableRow, _quoted_time(row), f"recipe {name} row {number}: ")
                 for number, row in enumerate(rows, start=1))
    parallel = _table(data, "parallel", name, default={})
    check_layout_types(parallel, f"recipe {name}: ")
    tables = {"name", "parallel", "cluster", "local", "rows"}
    unset = [item.name for item in dataclasses.fields(Recipe) if item.name not in tables | data.keys()
             and item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]
    if unset:
        base = (f"; {name} is a shared base (its name starts with '_'): run a recipe that extends it"
                if name.startswith("_") else "")
        raise RecipeError(f"recipe {name}: {' and '.join(unset)} not set{base}")
    return _settings(Recipe, {
        "name": name,
        "parallel": _settings(ParallelLayout, layout_overrides(parallel), f"recipe {name} [parallel]: "),
        "cluster": _settings(ClusterSettings, cluster, f"recipe {name} [cluster]: "),
        "local": _settings(LocalSettings, _table(data, "local", name), f"recipe {name} [local]: "),
        "rows": rows,
        **data,
    }, f"recipe {name}: ")

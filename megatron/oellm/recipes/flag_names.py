"""The Megatron flag names of a recipe, checked against the training entry's own parser before anything runs.

A flag given as ``false`` is left out of the argv (:func:`megatron.oellm.megatron_args.flags_to_argv`), so the
parser never sees its name: a misspelt ``moe-router-force-load-balacing = false``, or one written with underscores,
would vanish without a word and leave the base's flag on. Every name is therefore looked up in the parser whatever
its value, and a removal is checked to have removed the setting. megatron-core's parser is imported only when a
check runs (it takes seconds to build; it is built once per process).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping, Sequence

from megatron.oellm.megatron_args import FlagValue
from megatron.oellm.recipes.config import RecipeError


def _option_actions() -> Mapping[str, argparse.Action]:
    """The training entry's options (``--name`` -> its parser action): megatron-core's plus ``--oellm-*``."""
    from megatron.oellm.training.args import oellm_parser

    return oellm_parser()._option_string_actions


def _suggestion(name: str, options: Mapping[str, argparse.Action]) -> str:
    """`` (did you mean 'x'?)`` for the closest option name to ``name`` (underscores read as dashes), else ''."""
    names = [option[2:] for option in options if option.startswith("--")]
    close = difflib.get_close_matches(name.replace("_", "-"), names, n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_flag_names(where: str, flags: Mapping[str, FlagValue]) -> None:
    """Refuse a name in ``flags`` that is not an option of the training entry, whatever its value (``false``
    included); the message names the closest option."""
    options = _option_actions()
    for name in flags:
        if f"--{name}" not in options:
            raise RecipeError(f"{name!r} in {where} is not an option of the training entry (megatron-core 0.19.2's "
                              f"flags and --oellm-*){_suggestion(name, options)}; write a flag as on the command "
                              "line, without '--'")


def check_removals(flags: Mapping[str, FlagValue]) -> None:
    """Refuse a flag given as ``false`` whose setting another flag of ``flags`` still sets (an alias such as
    ``override-opt-param-scheduler`` / ``override-opt_param-scheduler``, or ``--no-X`` for ``--X``): leaving it
    out of the argv would not remove it. The names must have passed :func:`check_flag_names`."""
    options = _option_actions()
    setters: dict[str, list[str]] = {}
    for name, value in flags.items():
        if value is not None and value is not False:
            setters.setdefault(options[f"--{name}"].dest, []).append(f"--{name}")
    for name, value in flags.items():
        dest = options[f"--{name}"].dest
        if value is False and dest in setters:
            raise RecipeError(f"--{name} = false removes the flag, but {', '.join(setters[dest])} (set by the "
                              f"recipe, its base or the row) still sets {dest!r}; set that flag to false instead")


def _takes_several(action: argparse.Action) -> bool:
    """Whether ``action`` reads several argv tokens (``nargs`` '+', '*' or a count above one)."""
    return action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 1


def _value_refusal(name: str, value: FlagValue, action: argparse.Action) -> str | None:
    """Why Megatron's parser would read ``--name value`` otherwise than the recipe means, or None."""
    if action.nargs == 0:
        if value is not True:
            return (f"--{name} takes no value, but is given {value!r}; write {name} = true to pass it, {name} = false "
                    "to leave it out")
        return None
    if value is True:
        return (f"--{name} takes a value, but is given true (a bare --{name}: a parser error, or an empty list "
                "for an option of any number of values); give its value")
    if isinstance(value, Sequence) and not isinstance(value, str) and not _takes_several(action):
        return (f"--{name} takes one value, but is given the array {list(value)!r} (arrays are for the flags of "
                "several values, such as recompute-modules); write its one value, without brackets")
    if _takes_several(action) and isinstance(value, str) and len(value.split()) > 1:
        array = ", ".join(f'"{word}"' for word in value.split())
        return (f"--{name} = {value!r} is one value, one argv token, to Megatron ({value!r} itself, not the words "
                f"in it); write the values as a TOML array: {name} = [{array}]")
    return None


def check_flag_values(where: str, flags: Mapping[str, FlagValue]) -> None:
    """Refuse a value Megatron's parser would not read as the recipe means it: a value for a flag that takes none
    (``bf16 = 1``), ``true`` for a flag that takes a value, an array for a flag of one value (``lr = [1, 2]``: the
    parser stops the job at start on the unknown argument ``2``), or several words in one string for a flag of
    several values (``recompute-modules = "moe_act layernorm"`` reaches Megatron as the one module
    ``'moe_act layernorm'``, which only the model build at job start refuses). ``false`` (leave the flag out) fits
    every flag. The names must have passed :func:`check_flag_names`."""
    options = _option_actions()
    for name, value in flags.items():
        if value is None or value is False:
            continue
        refusal = _value_refusal(name, value, options[f"--{name}"])
        if refusal:
            raise RecipeError(f"{refusal} (in {where})")


def apply_flags(flags: dict[str, FlagValue], later: Mapping[str, FlagValue]) -> None:
    """Update ``flags`` with the ``later`` group of flags, where a later setting under one spelling replaces the
    earlier spellings of the same setting (``save-interval`` / ``persistent-save-interval``, ``--X`` / ``--no-X``).

    A plain dict update keeps an overridden name at its first place in the argv, so an earlier group's other
    spelling, placed after it, would be what argparse reads last: the later group's value would be lost. A ``false``
    replaces nothing (:func:`check_removals` refuses a removal another spelling undoes)."""
    options = _option_actions()
    for name, value in later.items():
        if value is not None and value is not False:
            dest = options[f"--{name}"].dest
            for other in [n for n in flags if n != name and getattr(options.get(f"--{n}"), "dest", None) == dest]:
                del flags[other]
        flags[name] = value

"""TOML value types of recipe fields: whether a value read from TOML fits a field's annotation, and the
annotation in TOML's own words (``integer``, ``array of strings``) for the error a config author reads.
Pure Python: no torch, no megatron-core.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any


def fits_type(value: Any, hint: Any) -> bool:
    """Whether ``value`` (read from TOML) has the type ``hint`` of a recipe field; an int fits a float, a bool does
    not fit an int, and only an array fits a sequence (a string is not one)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(fits_type(value, arg) for arg in args)
    if origin is tuple:
        return isinstance(value, tuple) and all(fits_type(item, args[0]) for item in value)
    if origin is Sequence:
        return isinstance(value, (list, tuple)) and all(fits_type(item, args[0]) for item in value)
    if origin is Mapping:
        return isinstance(value, Mapping) and all(isinstance(k, str) and fits_type(v, args[1]) for k, v in value.items())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def toml_type_name(hint: Any) -> str:
    """``hint`` in TOML's words, as a config author reads it: ``integer``, ``array of strings``, ``table of
    numbers``. A None in a union is left out (TOML has no null: a key is set or absent)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any value"
    if origin in (typing.Union, types.UnionType):  # an integer is a number too: named once
        kinds = [arg for arg in args if arg is not type(None) and not (arg is int and float in args)]
        return " or ".join(toml_type_name(arg) for arg in kinds)
    if origin in (tuple, Sequence):
        return f"array of {_plural(toml_type_name(args[0]))}"
    if origin is Mapping:
        return f"table of {_plural(toml_type_name(args[1]))}"
    return TOML_TYPE_NAMES.get(hint, getattr(hint, "__name__", str(hint)))


TOML_TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string"}
"""TOML's name of each scalar type a recipe field takes (an integer also fits a number field)."""


def with_article(name: str) -> str:
    """``integer`` -> ``an integer``, ``table of numbers`` -> ``a table of numbers``."""
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _plural(name: str) -> str:
    """The plural of a :func:`toml_type_name` (every word of an ``a or b`` name): ``strings``, ``integers or numbers``,
    ``arrays of values``."""
    return " or ".join(_plural_word(word) for word in name.split(" or "))


def _plural_word(name: str) -> str:
    """``integer`` -> ``integers``, ``array of strings`` -> ``arrays of strings``, ``any value`` -> ``values``."""
    if name == "any value":
        return "values"
    head, _, tail = name.partition(" of ")
    return f"{head}s of {tail}" if tail else f"{name}s"

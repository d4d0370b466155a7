"""Optimizer, initialisation and data-loader values megatron's ``validate_args`` lets through and something after it
refuses (or trains on without a word): checked on the parsed command line, before Megatron initialises.

Each is refused late otherwise: torch's Adam and dropout, ``torch.nn.init``, the data loader and megatron's seeding
raise when the model, optimizer or loader is built, on every rank; a learning rate that is not a finite number trains
on NaNs, and a negative or NaN clipping norm turns clipping off without a word.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from megatron.oellm.megatron_args import megatron_flag


@dataclass(frozen=True)
class ValueRange:
    """The values a flag takes: finite, at least ``low``, below ``high`` (at most it, with ``high_inclusive``)."""

    low: float
    """The smallest value."""
    high: float = math.inf
    """The bound above the values (none by default)."""
    high_inclusive: bool = False
    """Whether ``high`` itself is a value."""
    refuses: str = "megatron-core trains on NaNs"
    """Who refuses a value outside the range, and when (for the message)."""
    integer: bool = False
    """Whether the flag counts (its values and bounds printed as integers)."""

    @property
    def takes_infinity(self) -> bool:
        """Whether infinity is a value: an infinite ``high`` that is inclusive."""
        return self.high == math.inf and self.high_inclusive

    def holds(self, value: float) -> bool:
        """Whether ``value`` is in the range."""
        return ((math.isfinite(value) or (self.takes_infinity and value == math.inf)) and value >= self.low
                and (value <= self.high if self.high_inclusive else value < self.high))

    def show(self, value: float) -> str:
        """``value`` as the message prints it."""
        return str(int(value)) if self.integer else f"{value:g}"

    def describe(self) -> str:
        """The range as the message gives it, e.g. ``a finite number in [0, 1)``."""
        kind = "an integer" if self.integer else "a number" if self.takes_infinity else "a finite number"
        if self.high == math.inf:
            return kind if self.low == -math.inf else f"{kind} >= {self.show(self.low)}"
        return f"{kind} in [{self.show(self.low)}, {self.show(self.high)}{']' if self.high_inclusive else ')'}"


_ADAM = "torch's Adam refuses it when the optimizer is built, after the model is allocated on every rank"
_DROPOUT = "torch's dropout refuses it at the first forward pass"
VALUE_RANGES: dict[str, ValueRange] = {
    # the signs of these are megatron's to check (validate_args, check_lr_schedule name them), not their finiteness
    "lr": ValueRange(-math.inf),
    "min_lr": ValueRange(-math.inf),
    "lr_warmup_init": ValueRange(-math.inf),
    "clip_grad": ValueRange(0.0, math.inf, high_inclusive=True,
                            refuses="megatron-core clips only at a positive norm and turns clipping off for any other "
                                    "value without a word (0 turns it off, inf logs the norm without clipping)"),
    "weight_decay": ValueRange(-math.inf),
    "adam_beta1": ValueRange(0.0, 1.0, refuses=_ADAM),
    "adam_beta2": ValueRange(0.0, 1.0, refuses=_ADAM),
    "adam_eps": ValueRange(0.0, refuses=_ADAM),
    "init_method_std": ValueRange(0.0, refuses="torch.nn.init refuses it when the model is built, on every rank"),
    "hidden_dropout": ValueRange(0.0, 1.0, high_inclusive=True, refuses=_DROPOUT),
    "attention_dropout": ValueRange(0.0, 1.0, high_inclusive=True, refuses=_DROPOUT),
    "seed": ValueRange(1, 2**32 - 1, high_inclusive=True, integer=True,
                       refuses="megatron refuses a seed below 1, and numpy one of 2**32 or more (megatron adds 100 "
                               "x the pipeline rank to it first), after setting up the process groups, on every rank"),
    "num_workers": ValueRange(0, integer=True, refuses="torch's data loader refuses it when the first batch is loaded"),
}
"""Megatron argument -> the values it may take (megatron-core 0.19.2, torch 2.11-2.13)."""


def check_value_ranges(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` naming the first of :data:`VALUE_RANGES` the parsed ``args`` set outside its range
    (an unset optional value, None, is left to megatron's default)."""
    for name, allowed in VALUE_RANGES.items():
        value = getattr(args, name, None)
        if value is not None and not allowed.holds(value):
            raise ValueError(f"{megatron_flag(name)} {allowed.show(value)}: give {allowed.describe()}; "
                             f"{allowed.refuses}")

"""Megatron's activation and tokens-per-expert logs against this node's Transformer Engine and the run's backend.

Premises on megatron's own ``activation_logging`` where TE does not import (as on this CPU machine and the H200 test
machine): its class test raises for a module it does not list, and it has no grouped linear to hook tokens per
expert on. Then the entry refuses both flags in one line, and passes them where megatron's classes are real.
"""

from __future__ import annotations

import random

import pytest
import torch

from megatron.oellm.backends.selection import transformer_engine_import_error
from megatron.oellm.training.activation_logs import check_activation_logging
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    entry_up_to_pretrain,
    refused_line,
    validated_tiny_moe_run,
)

WITHOUT_TE = pytest.mark.skipif(transformer_engine_import_error() is None, reason="Transformer Engine imports here")


@WITHOUT_TE
def test_premise_megatrons_module_classes_hold_placeholders_without_transformer_engine():
    from megatron.training import activation_logging

    with pytest.raises(TypeError, match="isinstance"):
        isinstance(torch.nn.GELU(), activation_logging.LINEAR_TYPES)  # a class its list does not start with
    assert activation_logging._GROUPED_LINEAR_TYPES == ()


@WITHOUT_TE
def test_activation_logging_without_transformer_engine_is_refused_in_one_line(monkeypatch, capsys):
    interval = random.randrange(1, 50)
    with pytest.raises(ValueError, match=rf"--save-activations-interval {interval}: .*TypeError"):
        check_activation_logging(validated_tiny_moe_run(["--save-activations-interval", str(interval)]), "torch")
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys,
                        [*TINY_MOE_RUN, "--save-activations-interval", str(interval)])
    assert "--save-activations-interval" in line


@pytest.mark.parametrize("backend", ["torch", "te"])
def test_tokens_per_expert_logging_megatron_cannot_hook_is_refused(backend, monkeypatch):
    """The torch-native experts are never hooked; the TE backend is refused where TE's grouped linears are absent."""
    from megatron.training import activation_logging

    monkeypatch.setattr(activation_logging, "_GROUPED_LINEAR_TYPES", ())
    interval = random.randrange(1, 50)
    with pytest.raises(ValueError, match=rf"--save-tokens-per-expert-interval {interval}: .*write no tokens"):
        check_activation_logging(validated_tiny_moe_run(["--save-tokens-per-expert-interval", str(interval)]), backend)


def test_both_logs_pass_where_megatrons_classes_are_real_and_the_experts_are_te(monkeypatch):
    from megatron.training import activation_logging

    monkeypatch.setattr(activation_logging, "LINEAR_TYPES", (torch.nn.Linear, torch.nn.Embedding))
    monkeypatch.setattr(activation_logging, "_GROUPED_LINEAR_TYPES", (torch.nn.Linear,))
    args = validated_tiny_moe_run(["--save-activations-interval", "5", "--save-tokens-per-expert-interval", "5"])
    check_activation_logging(args, "te")
    with pytest.raises(ValueError, match="torch-native backend's experts"):
        check_activation_logging(args, "torch")
    check_activation_logging(validated_tiny_moe_run([]), "torch")  # neither flag: nothing to refuse

"""``--spec MODULE FUNCTION`` is refused by the training entry before Megatron initialises: the model provider builds
the card family's layers and reads no ``--spec``, so the layer spec was dropped without a word."""

import random

import pytest

from tests.unit_tests.training.test_data import _Reached, entry_up_to_pretrain

ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--mock-data"]

SPECS = [
    ["megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_local_spec"],
    ["megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_with_transformer_engine_spec"],
    ["megatron.core.models.hybrid.hybrid_layer_specs", "hybrid_stack_spec"],
]


def test_a_layer_spec_module_is_refused_before_pretrain(monkeypatch, capsys):
    """A layer spec from Megatron-LM's example scripts stops the run with one error line naming it (exit status 2)
    instead of reaching ``pretrain`` with the card's layers built in its place."""
    spec = random.choice(SPECS)
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main([*ARGV, "--spec", *spec]) == 2
    error = capsys.readouterr().err.splitlines()
    assert len(error) == 1 and error[0].startswith(f"{entry.PROG}: error: --spec {' '.join(spec)}: ")
    assert "drop --spec" in error[0]


@pytest.mark.parametrize("extra", [[], ["--attention-backend", "local", "--spec", "local"]])
def test_no_spec_and_spec_local_still_train(monkeypatch, extra):
    """Without ``--spec``, and with the ``--spec local`` megatron-core asks for beside ``--attention-backend local``,
    the entry goes on to the steps after its checks."""
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(_Reached):
        entry.main([*ARGV, *extra])

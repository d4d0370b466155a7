"""``--spec`` is refused by the training entry before Megatron initialises wherever the model provider would drop it:
the provider builds the card family's layers and reads no ``--spec``, so a layer spec ``--spec MODULE FUNCTION`` was
dropped without a word, and so was ``--spec local`` (megatron's switch to its own non-TE layer spec) beside any
attention backend but ``local`` (where megatron-core asks for it): with ``--oellm-backend te`` the layers were
Transformer Engine's all the same."""

import random

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.model_provider import check_layer_spec
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain

ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "64"]

SPECS = [
    ["megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_local_spec"],
    ["megatron.core.models.gpt.gpt_layer_specs", "get_gpt_layer_with_transformer_engine_spec"],
    ["megatron.core.models.hybrid.hybrid_layer_specs", "hybrid_stack_spec"],
]
BACKENDS = ["auto", "flash", "fused", "unfused"]
"""The attention backends other than ``local``: megatron-core needs no ``--spec local`` beside them."""


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
    with pytest.raises(Reached):
        entry.main([*ARGV, *extra])


def test_spec_local_without_local_attention_is_refused_by_the_entry(monkeypatch, capsys):
    attention = random.choice(BACKENDS)
    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "64",
            "--attention-backend", attention, "--spec", "local"]
    assert entry.main(argv) == 2
    error = capsys.readouterr().err.splitlines()
    assert len(error) == 1 and error[0].startswith(f"{entry.PROG}: error: --spec local: "), error
    assert "--attention-backend local" in error[0] and "drop --spec" in error[0]


@pytest.mark.parametrize("oellm_backend", ["te", "torch"])
def test_spec_local_without_local_attention_is_refused_for_either_backend(oellm_backend):
    """The check the entry and ``oellm recipe --dry-run`` make (the te backend needs Transformer Engine to reach it
    through the entry)."""
    args = parse_oellm_argv(["--oellm-backend", oellm_backend, "--attention-backend", random.choice(BACKENDS),
                             "--spec", "local"])
    with pytest.raises(ValueError, match=r"^--spec local: .*--attention-backend local"):
        check_layer_spec(args)


def test_spec_local_beside_local_attention_still_trains(monkeypatch):
    """megatron-core's ``validate_args`` asks for ``--spec local`` beside ``--attention-backend local``."""
    check_layer_spec(parse_oellm_argv(["--attention-backend", "local", "--spec", "local"]))
    entry = entry_up_to_pretrain(monkeypatch)
    with pytest.raises(Reached):
        entry.main(["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data",
                    "--seq-length", "64",
                    "--attention-backend", "local", "--spec", "local"])

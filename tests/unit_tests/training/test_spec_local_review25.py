"""Review 25 (second look) of the ``--spec`` refusal: ``--spec local`` is megatron's switch to its own non-TE layer spec.
The model provider reads no ``--spec``, so beside any attention backend but ``local`` (where megatron-core asks for
it) the flag was dropped without a word: with ``--oellm-backend te`` the layers were Transformer Engine's all the
same."""

import random

import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.model_provider import check_layer_spec
from tests.unit_tests.training.test_data import _Reached, entry_up_to_pretrain

BACKENDS = ["auto", "flash", "fused", "unfused"]
"""The attention backends other than ``local``: megatron-core needs no ``--spec local`` beside them."""


def test_spec_local_without_local_attention_is_refused_by_the_entry(monkeypatch, capsys):
    attention = random.choice(BACKENDS)
    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--mock-data",
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
    with pytest.raises(_Reached):
        entry.main(["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--mock-data",
                    "--attention-backend", "local", "--spec", "local"])

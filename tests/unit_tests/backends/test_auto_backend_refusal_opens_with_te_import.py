"""``--oellm-backend auto`` that fell back to the torch-native backend because Transformer Engine does not import:
its refusal opens with that import error and the TE fix, then the torch-native alternative.

A row's ``--attention-backend flash`` (every MN5 row has it) was blamed on the flag first, as if the user had chosen
the torch-native backend, while the cause was a Transformer Engine that does not import on the node.
"""

from __future__ import annotations

import random
import string

import pytest

from megatron.oellm.backends import selection
from tests.unit_tests.training.entry_helpers import entry_up_to_pretrain, one_error_line, tiny_moe_run


def _te_does_not_import(monkeypatch: pytest.MonkeyPatch) -> str:
    """Transformer Engine seen as not importing here, with a fresh error; returns the error as the message words it."""
    error = f"ImportError: libtransformer_engine.so: {''.join(random.choices(string.ascii_lowercase, k=10))}"
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: error)
    return error


def test_auto_opens_with_the_te_import_error_and_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    error = _te_does_not_import(monkeypatch)
    attention = random.choice(["flash", "fused", "unfused"])
    with pytest.raises(ValueError) as refused:
        selection.check_backend_support("auto", attention_backend=attention)
    message = str(refused.value)
    assert message.startswith("--oellm-backend auto chose the torch-native backend because Transformer Engine does "
                              f"not import here ({error})")
    assert message.index(selection.TE_INSTALL_HINT) < message.index(f"--attention-backend {attention}")
    assert "use --attention-backend auto" in message


def test_the_torch_backend_chosen_keeps_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    error = _te_does_not_import(monkeypatch)
    with pytest.raises(ValueError) as refused:
        selection.check_backend_support("torch", attention_backend="flash")
    message = str(refused.value)
    assert message.startswith("the torch-native backend cannot run: --attention-backend flash") and error not in message


def test_the_entry_says_why_auto_chose_torch(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    check_args_support = selection.check_args_support
    main = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(selection, "check_args_support", check_args_support)  # the helper answers it
    error = _te_does_not_import(monkeypatch)
    assert main.main([*tiny_moe_run(), "--oellm-backend", "auto", "--attention-backend", "flash"]) == 2
    line = one_error_line(capsys)
    assert f"--oellm-backend auto chose the torch-native backend because Transformer Engine does not import here " \
           f"({error})" in line
    assert line.index(selection.TE_INSTALL_HINT) < line.index("--attention-backend flash")

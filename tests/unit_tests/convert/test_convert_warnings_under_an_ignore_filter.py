"""``oellm convert``'s own warnings (a lossy norm shift, NaN or infinite weights, ...) reach the user as their
``warning:`` lines also where a job script ignores warnings to quiet the libraries (``PYTHONWARNINGS=ignore``,
``-W ignore::UserWarning``): such a filter used to drop them before their line was printed, so a lossy or damaged
conversion passed without a word. Warnings of other origins still follow the user's filter."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.commands import convert as convert_command
from megatron.oellm.convert.errors import ConversionWarning
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

QWEN35 = "qwen3.5-35b-a3b-tiny"
IGNORING_FILTERS = ["ignore", "ignore::UserWarning", "ignore::Warning"]


def _hf_with(tmp_path: Path) -> str:
    """A tiny Qwen3.5 HF checkpoint with one GDN norm gain the zero-centring rounds and one weight holding a NaN;
    returns the gain's name."""
    card = get_card(QWEN35)
    hf = random_hf_tensors(card, seed=random.randrange(10**6))
    gain_name = next(key for key in hf if key.endswith("linear_attn.norm.weight"))
    hf[gain_name] = hf[gain_name].clone()
    hf[gain_name][random.randrange(hf[gain_name].numel())] = torch.tensor(0.25 + 2**-9, dtype=torch.bfloat16)
    nan_name = random.choice([key for key in hf if key.endswith("q_proj.weight") or key.endswith("up_proj.weight")])
    hf[nan_name] = hf[nan_name].clone()
    hf[nan_name].view(-1)[random.randrange(hf[nan_name].numel())] = float("nan")
    write_hf(card, hf, tmp_path / "hf")
    return gain_name


@pytest.mark.parametrize("action", IGNORING_FILTERS)
def test_the_conversions_warnings_pass_a_filter_that_ignores_warnings(action: str, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    gain_name = _hf_with(tmp_path)
    with warnings.catch_warnings():
        warnings.filterwarnings(*action.split("::")[:1], category=_category(action))
        assert main(["convert", "hf-to-mcore", "--model", QWEN35, "--hf", str(tmp_path / "hf"), "--out",
                     str(tmp_path / "mcore")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert len(lines) == 2, lines
    assert any(line.startswith(f"oellm convert hf-to-mcore: warning: {gain_name}: adding -1 is not exactly invertible")
               for line in lines)
    assert any(line.startswith("oellm convert hf-to-mcore: warning: decoder.layers.") and ": 1 of " in line
               and "NaN or infinite" in line for line in lines)  # named by its megatron tensor, which holds it


def _category(action: str) -> type[Warning]:
    """The category a ``-W``-style ``action`` names (``Warning``: all of them)."""
    return {"UserWarning": UserWarning}.get(action.partition("::")[2], Warning)


def test_other_warnings_keep_the_users_filter(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only :class:`ConversionWarning` is let through: a library's UserWarning during the conversion stays ignored."""
    def convert(_args: object) -> int:
        warnings.warn("a library's noise", UserWarning, stacklevel=1)
        warnings.warn("the conversion's own", ConversionWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(convert_command, "_convert", convert)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert convert_command.run(type("Args", (), {"direction": random.choice(["hf-to-mcore", "mcore-to-hf"])})) == 0
    err = capsys.readouterr().err
    assert "the conversion's own" in err and "a library's noise" not in err

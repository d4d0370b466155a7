"""``oellm recipe --local`` on a machine without a GPU prints what it would run, then the dry run with the recipe's
header once (audit 11): the plain dry run's header moved after the rows resolve, and ``--local`` prints its own
after the explanation, so it must not be printed a second time."""

from __future__ import annotations

import random

from recipe_helpers import EXAMPLES, fake_local_launch

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command


def test_local_without_a_gpu_prints_the_recipe_header_once_after_the_explanation(monkeypatch, capsys):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 0)
    fake_local_launch(monkeypatch, lambda *a, **k: (_ for _ in ()).throw(AssertionError("torchrun ran")))
    row = random.choice([1, 2])
    config = EXAMPLES / "qwen3_5_35b_a3b_mn5_attention.toml"
    assert main(["recipe", str(config), "--local", "--row", str(row)]) == 2
    out = capsys.readouterr().out
    assert f"-- row {row}: layout ok" in out
    headers = [number for number, line in enumerate(out.splitlines()) if line.startswith("== ")]
    assert len(headers) == 1 and out.count("recipe qwen3_5_35b_a3b_mn5_attention: model") == 1, out
    assert out.index("--local needs a CUDA GPU") < out.index("== ") < out.index(f"-- row {row}: layout ok")
    # the plain dry run of the same row does print that header, first
    assert main(["recipe", str(config), "--row", str(row)]) == 0
    assert capsys.readouterr().out.startswith("== ")

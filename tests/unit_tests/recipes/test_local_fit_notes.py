"""``--local``'s notes: every flag the fit changes from the row on this machine is named by a ``note:`` line (the
all-to-all fallback with the flex flags it drops, a row's own ``--split`` on a local corpus), and a ``--data-path``
that does not exist is refused before torchrun starts."""

from __future__ import annotations

import dataclasses
import random

from recipe_helpers import EXAMPLES, fake_local_launch

from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.local import fit_local
from megatron.oellm.recipes.resolve import RunInputs


def _noted(notes: tuple[str, ...], flag: str) -> list[str]:
    """The notes about ``--flag``."""
    return [note for note in notes if note.startswith(f"--local runs with --{flag} ") or f"(the row: --{flag} " in note]


def test_the_all_to_all_fallback_on_one_gpu_is_noted_with_the_dropped_flex_flags():
    """One GPU turned the row's flex dispatcher into all-to-all and dropped its HybridEP flags without a note."""
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    row = random.choice(recipe.rows)
    sms = random.randint(1, 64)
    row = dataclasses.replace(row, flags={**row.flags, "moe-hybridep-num-sms": sms})
    resolved = fit_local(recipe, row, gpus=1)
    assert resolved.flags["moe-token-dispatcher-type"] == "alltoall"
    assert _noted(resolved.notes, "moe-token-dispatcher-type") == [
        "--local runs with --moe-token-dispatcher-type alltoall here (the row: --moe-token-dispatcher-type flex): "
        "megatron-core's flex dispatcher needs TP x EP > 1, and 1 GPU(s) give TP 1, EP 1 here"]
    assert _noted(resolved.notes, "moe-hybridep-num-sms") == [
        f"--local runs without --moe-hybridep-num-sms here (the row: --moe-hybridep-num-sms {sms}): only the flex dispatcher reads it"]
    assert len(_noted(resolved.notes, "moe-flex-dispatcher-backend")) == 1


def test_four_gpus_keep_the_flex_dispatcher_without_a_note():
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    resolved = fit_local(recipe, recipe.rows[0], gpus=4)
    assert resolved.flags["moe-token-dispatcher-type"] == "flex" and not _noted(resolved.notes,
                                                                                "moe-token-dispatcher-type")


def test_a_rows_own_split_replaced_on_a_local_corpus_is_noted():
    """A row's --split was replaced by 100,0,0 on a --data-path run without a note."""
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    train = random.randint(50, 98)
    split = f"{train},{100 - train},0"
    row = dataclasses.replace(recipe.rows[0], flags={**recipe.rows[0].flags, "split": split})
    resolved = fit_local(recipe, row, gpus=4, inputs=RunInputs(("/data/text",), "byte"))
    assert resolved.flags["split"] == "100,0,0"
    assert _noted(resolved.notes, "split") == [
        f"--local runs with --split 100,0,0 here (the row: --split {split}): every document of a local corpus "
        "trains (a small corpus can leave a split without a document)"]


def test_the_default_split_is_replaced_without_a_note():
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    resolved = fit_local(recipe, recipe.rows[0], gpus=4, inputs=RunInputs(("/data/text",), "byte"))
    assert resolved.flags["split"] == "100,0,0" and not _noted(resolved.notes, "split")


def test_a_missing_local_data_path_is_refused_before_torchrun(monkeypatch, tmp_path, capsys):
    """A mistyped --data-path started torchrun, and every rank then stopped with the same error."""

    from megatron.oellm.cli import main
    from megatron.oellm.commands import recipe as recipe_command

    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: random.choice([1, 2, 4, 8]))
    calls = []
    fake_local_launch(monkeypatch, lambda *a, **k: calls.append(a))
    prefix = tmp_path / f"corpus-{random.randint(0, 10**6)}"
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1",
                 "--output-dir", str(tmp_path), "--data-path", str(prefix), "--tokenizer-model", "byte"]) == 2
    err = capsys.readouterr().err
    assert str(prefix) in err and ".bin" in err and "Traceback" not in err and not calls

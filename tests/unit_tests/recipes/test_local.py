"""``--local``: the fitted-down run (proxy card, one node, same flags) and its refusal where it cannot run."""

from __future__ import annotations

import dataclasses
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES, fake_local_launch

from megatron.oellm.cli import main
from megatron.oellm.commands import recipe as recipe_command
from megatron.oellm.recipes import load_recipe
from megatron.oellm.recipes.local import fit_local, local_blocker, torchrun_command
from megatron.oellm.training.corpus import build_corpus


def test_one_gpu_fit_uses_the_proxy_and_all_to_all(parse_megatron):
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    resolved = fit_local(recipe, recipe.rows[1], gpus=1)
    args = parse_megatron(resolved.argv)
    assert resolved.card.num_layers == 4 and resolved.card.num_experts == 32 and resolved.world_size == 1
    assert args.num_experts == 32 and args.hybrid_layer_pattern == "GEGEGE*E"
    assert (args.pipeline_model_parallel_size, args.expert_model_parallel_size) == (1, 1)
    assert args.moe_token_dispatcher_type == "alltoall" and args.moe_hybridep_num_sms is None
    assert args.recompute_granularity == "full" and args.manual_gc and args.mock_data
    assert (args.micro_batch_size, args.global_batch_size) == (1, 4)
    command = torchrun_command(resolved)
    assert command[:7] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m",
                           "megatron.oellm.training.entry"]


def test_four_gpu_fit_keeps_the_flex_dispatcher(parse_megatron):
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    args = parse_megatron(fit_local(recipe, recipe.rows[0], gpus=4).argv)
    assert args.expert_model_parallel_size == 4 and args.num_experts == 16 and args.num_layers == 2
    assert (args.moe_token_dispatcher_type, args.moe_flex_dispatcher_backend) == ("flex", "hybridep")
    assert args.fp8_recipe == "blockwise" and args.tensor_model_parallel_size == 1
    assert args.pipeline_model_parallel_layout is None and args.global_batch_size == 16 and not args.sequence_parallel


def test_the_local_sequence_length_is_the_local_tables_else_the_rows(parse_megatron):
    """``[local] seq_length`` fits a long-sequence row onto a smaller GPU; 0 (the default) keeps the row's own."""
    recipe = load_recipe(EXAMPLES / "qwen3_30b_a3b_mn5.toml")
    row = recipe.rows[6]  # the report's 24k row: seq_length = 24576 in the config
    assert parse_megatron(fit_local(recipe, row, gpus=1).argv).seq_length == 24576
    local_seq = random.randrange(1, 16) * 256
    fitted = dataclasses.replace(recipe, local=dataclasses.replace(recipe.local, seq_length=local_seq))
    resolved = fit_local(fitted, row, gpus=1)
    assert parse_megatron(resolved.argv).seq_length == local_seq and resolved.card.seq_length == local_seq


def test_without_gpu_local_explains_prints_the_dry_run_and_fails(monkeypatch, capsys):
    """Without a GPU, ``--local`` shows what it would run and the dry run, but exits 2 with one error line: a batch
    script that asked for training must not take the printout for a finished run."""
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 0)
    called = []
    fake_local_launch(monkeypatch, lambda *a, **k: called.append(a))
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_attention.toml"), "--local", "--row", "2"]) == 2
    out, err = capsys.readouterr()
    assert "--local needs a CUDA GPU" in out and "printing the dry run instead" in out
    assert "On one GPU, --local would run row 2 as:\n" in out and "--standalone --nproc-per-node=1 -m megatron" in out
    assert "-- row 2: layout ok" in out and "#SBATCH --nodes=4" in out and not called
    assert err == "oellm recipe: error: --local needs a CUDA GPU and torch sees none on this machine, so it ran " \
                  "nothing (the dry run above shows the rows)\n"


def test_without_gpu_local_of_a_model_without_layers_names_the_missing_layer(monkeypatch, capsys):
    """The CKDA hybrid has no spec builder yet: on a machine without a GPU, ``--local`` names that (a GPU would not
    help) and offers no one-GPU command that could not run either."""
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 0)
    assert main(["recipe", str(EXAMPLES / "oellm_ckda_hybrid_mn5.toml"), "--local", "--row", "3"]) == 2
    out, err = capsys.readouterr()
    assert "--local cannot build the model" in out and "ckda_hybrid" in out and "CUDA GPU" not in out
    assert "would run row" not in out
    assert err.startswith("oellm recipe: error: --local cannot build the model") and "ckda_hybrid" in err
    assert err.endswith(", so it ran nothing (the dry run above shows the rows)\n")


def test_with_gpus_local_runs_torchrun_with_the_recipe_environment(monkeypatch, capsys):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 2)
    calls = []

    class Done:
        returncode = 0

    fake_local_launch(monkeypatch, lambda command, env, check: calls.append((command, env)) or Done())
    assert main(["recipe", str(EXAMPLES / "qwen3_30b_a3b_mn5.toml"), "--local", "--nodes", "8"]) == 0
    (command, env), = calls
    assert command[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert "--expert-model-parallel-size" in command and command[command.index("--expert-model-parallel-size") + 1] == "2"
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "8" and env["NCCL_NCHANNELS_PER_PEER"] == "4"
    assert "running row 1 fitted down on 2 GPU(s)" in capsys.readouterr().out


def test_a_finished_local_run_prints_no_job_scripts_after_it(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    """``oellm recipe --local`` that ran torchrun to the end (status 0) stops there: what it printed last is the
    command it ran, not the rows' plans and sbatch scripts of a ``--dry-run`` (which would read as if nothing ran)."""
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []

    class Done:
        returncode = 0

    fake_local_launch(monkeypatch, lambda command, env, check: calls.append(command) or Done())
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1"]) == 0
    out = capsys.readouterr().out
    [command] = calls
    assert out.rstrip("\n").endswith(f"\n{shlex.join(command)}"), out
    assert "#!/bin/bash" not in out and "layout ok" not in out, out


def test_ckda_local_waits_for_its_layer():
    recipe = load_recipe(EXAMPLES / "oellm_ckda_hybrid_mn5.toml")
    assert "ckda_hybrid" in local_blocker(recipe, gpus=4) and "ckda_hybrid" in local_blocker(recipe, gpus=0)
    assert local_blocker(load_recipe(EXAMPLES / "qwen3_30b_a3b_mn5.toml"), gpus=4) == ""


def test_local_on_a_byte_corpus_saves_and_resumes_under_the_run_directory(monkeypatch, tmp_path, parse_megatron):
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []

    class Done:
        returncode = 0

    fake_local_launch(monkeypatch, lambda command, env, check: calls.append(command) or Done())
    (tmp_path / "data").mkdir()  # the data, its index included, is checked before torchrun starts
    document = tmp_path / "data" / "doc.txt"
    document.write_text(f"one document {random.random()}")
    corpus = Path(build_corpus([document], tmp_path / "data" / "stdlib").prefix)
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1",
                 "--output-dir", str(tmp_path), "--data-path", str(corpus), "--tokenizer-model", "byte",
                 "--save-interval", "30", "--train-iters", "35"]) == 0
    (command,) = calls
    args = parse_megatron(command[7:])
    assert (args.tokenizer_type, args.vocab_size, args.data_path) == ("NullTokenizer", 257, [str(corpus)])
    assert args.train_iters == 35 and args.save_interval == 30 and not args.mock_data and args.split == "100,0,0"
    assert args.override_opt_param_scheduler
    assert args.save == args.load and args.save.startswith(str(tmp_path)) and args.save.endswith("local-checkpoints")


def test_train_iters_outside_local_is_refused(capsys):
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--train-iters", "5"]) == 2
    assert "--train-iters applies to --local runs only" in capsys.readouterr().err


def test_local_fp8_row_without_transformer_engine_is_refused_before_torchrun(monkeypatch, capsys):
    from megatron.oellm.backends.selection import transformer_engine_import_error

    if transformer_engine_import_error() is None:
        pytest.skip("Transformer Engine imports here: the FP8 row can run")
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []
    fake_local_launch(monkeypatch, lambda *a, **k: calls.append(a))
    assert main(["recipe", str(EXAMPLES / "qwen3_235b_a22b_jupiter.toml"), "--local", "--row", "1"]) == 2
    assert "fp8 training (needs Transformer Engine)" in capsys.readouterr().err and not calls


@pytest.mark.parametrize("options", [["--account", "ehpc533"], ["--time", "02:00:00", "--image", "other.sif"]])
def test_slurm_only_options_beside_local_are_refused_not_ignored(monkeypatch, capsys, options):
    """--local runs torchrun on this machine: an --account, --time or --image given with it went unused, silently."""
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []
    fake_local_launch(monkeypatch, lambda *a, **k: calls.append(a))
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1",
                 *options]) == 2
    given = ", ".join(option for option in options if option.startswith("--"))
    assert f"oellm recipe: error: {given} appl" in capsys.readouterr().err and not calls


def test_a_local_run_killed_by_a_signal_exits_as_the_shell_reports_it(monkeypatch):
    """torchrun killed by signal N returned -N, which ``sys.exit`` turned into 256 - N (247 for the OOM killer's
    SIGKILL) instead of the shell's 128 + N."""
    import random

    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    signal = random.randint(1, 31)
    status = random.randint(1, 127)
    for returncode, expected in ((-signal, 128 + signal), (status, status), (0, 0)):
        class Done:
            pass

        Done.returncode = returncode
        fake_local_launch(monkeypatch, lambda *a, done=Done, **k: done())
        assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1"]) == expected


@pytest.mark.parametrize(("backend", "apex", "flash_attn"),
                         [("te", False, False), ("te", True, True), ("te", True, False), ("torch", False, False)])
def test_a_te_fit_turns_off_what_this_machine_lacks_and_says_so(monkeypatch, capsys, parse_megatron, backend, apex,
                                                                  flash_attn):
    """On the te backend the entry refuses Megatron's default gradient-accumulation fusion without apex's extension
    and the MN5 rows' --attention-backend flash without a flash-attn TE supports (TE would stop at the first forward
    with no attention backend left); the fitted row runs without them on such a machine, and the run's log says so.
    The torch backend needs no fusion (the entry turns it off itself) and runs the row's flash with auto (its
    attention is SDPA / varlen, and the entry refuses any other --attention-backend there)."""
    from megatron.oellm.backends import selection
    from megatron.oellm.backends import te_flash_attention as te_flash

    monkeypatch.setattr(selection, "resolve_backend", lambda name: backend)
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: apex)
    monkeypatch.setattr(te_flash, "te_flash_attention_found",
                        lambda: te_flash.FlashAttentionFound({2: "2.7.4"} if flash_attn else {}))
    monkeypatch.setattr(te_flash, "cuda_capability", lambda: None)
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    assert recipe.rows[0].flags.get("attention-backend", "flash") == "flash"
    resolved = fit_local(recipe, recipe.rows[0], gpus=1)
    args = parse_megatron(resolved.argv)
    assert args.gradient_accumulation_fusion is (backend == "torch" or apex)
    assert args.attention_backend.name == ("flash" if backend == "te" and flash_attn else "auto")
    expected = []
    if backend == "te" and not apex:
        expected.append("--local runs with --no-gradient-accumulation-fusion here (the row: unset): apex's "
                        "fused_weight_gradient_mlp_cuda is missing")
    if backend == "te" and not flash_attn:
        expected.append("--local runs with --attention-backend auto here (the row: --attention-backend flash): "
                        "Transformer Engine finds no flash-attn it supports")
    if backend == "torch":
        expected.append("--local runs with --attention-backend auto here (the row: --attention-backend flash): "
                        "the torch-native backend runs SDPA / varlen attention and reads no --attention-backend")
    assert [note for note in resolved.notes if "dispatcher" not in note] == expected  # one GPU: all-to-all, noted too
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    monkeypatch.setattr(recipe_command, "local_backend_problem", lambda resolved: "")
    fake_local_launch(monkeypatch, lambda *a, **k: type("Done", (), {"returncode": 0})())
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in printed if line.startswith("note: ") and "dispatcher" not in line] == [
        f"note: {note}" for note in expected]



@pytest.mark.parametrize(("env", "version", "adjusted"), [({}, None, False), ({"NVTE_FLASH_ATTN_V2": "0"}, None, True),
                                                          ({}, "3", True), ({}, "x", False)])
def test_the_flash_adjustment_judges_the_runs_environment_and_the_rows_flags(monkeypatch, env, version, adjusted):
    """The fitted run gets the recipe's cluster exports (``local_environment``), so a pin there drops flash-attn 2
    for it as for the entry; the row's --flash-attention-version likewise. A value that is not an integer is left to
    Megatron's parser (it names the value) instead of a traceback here."""
    from megatron.oellm.backends import selection
    from megatron.oellm.backends import te_flash_attention as te_flash

    monkeypatch.setattr(selection, "resolve_backend", lambda name: "te")
    monkeypatch.setattr(selection, "gradient_accumulation_fusion_available", lambda: True)
    monkeypatch.setattr(te_flash, "te_flash_attention_found", lambda: te_flash.FlashAttentionFound({2: "2.7.4"}))
    monkeypatch.setattr(te_flash, "cuda_capability", lambda: (9, 0))
    monkeypatch.delenv("NVTE_FLASH_ATTN_V2", raising=False)
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    recipe = dataclasses.replace(recipe, cluster=dataclasses.replace(recipe.cluster, env={**recipe.cluster.env, **env}))
    row = recipe.rows[0]
    if version is not None:
        row = dataclasses.replace(row, flags={**row.flags, "flash-attention-version": version})
    resolved = fit_local(recipe, row, gpus=1)
    assert resolved.flags["attention-backend"] == ("auto" if adjusted else "flash")
    assert any("--attention-backend" in note for note in resolved.notes) is adjusted


def test_a_fitted_run_megatron_would_refuse_is_refused_once_before_torchrun(monkeypatch, capsys, tmp_path):
    """``--train-iters`` shortens the local run below the row's warm-up: megatron-core refuses that schedule on every
    rank after torchrun started them all; ``--local`` refuses it first, once, naming both lengths."""
    import random

    warmup = random.randint(4, 9)
    path = tmp_path / "warmup.toml"
    path.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "warm-up"\n\n[[rows]]\n'
                    f'nodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n'
                    f'flags = {{ lr-warmup-iters = {warmup} }}\n')
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []
    fake_local_launch(monkeypatch,
                      lambda command, **k: calls.append(command) or subprocess.CompletedProcess(command, 0))
    assert main(["recipe", str(path), "--local", "--train-iters", str(warmup)]) == 2
    err = capsys.readouterr().err
    assert "would stop every rank at start" in err and not calls
    assert f"--lr-warmup-iters {warmup}" in err and f"--train-iters {warmup}" in err
    assert main(["recipe", str(path), "--local", "--train-iters", str(warmup + 1)]) == 0 and len(calls) == 1


def test_local_refuses_a_read_only_corpus_without_an_index_cache_before_torchrun(monkeypatch, tmp_path, capsys):
    """``--local`` runs the training entry's check of the data itself before torchrun starts (as ``--submit`` does):
    a corpus in a folder this process cannot write, with no index cache there to reuse, would stop rank 0 only after
    the model and optimizer are built; a writable folder runs."""
    from megatron.oellm.training import index_cache

    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    calls = []

    class Done:
        returncode = 0

    fake_local_launch(monkeypatch, lambda command, env, check: calls.append(command) or Done())
    (tmp_path / "data").mkdir()
    document = tmp_path / "data" / "doc.txt"
    document.write_text(f"one document {random.random()}")
    corpus = Path(build_corpus([document], tmp_path / "data" / "shared").prefix)
    local = ["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--local", "--row", "1", "--output-dir",
             str(tmp_path), "--data-path", str(corpus), "--tokenizer-model", "byte"]
    monkeypatch.setattr(index_cache, "can_write_into", lambda folder, mounts: False)
    assert main(local) == 2
    err = capsys.readouterr().err
    assert "--local row 1: the training entry would stop every rank at start: ValueError: dataset " \
           f"{str(corpus)!r}: without --data-cache-path megatron-core writes its index cache" in err, err
    assert not calls
    monkeypatch.undo()
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 1)
    fake_local_launch(monkeypatch, lambda command, env, check: calls.append(command) or Done())
    assert main(local) == 0 and len(calls) == 1


def test_without_gpu_local_prints_the_table_command_of_its_row_only(monkeypatch, capsys):
    """The dry run ``--local`` prints without a GPU is of its ``--row`` alone: its header's ``oellm table`` command
    read every row's logs (one pattern for all), the README's command of the selected row."""
    monkeypatch.setattr(recipe_command, "visible_gpus", lambda: 0)
    config = EXAMPLES / "qwen3_235b_a22b_jupiter_sweep.toml"
    recipe = load_recipe(config)
    number = random.randint(1, len(recipe.rows))
    assert main(["recipe", str(config), "--local", "--row", str(number)]) == 2
    out = capsys.readouterr().out
    assert recipe_command.table_command(recipe, [number]) in out
    assert f"row{number:02d}-*/slurm-*.out" in out and "/row*/slurm-*.out" not in out

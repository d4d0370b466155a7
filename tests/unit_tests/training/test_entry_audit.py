"""The training entry's checks on cases the other entry tests leave out (found by a mutation audit of
:mod:`megatron.oellm.training.entry`): the FLOP count and GPU peak of the throughput line, the load strictness of a
checkpoint that is not megatron-core's distributed format, ``--use-checkpoint-args`` with a hybrid pattern, two
checkpoints, or no ``--oellm-model``, and the checks :func:`~megatron.oellm.training.entry.main` runs."""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import pytest
import torch

from megatron.oellm.cards import get_card
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from megatron.oellm.megatron_args import flags_to_argv, model_flags
from megatron.oellm.training import entry, load_checks
from megatron.oellm.training.args import merge_card_flags, parse_oellm_argv
from megatron.oellm.training.stored_checkpoint import read_loaded_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, one_error_line

CARD = "qwen3-30b-a3b-tiny"
OTHER = "qwen3-30b-a3b"
"""A card of another shape (only the stored arguments of its checkpoints are read)."""
HYBRID = "qwen3.5-35b-a3b-tiny"


def _card_args(card: str, *flags: str) -> argparse.Namespace:
    """A run's arguments as the entry parses them before megatron reads a checkpoint."""
    return parse_oellm_argv(merge_card_flags(["--oellm-model", card, *flags]).argv)


def _torch_checkpoint(target: Path, stored: argparse.Namespace) -> Path:
    """A ``--ckpt-format torch`` checkpoint directory as megatron-core 0.19.2 saves it (one
    ``mp_rank_00/model_optim_rng.pt`` holding the run arguments ``stored`` and a weight, and the tracker file)."""
    iteration = random.randrange(1, 10_000)
    directory = target / f"iter_{iteration:07d}" / "mp_rank_00"
    directory.mkdir(parents=True)
    torch.save({"args": stored, "iteration": iteration, "checkpoint_version": 3.0,
                "model": {"embedding.word_embeddings.weight": torch.randn(random.randrange(2, 9), 4)}},
               directory / "model_optim_rng.pt")
    (target / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return target


def test_the_throughput_line_uses_the_gpus_dense_bf16_peak_and_the_runs_padded_vocabulary(monkeypatch):
    """MFU is judged against the GPU's dense BF16 peak also for an FP8 run (as the reports and ``oellm table``), unless
    ``--oellm-peak-tflops`` names another; the FLOPs per token are the card's at the run's sequence length with the
    vocabulary Megatron padded (the embedding's real size)."""
    from megatron.oellm.flops import training_flops_per_token

    seq_length = random.choice([64, 128, 256, 512])
    args = _card_args(CARD, "--seq-length", str(seq_length), "--fp8-format", "hybrid")
    args.padded_vocab_size = get_card(CARD).vocab_size + random.randrange(64, 4096)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_args: "NVIDIA H100 80GB HBM3")
    flops, peak = entry.flops_and_peak(args)
    assert peak == 989.0  # H100 SXM dense BF16 (FP8: 1979)
    card = get_card(CARD).with_vocab(args.padded_vocab_size)
    assert flops == training_flops_per_token(card, seq_length, padded_vocab=args.padded_vocab_size).total
    assert flops != training_flops_per_token(get_card(CARD), seq_length).total
    args.oellm_peak_tflops = random.uniform(100, 2000)
    assert entry.flops_and_peak(args)[1] == args.oellm_peak_tflops


def test_a_returning_strictness_is_left_to_megatron_for_a_torch_format_checkpoint(tmp_path):
    """``--dist-ckpt-strictness`` is read by megatron-core's distributed-checkpoint loader only: a ``--ckpt-format
    torch`` checkpoint loads under any value, so the entry does not refuse ``return_*`` for it."""
    saved = _torch_checkpoint(tmp_path / "saved", _card_args(CARD))
    for strictness in load_checks.RETURNING_STRICTNESS:
        run = _card_args(CARD, "--load", str(saved), "--ckpt-format", "torch", "--dist-ckpt-strictness", strictness)
        loaded = read_loaded_checkpoint(run)
        assert loaded is not None and loaded.ckpt_format == "torch"
        load_checks.check_load_strictness(run, loaded)


def test_a_checkpoint_with_another_hybrid_layer_pattern_is_refused(tmp_path):
    """A Qwen3.5 checkpoint whose stored pattern mixes the same number of layers in another order (attention where
    the card has Gated DeltaNet) is another model: ``--use-checkpoint-args`` would take its pattern over the card's,
    so the entry refuses, naming the pattern with both values."""
    pattern = get_card(HYBRID).hybrid_layer_pattern
    mixers = list(pattern[0::2])
    gdn, attention = random.choice([i for i, m in enumerate(mixers) if m == "G"]), mixers.index("*")
    mixers[gdn], mixers[attention] = mixers[attention], mixers[gdn]
    stored = _card_args(HYBRID)
    stored.hybrid_layer_pattern = "".join(m + e for m, e in zip(mixers, pattern[1::2], strict=True))
    saved = _torch_checkpoint(tmp_path / "saved", stored)
    run = _card_args(HYBRID, "--load", str(saved), "--ckpt-format", "torch", "--use-checkpoint-args")
    with pytest.raises(ValueError, match=re.escape(f"(hybrid_layer_pattern: checkpoint "
                                                   f"'{stored.hybrid_layer_pattern}', card '{pattern}')")):
        load_checks.check_checkpoint_architecture(run, read_loaded_checkpoint(run))


def test_the_load_checkpoint_is_checked_after_a_matching_pretrained_one(tmp_path):
    """megatron reads the arguments of both ``--pretrained-checkpoint`` and ``--load`` under ``--use-checkpoint-args``;
    a pretrained checkpoint of the card's own shape does not let a ``--load`` of another card's through."""
    pretrained = _torch_checkpoint(tmp_path / "pretrained", _card_args(CARD))
    load = _torch_checkpoint(tmp_path / "load", _card_args(OTHER))
    run = _card_args(CARD, "--pretrained-checkpoint", str(pretrained), "--load", str(load), "--ckpt-format", "torch",
                     "--use-checkpoint-args")
    with pytest.raises(ValueError, match=rf"from --load {load} .*num_experts: checkpoint "
                                         rf"{get_card(OTHER).num_experts}, card {get_card(CARD).num_experts}"):
        load_checks.check_checkpoint_architecture(run, read_loaded_checkpoint(run))
    own = _card_args(CARD, "--pretrained-checkpoint", str(pretrained), "--load", str(pretrained), "--ckpt-format",
                     "torch", "--use-checkpoint-args")
    load_checks.check_checkpoint_architecture(own, read_loaded_checkpoint(own))


def test_a_run_without_a_card_name_takes_the_checkpoints_architecture(tmp_path):
    """Without ``--oellm-model`` the model is built from Megatron's flags after megatron took them from the checkpoint,
    so arguments and model agree whatever the command line said: the entry leaves that run to megatron."""
    saved = _torch_checkpoint(tmp_path / "saved", _card_args(OTHER))
    run = parse_oellm_argv([*flags_to_argv(model_flags(get_card(CARD))), "--load", str(saved), "--ckpt-format",
                            "torch", "--use-checkpoint-args"])
    assert run.oellm_model is None and run.num_experts != get_card(OTHER).num_experts
    load_checks.check_checkpoint_architecture(run, read_loaded_checkpoint(run))


def test_the_entry_refuses_a_flex_dispatcher_whose_library_is_missing(monkeypatch, capsys):
    """``--moe-token-dispatcher-type flex`` with DeepEP not installed fails in megatron-core once the model is on the
    GPU; the entry refuses it first, in one ``error:`` line naming the backend and the library."""
    import importlib.util

    from megatron.oellm.training import dispatcher

    main = entry_up_to_pretrain(monkeypatch)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(dispatcher.importlib.util, "find_spec",
                        lambda name, *rest: None if name == "deep_ep" else find_spec(name, *rest))
    backend = random.choice(["deepep", "hybridep"])
    assert main.main(["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data",
                      "--seq-length", "64", "--expert-model-parallel-size",
                      "2", "--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", backend]) == 2
    assert f"{backend} needs DeepEP" in one_error_line(capsys)


def test_the_entry_refuses_megatrons_uneven_split_flags_naming_the_layout(monkeypatch, capsys):
    """``--decoder-last-pipeline-num-layers`` is no part of how the spec builders place layers (an even split or a
    pipeline layout), so the model would be split evenly without a word; the entry refuses it in one ``error:`` line
    naming the equivalent ``--pipeline-model-parallel-layout``."""
    main = entry_up_to_pretrain(monkeypatch)
    flag = random.choice(["--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"])
    assert main.main(["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "128",
                      "--pipeline-model-parallel-size", "2", flag, "1"]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"{main.PROG}: error: {flag}: "), line
    assert line.endswith("give --pipeline-model-parallel-layout 'Et*1|t*1L' instead"), line


def test_the_entry_refuses_block_interleaved_swiglu_for_a_converted_checkpoint(tmp_path, monkeypatch, capsys):
    """An ``oellm convert hf-to-mcore`` checkpoint stores each SwiGLU fc1 as [gate; up]; loading it with
    ``--moe-mlp-glu-interleave-size`` would mix gate and up rows without an error. The entry refuses it in one
    ``error:`` line, and without the flag goes on to ``pretrain``."""
    card = get_card(CARD)
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), tmp_path / "hf")
    hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "mcore")
    main = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", CARD, "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data",
            "--seq-length", "64", "--load", str(tmp_path / "mcore"),
            "--ckpt-format", "torch_dist", "--finetune", "--dist-ckpt-strictness", "log_unexpected"]
    block = random.choice([8, 16, 32])
    assert main.main([*argv, "--moe-mlp-glu-interleave-size", str(block)]) == 2
    line = one_error_line(capsys)
    assert "is an `oellm convert hf-to-mcore` checkpoint, whose SwiGLU weights" in line
    assert line.endswith("drop --moe-mlp-glu-interleave-size"), line
    with pytest.raises(Reached):
        main.main(argv)

"""Review of FLOP/parameter accounting and planning: each test reproduces one defect found by hand."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import CardError, get_card
from megatron.oellm.flops import pad_vocab
from megatron.oellm.models.parallel import ParallelLayout
from megatron.oellm.peaks import peak_tflops
from megatron.oellm.plan import build_plan, format_plan


def _random_padded_vocab(multiple: int) -> int:
    """A vocabulary that is a multiple of ``multiple`` but not of 128 (Megatron pads it no further)."""
    while True:
        vocab = multiple * random.randrange(10_000, 40_000)
        if vocab % 128:
            return vocab


def test_plan_counts_logits_over_the_given_padded_vocabulary_not_a_re_padded_one(capsys):
    """``oellm plan --padded-vocab V`` holds V rows in its memory table but counted logits over V rounded up to 128:
    its FLOPs disagreed with ``oellm flops --padded-vocab V`` for the same model."""
    vocab = _random_padded_vocab(8)
    seq = random.choice([1024, 2048, 4096])
    common = ["--seq-length", str(seq), "--padded-vocab", str(vocab), "--json"]
    assert cli.main(["plan", "qwen3-30b-a3b", "--nodes", "1", *common]) == 0
    planned = json.loads(capsys.readouterr().out)["flops"]
    assert cli.main(["flops", "qwen3-30b-a3b", *common]) == 0
    counted = json.loads(capsys.readouterr().out)
    hidden = get_card("qwen3-30b-a3b").hidden_size
    assert planned["breakdown"]["logits"] == pytest.approx(6 * hidden * vocab / 1e9, rel=1e-12)
    assert planned["gflops_per_token"] == pytest.approx(counted["gflops_per_token"], rel=1e-12)


def test_format_plan_counts_logits_over_the_built_cards_vocabulary(monkeypatch):
    """A recipe's plan holds the vocabulary padded to its own ``--make-vocab-size-divisible-by`` x TP; the FLOP line
    must count that vocabulary, not re-pad it to 128 (a difference below the printed digits, hence the spy)."""
    import megatron.oellm.plan as plan_module

    seen = []
    real = plan_module.training_flops_per_token

    def spy(card, seq_length, padded_vocab=None, document_lengths=None):
        seen.append(padded_vocab or pad_vocab(card.vocab_size))
        return real(card, seq_length, padded_vocab, document_lengths)

    monkeypatch.setattr(plan_module, "training_flops_per_token", spy)
    card = get_card("qwen3-30b-a3b-tiny").with_vocab(_random_padded_vocab(8))
    format_plan(build_plan(card, ParallelLayout(), 1), card.seq_length)
    assert seen == [card.vocab_size]


@pytest.mark.parametrize("flag", [f"num-layers=-{random.randrange(1, 50)}", "moe-layer-freq=[1,0,1]",
                                  "multi-latent-attention=true"])
def test_megatron_flag_that_trips_an_assertion_in_megatrons_count_is_one_line(flag, capsys):
    """An override Megatron's FLOP function asserts on (a negative layer count, a --moe-layer-freq list of the wrong
    length, MLA beside the card's GQA) ended in an AssertionError traceback, not the one-line refusal."""
    argv = ["flops", "qwen3-30b-a3b", "--seq-length", "128", "--megatron-compatible", "--megatron-flag", flag]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm flops: error: Megatron's count fails with --megatron-flag") and err.count("\n") == 1


@pytest.mark.parametrize("flag", ["make-vocab-size-divisible-by", "tensor-model-parallel-size"])
def test_megatron_flag_that_only_pads_the_vocabulary_is_refused_not_ignored(flag, capsys):
    """Megatron pads the vocabulary to ``--make-vocab-size-divisible-by`` x TP, but this command takes the padded
    vocabulary from ``--padded-vocab``: either flag as a ``--megatron-flag`` was silently ignored, so the count used a
    vocabulary the run did not have."""
    value = random.choice([2, 4, 8, 1024])
    argv = ["flops", "qwen3-30b-a3b", "--seq-length", "128", "--megatron-compatible", "--megatron-flag",
            f"{flag}={value}"]
    assert cli.main(argv) == 2
    assert "--padded-vocab" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["fp16", "BF16", "fp32", ""])
def test_peak_of_an_unknown_precision_is_refused_not_the_fp8_peak(precision):
    """Any precision but ``"bf16"`` returned the FP8 peak: ``fp16`` (dense FP16 = BF16 on Hopper) halved the MFU."""
    with pytest.raises(ValueError, match="precision"):
        peak_tflops(random.choice(["h100-sxm", "h200-sxm", "gh200"]), precision)  # type: ignore[arg-type]


def test_unknown_model_suggests_the_closest_name():
    """A one-character typo got the whole list but no suggestion."""
    name = random.choice(["qwen3-30b-a3b", "qwen3.5-35b-a3b", "qwen3-235b-a22b-tiny"])
    typo = name[:-1] + "x"
    with pytest.raises(CardError, match=f"did you mean '{name}'"):
        get_card(typo)


@pytest.mark.parametrize("field", ["moe_shared_expert_intermediate_size", "max_position_embeddings",
                                   "linear_gate_low_rank_dim"])
def test_negative_sizes_are_refused(field):
    """A negative shared-expert width passed validation and gave a negative shared-expert parameter and FLOP count."""
    with pytest.raises(CardError, match=field):
        dataclasses.replace(get_card("qwen3.5-35b-a3b"), **{field: -random.randrange(1, 1000)})

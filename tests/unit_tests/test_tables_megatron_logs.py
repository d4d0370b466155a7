"""``oellm table`` on logs shaped like upstream Megatron-LM 0.19 runs: a tokenizer that sets the vocabulary, windows
that reach past the run."""

from __future__ import annotations

import random
import statistics

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.flops import training_flops_per_token
from megatron.oellm.run_log import parse_log_text
from megatron.oellm.scaling_table import Window, format_markdown, summarise
from tests.unit_tests.megatron_logs import megatron_args, megatron_log, random_times, rows_with_tokens


def _padded_vocab_line(vocab: int, padded: int) -> str:
    """The tokenizer's line as megatron-core 0.19.2 logs it (``logger.info`` under megatron.training's basicConfig)."""
    return (f"INFO:megatron.core.tokenizers.utils.build_tokenizer: > padded vocab (size: {vocab}) with "
            f"{padded - vocab} dummy tokens (new size: {padded})")


def _tokenizer_log(overrides: dict, vocab: int, padded: int, times: list[float]) -> str:
    """A log of the 8-node Qwen3.5 row whose run took its vocabulary from the tokenizer (no ``--vocab-size``): the
    arguments block says ``vocab_size None``, megatron's padded-vocab line follows it."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "vocab_size": None, **overrides})
    text = megatron_log(args, times, [round(random.uniform(100, 140), 1) for _ in times])
    return text.replace("> building datasets ...", f"{_padded_vocab_line(vocab, padded)}\n> building datasets ...")


@pytest.mark.parametrize("overrides, model", [({}, "qwen3.5-35b-a3b"),
                                              ({"oellm_model": None}, "qwen3.5-35b-a3b")])
def test_a_run_whose_tokenizer_set_the_vocabulary_gets_our_tflops_and_mfu(overrides, model):
    """The reports' runs use a HuggingFace tokenizer and no --vocab-size: the table gave n/a TFLOP/s and MFU (and
    'unknown model' from Megatron's flags) although megatron logged the vocabulary it built."""
    vocab = random.randrange(150_000, 250_000)  # 262,144 (the card's) is far away
    padded = -(-vocab // 128) * 128
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    row = summarise(parse_log_text(_tokenizer_log(overrides, vocab, padded, times)), Window(), 4, peak_tflops=989.0)
    assert row.ok and row.model == model
    flops = training_flops_per_token(get_card("qwen3.5-35b-a3b"), 4096, padded_vocab=padded).total
    assert row.tflops_per_gpu == pytest.approx(flops * row.tokens_per_s_per_gpu / 1e12, rel=1e-9)
    assert row.mfu == pytest.approx(row.tflops_per_gpu / 989.0, rel=1e-9)
    other = training_flops_per_token(get_card("qwen3.5-35b-a3b"), 4096, padded_vocab=262_144).total
    assert abs(flops / other - 1) > 1e-4  # the logged vocabulary, not the card's, is counted


def test_the_logged_padded_vocabulary_is_the_one_counted():
    """The block's vocab_size is what the user asked for; the output layer megatron built is the padded-vocab line's
    (e.g. a tokenizer with more tokens than --vocab-size)."""
    vocab = random.randrange(262_145, 270_000)
    padded = -(-vocab // 128) * 128
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    text = megatron_log(args, [75_200.0] * 10, [133.2] * 10).replace(
        "> building datasets ...", f"{_padded_vocab_line(vocab, padded)}\n> building datasets ...")
    row = summarise(parse_log_text(text), Window(), 4)
    flops = training_flops_per_token(get_card("qwen3.5-35b-a3b"), 4096, padded_vocab=padded).total
    assert row.ok and row.tflops_per_gpu == pytest.approx(flops * row.tokens_per_s_per_gpu / 1e12, rel=1e-9)


def test_a_restart_without_its_own_arguments_keeps_the_logged_vocabulary():
    vocab = random.randrange(150_000, 262_000)
    padded = -(-vocab // 128) * 128
    text = _tokenizer_log({}, vocab, padded, [225_000.0, 112_000.0])
    lines = [line for line in _tokenizer_log({}, vocab, padded, random_times(10, 75_000.0)).splitlines()
             if " iteration " in line]
    log = parse_log_text(text + "\n".join(lines))
    assert len(log.runs) == 2 and log.runs[1].vocabulary == (vocab, padded)
    assert summarise(log, Window(), 4).tflops_per_gpu is not None


def test_without_any_vocabulary_the_footnote_says_why_tflops_are_missing():
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "vocab_size": None})
    row = summarise(parse_log_text(megatron_log(args, [75_200.0] * 10, [133.2] * 10)), Window(), 4)
    assert row.ok and row.tflops_per_gpu is None and row.tflops_per_gpu_logged == pytest.approx(133.2)
    assert "n/a: the model or its vocabulary cannot be identified" in format_markdown([row], None, Window())


def test_a_window_reaching_past_the_runs_end_marks_the_row():
    """A 10-iteration run under --window 3-40 (or 3-12) was given the medians of 3-10 while the footnote said 3-40."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    text = megatron_log(args, random_times(10, 75_000.0), [130.0] * 10)
    last = random.randrange(11, 41)
    row = summarise(parse_log_text(text), Window(3, last), 4)
    assert not row.ok and row.step_time_s is None
    assert row.status == (f"run of 10 iterations ends inside the window 3-{last}: its numbers would cover only 3-10; "
                          "give --window 3-10 for them")
    assert summarise(parse_log_text(text), Window(3, 10), 4).ok


def test_efficiency_compares_only_rows_of_the_baselines_model_and_sequence_length(tmp_path):
    """A table of Qwen3.5 and Qwen3-30B runs gave the Qwen3 row an 'efficiency' of its tokens/s/GPU over the Qwen3.5
    baseline's (another workload); the plot still draws a table whose rows lack one."""
    from megatron.oellm.scaling_table import plot, with_efficiency

    tokens = {4: random.uniform(5000, 7000), 8: random.uniform(5000, 7000)}
    qwen3_5 = rows_with_tokens(tokens)
    args = megatron_args("qwen3_30b_a3b_mn5", 1, {"world_size": 8})
    qwen3 = summarise(parse_log_text(megatron_log(args, [random.uniform(15_000, 20_000)] * 10, [215.0] * 10)),
                      Window(), 4)
    longer_args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32, "seq_length": 8192})
    longer = summarise(parse_log_text(megatron_log(longer_args, [150_000.0] * 10, [130.0] * 10)), Window(), 4)
    assert qwen3.ok and qwen3.model == "qwen3-30b-a3b" and qwen3.nodes == 2 and longer.ok
    rows, baseline = with_efficiency([*qwen3_5, qwen3, longer])  # the two-row series, not the 2-node Qwen3 run
    assert baseline.model == "qwen3.5-35b-a3b" and baseline.nodes == 4 and rows[0].efficiency == 1.0
    assert rows[1].efficiency == pytest.approx(tokens[8] / tokens[4], rel=1e-4)
    assert rows[2].efficiency is None and rows[3].efficiency is None
    rows, baseline = with_efficiency([*qwen3_5, qwen3, longer], baseline_row=3)
    assert baseline.model == "qwen3-30b-a3b" and rows[2].efficiency == 1.0
    assert [row.efficiency for row in rows[:2]] == [None, None] and rows[3].efficiency is None
    rows, baseline = with_efficiency([*qwen3_5, qwen3, longer], baseline_nodes=8)
    assert baseline.model == "qwen3.5-35b-a3b" and baseline.seq_length == 4096
    assert rows[0].efficiency == pytest.approx(tokens[4] / tokens[8], rel=1e-4) and rows[1].efficiency == 1.0
    assert rows[2].efficiency is None and rows[3].efficiency is None
    markdown = format_markdown(rows, baseline, Window())
    assert "for the rows of its model, sequence length and benchmark settings" in markdown
    assert "These rows differ in" not in markdown  # the two models' settings differ, but split no series of one
    pytest.importorskip("matplotlib")
    plot(rows, str(tmp_path / "mixed.png"))


IGNORED = ("[rank{rank}]:Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a2c1e8ca0>\n"
           "[rank{rank}]:Traceback (most recent call last):\n"
           '[rank{rank}]:  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1479, in __del__\n'
           "[rank{rank}]:    self._shutdown_workers()\n"
           "[rank{rank}]:AssertionError: can only test a child process\n")
"""What PyTorch's DataLoader often prints at interpreter shutdown: Python ignored the exception and went on."""


def test_an_exception_python_ignored_is_no_crash():
    """A finished run whose DataLoader printed an ignored exception at shutdown was 'crashed (AssertionError: can only
    test a child process)' and lost its numbers."""
    args = megatron_args("qwen3_5_35b_a3b_mn5_strong", 2, {"world_size": 32})
    times = random_times(10, random.uniform(60_000.0, 90_000.0))
    done = "[after training is done] datetime: 2026-10-19 12:00:00\n"
    text = megatron_log(args, times, [130.0] * 10, tail=done + IGNORED.format(rank=random.randrange(32)))
    row = summarise(parse_log_text(text), Window(), 4)
    assert row.ok and row.step_time_s == pytest.approx(statistics.median(times[2:]) / 1000)
    # torchrun --tee's line header has no space after the colon: the exception's name was not found ('crashed')
    crash = ("[default3]:Traceback (most recent call last):\n[default3]:  File \"x.py\", line 1\n"
             "[default3]:RuntimeError: boom\n")
    for tail in (IGNORED.format(rank=0) + crash, crash + IGNORED.format(rank=0)):
        assert summarise(parse_log_text(megatron_log(args, times, [130.0] * 10, tail=tail)), Window(), 4).status == \
            "ok (crashed (RuntimeError: boom) at iteration 10, after the window)"

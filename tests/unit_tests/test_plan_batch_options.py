"""``oellm plan --global-batch-size --micro-batch-size``: the recipes' batch rule refuses a batch that does not split,
and the plan prints the micro-batches per step (gradient-accumulation steps)."""

import json
import random

from megatron.oellm import cli

JUPITER = ["plan", "qwen3-235b-a22b", "--nodes", "64", "--tp", "2", "--pp", "8", "--ep", "16", "--etp", "1", "--sp",
           "--pipeline-layout", "Et*3|(t*4|)*22t*3L"]
"""The Jupiter current config (examples/oellm/_qwen3_235b_a22b_jupiter.toml): 256 GPUs, DP 16, VPP 3."""


def _batch(global_batch: int, micro_batch: int) -> list[str]:
    return ["--global-batch-size", str(global_batch), "--micro-batch-size", str(micro_batch)]


def test_jupiter_gbs_2048_mbs_1_dp_16_is_128_micro_batches_per_step(capsys):
    assert cli.main([*JUPITER, *_batch(2048, 1)]) == 0
    out = capsys.readouterr().out
    assert "batch        global 2048 = micro 1 x DP 16 x 128 micro-batches per step" in out
    assert cli.main([*JUPITER, *_batch(2048, 1), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["global_batch_size"], report["micro_batch_size"], report["micro_batches_per_step"]) == (2048, 1, 128)


def test_micro_batches_per_step_on_a_random_layout(capsys):
    nodes, micro, steps = random.randint(1, 16), random.choice([1, 2, 4]), random.randint(1, 64)
    data_parallel = nodes * 4 // 2  # PP 2
    argv = ["plan", "qwen3-30b-a3b", "--nodes", str(nodes), "--pp", "2", "--ep", "2",
            *_batch(steps * micro * data_parallel, micro), "--json"]
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["data_parallel"] == data_parallel and report["micro_batches_per_step"] == steps


def test_a_batch_that_does_not_split_over_dp_is_one_line_exit_2(capsys):
    global_batch = 16 * random.randint(1, 200) + random.randint(1, 15)
    assert cli.main([*JUPITER, *_batch(global_batch, 1), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("oellm plan: error: --global-batch-size / --micro-batch-size: global batch "
                                   f"{global_batch} is not divisible")
    assert "use a multiple of 16" in captured.err


def test_a_batch_the_interleaved_schedule_refuses_is_one_line_exit_2(capsys):
    """DP 16 x PP 8 with virtual stages: 16 x (8k + 1..7) samples divide over DP but leave a short last group."""
    global_batch = 16 * (8 * random.randint(1, 30) + random.randint(1, 7))
    assert cli.main([*JUPITER, *_batch(global_batch, 1)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "interleaved pipeline schedule" in captured.err and "use a multiple of PP x micro batch x DP = 128" in (
        captured.err)


def test_one_batch_option_without_the_other_is_refused(capsys):
    for option in (["--global-batch-size", "2048"], ["--micro-batch-size", "1"]):
        assert cli.main([*JUPITER, *option]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == ("oellm plan: error: --global-batch-size and --micro-batch-size go together: give both "
                                "(e.g. --global-batch-size 2048 --micro-batch-size 1) or neither\n")

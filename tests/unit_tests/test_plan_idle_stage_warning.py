"""``oellm plan`` warns of every pipeline stage (virtual stages included) that holds no decoder layer, no embedding and
no loss: ``Et*16|t*16||t*16L`` at PP 4 showed a PP rank of 0 layers and exited 0 without a word."""

import json
import random

from megatron.oellm import cli


def _layout_with_empty_stages(stages: int, empty: set[int]) -> str:
    """48 decoder layers over ``stages`` stages, those of ``empty`` (not the first or last) left empty."""
    full = [i for i in range(stages) if i not in empty]
    counts = {i: 48 // len(full) + (1 if n < 48 % len(full) else 0) for n, i in enumerate(full)}
    parts = [f"t*{counts[i]}" if i in counts else "" for i in range(stages)]
    return "E" + "|".join(parts) + "L"


def test_the_reviewed_layout_warns_of_pp_rank_2(capsys):
    argv = ["plan", "qwen3-30b-a3b", "--nodes", "8", "--pp", "4", "--ep", "4", "--pipeline-layout", "Et*16|t*16||t*16L"]
    assert cli.main(argv) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: PP rank 2 (stage 3 of 4 of the pipeline layout 'Et*16|t*16||t*16L') holds no "
                        "decoder layer, no embedding and no loss: its GPUs would idle through every step; an empty "
                        "stage ('||') is likely a typo"]


def test_every_empty_virtual_stage_is_named_once(capsys):
    pp, vpp = 2, random.choice([2, 3, 4])
    stages = pp * vpp
    empty = set(random.sample(range(1, stages - 1), random.randint(1, stages - 3)))
    layout = _layout_with_empty_stages(stages, empty)
    argv = ["plan", "qwen3-30b-a3b", "--nodes", "2", "--pp", str(pp), "--ep", "4", "--pipeline-layout", layout]
    assert cli.main(argv) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert [w.split(" (")[0] for w in warnings] == [
        f"warning: PP rank {i % pp}, virtual stage {i // pp}" for i in sorted(empty)]
    assert cli.main([*argv, "--json"]) == 0  # stdout stays one JSON object; the warnings go to stderr
    captured = capsys.readouterr()
    assert json.loads(captured.out)["layout"]["pipeline_layout"] == layout
    assert captured.err.splitlines() == warnings


def test_a_layout_without_an_empty_stage_has_no_warning(capsys):
    layout = _layout_with_empty_stages(4, set())
    assert cli.main(["plan", "qwen3-30b-a3b", "--nodes", "8", "--pp", "4", "--ep", "4", "--pipeline-layout", layout]) == 0
    captured = capsys.readouterr()
    assert "warning:" not in captured.out and captured.err == ""


def test_a_loss_only_last_stage_is_no_idle_stage(capsys):
    """A last stage holding the output layer and loss alone (``...|L``, a common way to balance the logits' cost)
    does work each step: no warning, with or without virtual stages."""
    for pp, stages in ((2, 2), (2, 4)):
        counts = [48 // (stages - 1) + (1 if k < 48 % (stages - 1) else 0) for k in range(stages - 1)]
        layout = "E" + "|".join(f"t*{count}" for count in counts) + "|L"
        argv = ["plan", "qwen3-30b-a3b", "--nodes", "2", "--pp", str(pp), "--ep", "4", "--pipeline-layout", layout]
        assert cli.main(argv) == 0
        captured = capsys.readouterr()
        assert "warning:" not in captured.out and captured.err == "", layout


def test_an_empty_stage_at_two_virtual_stages_names_its_virtual_stage(capsys):
    """At PP 2 with 2 virtual stages per rank, an empty stage is named with its PP rank and its virtual stage."""
    empty = random.choice([1, 2])
    layout = _layout_with_empty_stages(4, {empty})
    argv = ["plan", "qwen3-30b-a3b", "--nodes", "2", "--pp", "2", "--ep", "4", "--pipeline-layout", layout]
    assert cli.main(argv) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: PP rank {empty % 2}, virtual stage {empty // 2} (stage {empty + 1} of 4 of the "
                        f"pipeline layout {layout!r}) holds no decoder layer, no embedding and no loss: its GPUs would "
                        "idle through every step; an empty stage ('||') is likely a typo"]

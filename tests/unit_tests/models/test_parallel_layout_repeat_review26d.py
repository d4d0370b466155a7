"""An absurd ``*N`` in a pipeline layout is refused in one line (exit 2), not expanded into a MemoryError."""

import random

import pytest

import megatron.oellm  # noqa: F401  (3.11 provision before megatron-core imports)
from megatron.oellm.cards import get_card
from megatron.oellm.models.parallel import (
    MAX_EXPANDED_LAYOUT,
    ParallelLayout,
    ParallelLayoutError,
    parse_pipeline_layout,
    validate_layout,
)

QWEN3 = get_card("qwen3-30b-a3b")


def test_plan_refuses_a_huge_repeat_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``t*<twelve or more digits>`` used to be expanded as asked and end in a MemoryError traceback."""
    from megatron.oellm.cli import main

    count = random.randint(10**12, 10**18)
    layout = f"Et*{count}|t*24L"
    assert main(["plan", QWEN3.name, "--nodes", "1", "--pp", "2", "--pipeline-layout", layout]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"'*{count}' expands it past" in err


def test_a_count_of_thousands_of_digits_is_refused_before_int() -> None:
    """Python's ``int()`` refuses more than 4300 digits with a ValueError that named no layout."""
    rng = random.Random()
    digits = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(4400, 6000)))
    with pytest.raises(ParallelLayoutError, match=rf"'\*{digits[:8]}\.\.\. \({len(digits)} digits\)'"):
        parse_pipeline_layout(f"(tt|)*{digits}")


def test_group_and_total_expansion_count_against_the_limit() -> None:
    """A group's length times its count, plus what precedes it, is what the limit bounds."""
    size = random.randint(2, 9)
    fits = MAX_EXPANDED_LAYOUT // (size + 1)
    assert len(parse_pipeline_layout(f"({'t' * size}|)*{fits}")) == fits + 1
    with pytest.raises(ParallelLayoutError, match="expands it past"):
        parse_pipeline_layout(f"({'t' * size}|)*{fits + 1}")
    with pytest.raises(ParallelLayoutError, match="expands it past"):
        parse_pipeline_layout(f"{'E' * (size + 1)}({'t' * size}|)*{fits}")


def test_a_plausible_wrong_count_still_gets_the_layer_count_message() -> None:
    """Below the limit the usual check names the model's layer count; leading zeros are still a plain count."""
    count = random.randint(QWEN3.num_layers, 100_000)
    with pytest.raises(ParallelLayoutError, match=f"places {count + 24} decoder layers"):
        validate_layout(QWEN3, ParallelLayout(pp=2, pipeline_layout=f"Et*{'0' * 5000}{count}|t*24L"))

"""A submission cut off midway names the command that submits each remaining row. For a config read from an open
stream (``oellm recipe <(sed ... X.toml) --submit``) that command named ``/dev/fd/63``, which is gone once the
submission ends: the hint now asks for the config again."""

from __future__ import annotations

import random
import shlex
from types import SimpleNamespace

import pytest

from megatron.oellm.commands.recipe import _refuse_partial_submission
from megatron.oellm.recipes.config import RecipeError


def refusal_line(config: str, capsys: pytest.CaptureFixture) -> tuple[str, list[int]]:
    """The one refusal line of a submission of ``config`` that sbatch refused at its first row, and the rows."""
    rows = sorted(random.sample(range(1, 9), random.randint(1, 4)))
    jobs = [SimpleNamespace(number=row) for row in rows]
    assert _refuse_partial_submission(None, jobs, config, {}, RecipeError("sbatch refused"), 2) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err, rows


@pytest.mark.parametrize("config", ["/dev/fd/63", "/dev/stdin", "/proc/self/fd/11"])
def test_a_streamed_config_is_asked_for_again(config: str, capsys: pytest.CaptureFixture) -> None:
    err, rows = refusal_line(config, capsys)
    assert (f"submit each remaining row with `oellm recipe CONFIG --submit --row N` (CONFIG: the config read from "
            f"{config}, a stream that is gone; give it again) and the same options but --nodes "
            f"(N: {', '.join(map(str, rows))})\n") in err, err


def test_a_config_file_is_named_as_given(capsys: pytest.CaptureFixture) -> None:
    config = f"examples/oellm/my runs/{random.randbytes(3).hex()}.toml"
    err, rows = refusal_line(config, capsys)
    assert (f"submit each remaining row with `oellm recipe {shlex.quote(config)} --submit --row N` and the same "
            f"options but --nodes (N: {', '.join(map(str, rows))})\n") in err, err

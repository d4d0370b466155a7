"""Every warning the conversion itself gives reaches the user as its ``warning:`` line under a filter that ignores
warnings (a tokenizer covering few of the model's rows, a previous output that could not be deleted: not only the
norm-shift and NaN warnings), each time it is given; other categories keep their name in the line; and the warning
format and filter stay within the conversion."""

from __future__ import annotations

import errno
import os
import random
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.commands import convert as convert_command
from megatron.oellm.convert import output
from megatron.oellm.convert.errors import ConversionWarning
from tests.unit_tests.convert.convert_helpers import save_tiny_tokenizer


@pytest.mark.parametrize("ignored", [Warning, UserWarning])
def test_the_tokenizer_and_left_behind_output_warnings_pass_an_ignore_filter(
        ignored: type[Warning], converted, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    card, _, tmp = converted
    out = tmp / "out"
    export = ["convert", "mcore-to-hf", "--model", card.name, "--mcore", str(tmp / "mcore"), "--out", str(out)]
    assert main(export) == 0
    tokens = random.randrange(300, 400)
    save_tiny_tokenizer(tmp / "tok", tokens, seed=random.randrange(2**31))
    trash = output.trash_directory(out)
    remove = output.shutil.rmtree

    def rmtree(path: str | os.PathLike, *args: object, **kwargs: object) -> None:
        if Path(path) == trash:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
        remove(path, *args, **kwargs)

    monkeypatch.setattr(output.shutil, "rmtree", rmtree)
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ignored)
        assert main([*export, "--overwrite", "--tokenizer", str(tmp / "tok")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    prefix = "oellm convert mcore-to-hf: warning: "
    assert any(line.startswith(f"{prefix}--tokenizer {tmp / 'tok'}: tokenizer.json defines ids 0 to {tokens - 1}")
               for line in lines), lines
    assert any(line.startswith(f"{prefix}the new output is in place, but {trash} could not be deleted")
               for line in lines), lines


def _run(convert: Callable[[object], int], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ``warning:`` lines of ``oellm convert`` running ``convert`` as its conversion."""
    monkeypatch.setattr(convert_command, "_convert", convert)
    direction = random.choice(["hf-to-mcore", "mcore-to-hf"])
    assert convert_command.run(type("Args", (), {"direction": direction})) == 0
    return [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]


def test_a_warning_given_again_is_a_line_again(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twice in one conversion, and again in a second conversion of the same process."""
    message = f"weight {random.randrange(10**6)}: lossy"

    def convert(_args: object) -> int:
        for _ in range(2):
            warnings.warn(message, ConversionWarning, stacklevel=1)
        return 0

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(_run(convert, capsys, monkeypatch)) == 2
        assert len(_run(convert, capsys, monkeypatch)) == 2


def test_another_category_is_named_in_its_line(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    category = random.choice([RuntimeWarning, FutureWarning, ResourceWarning])
    message = f"something {random.randrange(10**6)}"

    def convert(_args: object) -> int:
        warnings.warn(message, category, stacklevel=1)
        return 0

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        (line,) = _run(convert, capsys, monkeypatch)
    assert line.endswith(f": warning: {category.__name__}: {message}")


def test_the_warning_format_and_filter_stay_within_the_conversion(capsys: pytest.CaptureFixture,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter(random.choice(["ignore", "error", "default"]))
        filters, show = list(warnings.filters), warnings.showwarning
        _run(lambda _args: 0, capsys, monkeypatch)
        assert warnings.filters == filters and warnings.showwarning is show

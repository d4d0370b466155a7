"""``oellm flops --megatron-flag NAME=VALUE`` splits at the first ``=`` only: a value holding ``=`` is refused by
Megatron's parser quoting the whole value as typed (mutation audit of ``given_texts``)."""

from __future__ import annotations

import random

from megatron.oellm import cli


def test_a_value_with_an_equals_sign_is_quoted_whole(capsys):
    value = f"{random.randint(1, 4096)}={random.randint(1, 4096)}"
    argv = ["flops", "qwen3-30b-a3b", "--seq-length", "100", "--megatron-compatible", "--json"]
    assert cli.main([*argv, "--megatron-flag", f"hidden-size={value}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("oellm flops: error: --megatron-flag: argument --hidden-size: invalid int value: "
                            f"'{value}'\n")

"""``oellm flops``' table says, under its header, what the corrected count is, that Megatron's is
``--megatron-compatible``, and where the flag sets that reproduce the MN5 report's TFLOP/s are: ``mode corrected``
alone left a reader comparing with the report (its counts 17.0 % above ours for Qwen3-30B-A3B, 2.7 % above
Megatron's for Qwen3.5) without a hint why; the pointer is printed only for the two cards those tables train.
The last line stays the count's (the total, or Megatron's against the corrected one), which scripts read."""

import json
import random
import re
from pathlib import Path

import pytest

from megatron.oellm import cli
from megatron.oellm.cards import get_card, list_card_names
from megatron.oellm.commands.flops import (
    CORRECTED_NOTE,
    CORRECTED_ONLY_NOTE,
    MN5_FLAG_SET_MODELS,
    MN5_PADDED_VOCAB,
    REPORTS_SECTION,
)
from megatron.oellm.flops import FlopError, megatron_flops_per_token
from megatron.oellm.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "flops.md"
MODELS = ["qwen3-30b-a3b", "qwen3.5-35b-a3b", "qwen3-235b-a22b"]


def _table(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert cli.main(["flops", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_corrected_table_says_what_it_counts_under_its_header_and_ends_with_the_total(capsys):
    lines = _table(capsys, random.choice(sorted(MN5_FLAG_SET_MODELS)), "--seq-length",
                   str(random.choice([2048, 4096, 8192])))
    assert lines[0].endswith("mode corrected")
    assert lines[1] == CORRECTED_NOTE and "--megatron-compatible" in lines[1]
    assert lines[2] == (f"to reproduce the MN5 report's TFLOP/s: --megatron-compatible --padded-vocab "
                        f"{MN5_PADDED_VOCAB} plus {REPORTS_SECTION}")
    assert lines[-1].startswith("total (training)")


def test_the_note_names_a_section_docs_flops_md_has_and_the_docs_show_it(capsys):
    hint = _table(capsys, "qwen3-30b-a3b", "--seq-length", "4096", "--padded-vocab", str(MN5_PADDED_VOCAB))[2]
    section = re.search(r'docs/flops.md, "(?P<title>[^"]+)"', hint)["title"]
    assert f"\n## {section}\n" in DOCS.read_text()
    assert f"\n{hint}\n" in DOCS.read_text()


@pytest.mark.parametrize(("model", "flags", "tokens", "reported"), [
    ("qwen3.5-35b-a3b", ["hybrid-layer-pattern=none", "num-layers=40", "experimental-attention-variant=gated_delta_net",
                         "linear-attention-freq=4"], 6971, "133.2 TFLOP/s/GPU, MFU 13.5%"),
    ("qwen3.5-35b-a3b", ["group-query-attention=false"], 7239, "141.0 TFLOP/s/GPU, MFU 14.3%"),
    ("qwen3-30b-a3b", ["group-query-attention=false"], 7519, "215.0 TFLOP/s/GPU, MFU 21.7%"),
])
def test_following_the_hint_of_a_plain_command_reproduces_the_mn5_report(capsys, model, flags, tokens, reported):
    """The hint named only --megatron-compatible: with the flag sets of docs/flops.md and the card's vocabulary
    (248,320 for Qwen3.5) the first row read 132.0 TFLOP/s/GPU, MFU 13.3 %; the report (and the docs' commands, which
    pass --padded-vocab 262144) says 133.2 / 13.5 %. Each row's flags, tokens/s and figures are the report's."""
    argv = [model, "--seq-length", "4096"]
    hint = _table(capsys, *argv)[2]
    options = re.fullmatch(rf"to reproduce the MN5 report's TFLOP/s: (?P<options>.+) plus {re.escape(REPORTS_SECTION)}",
                           hint)["options"].split()
    flag_args = [arg for flag in flags for arg in ("--megatron-flag", flag)]
    throughput = _table(capsys, *argv, *options, *flag_args, "--tokens-per-second-per-gpu", str(tokens))[-1]
    assert f" tokens/s/GPU -> {reported} of 989 TFLOP/s" in throughput


def test_the_throughput_lines_follow_the_total(capsys):
    tokens = random.randint(1000, 9000)
    lines = _table(capsys, "qwen3-30b-a3b", "--seq-length", "4096", "--tokens-per-second-per-gpu", str(tokens))
    mfu = next(i for i, line in enumerate(lines) if " tokens/s/GPU -> " in line)
    assert lines[mfu - 1].startswith("total (training)")


def test_megatron_mode_points_to_the_flag_sets_until_flags_are_given(capsys):
    argv = ["qwen3-30b-a3b", "--seq-length", "4096", "--megatron-compatible"]
    lines = _table(capsys, *argv)
    assert lines[1] == f"to reproduce the MN5 report's TFLOP/s: --padded-vocab {MN5_PADDED_VOCAB} plus {REPORTS_SECTION}"
    # the mode is already on, and so is the report's vocabulary
    assert _table(capsys, *argv, "--padded-vocab", str(MN5_PADDED_VOCAB))[1] == (
        f"to reproduce the MN5 report's TFLOP/s: {REPORTS_SECTION}")
    assert not any(line == CORRECTED_NOTE for line in lines) and lines[-1].startswith("corrected count ")
    lines = _table(capsys, *argv, "--megatron-flag", "group-query-attention=false")
    assert not any("MN5 report's" in line for line in lines)


def test_the_json_report_is_unchanged(capsys):
    assert cli.main(["flops", random.choice(MODELS), "--seq-length", "4096", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"model", "seq_length", "padded_vocab", "document_lengths", "mode", "gflops_per_token",
                           "breakdown"}


@pytest.mark.parametrize("megatron_mode", [False, True])
def test_the_mn5_pointer_is_only_printed_for_the_cards_of_the_mn5_tables_it_reproduces(capsys, megatron_mode):
    """It was printed for every card: following it fails for the CKDA hybrid (megatron-core has no formula for it)
    and leads nowhere for qwen3-235b-a22b (the Jupiter report's model) or a -tiny / -proxy card."""
    others = sorted(set(list_card_names()) - MN5_FLAG_SET_MODELS)
    names = [*random.sample(others, 3), "qwen3-235b-a22b", "oellm-ckda-hybrid"]
    for name in names:
        if megatron_mode and "ckda" in name:
            continue  # refused: megatron-core 0.19.2 has no CKDA layer
        lines = _table(capsys, name, "--seq-length", "4096", *(["--megatron-compatible"] if megatron_mode else []))
        assert not any("MN5 report's" in line for line in lines), name


def test_the_mn5_pointers_cards_are_those_of_the_mn5_recipes_megatron_can_count():
    """The set is written in the package (the recipes are not shipped): it must be the cards of the recipes on
    cluster mn5 whose count megatron-compatible mode reproduces, none of another cluster's."""
    by_cluster: dict[str, set[str]] = {}
    for path in (ROOT / "examples" / "oellm").glob("[!_]*.toml"):
        recipe = load_recipe(path)
        by_cluster.setdefault(recipe.cluster.name, set()).add(recipe.model)
    countable = set()
    for name in by_cluster["mn5"]:
        try:
            megatron_flops_per_token(get_card(name), 4096, 262144)
        except FlopError:
            continue
        countable.add(name)
    assert countable == MN5_FLAG_SET_MODELS and "oellm-ckda-hybrid" in by_cluster["mn5"]
    assert MN5_FLAG_SET_MODELS.isdisjoint(by_cluster["jupiter"])


def test_a_ckda_card_is_not_sent_to_the_megatron_count_it_refuses(capsys):
    """The note under the header named ``--megatron-compatible`` as Megatron's count for every card; for a CKDA card
    that mode is refused (megatron-core has no CKDA layer), so its note says there is none."""
    ckda = [name for name in list_card_names() if get_card(name).linear_mixer == "ckda"]
    lines = _table(capsys, random.choice(ckda), "--seq-length", "4096")
    assert CORRECTED_ONLY_NOTE in lines and "--megatron-compatible" not in "\n".join(lines)
    with pytest.raises(FlopError, match="no CKDA layer"):
        megatron_flops_per_token(get_card(random.choice(ckda)), 4096)

"""Gaps a tenth mutation audit of :mod:`megatron.oellm.commands.recipe` and :mod:`megatron.oellm.recipes.resolve`
found: the dry run's row columns that come from a row's own settings, the header's vocabulary, the wording of the
``--local`` refusal of SLURM-only options."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import random

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cli import main
from megatron.oellm.commands.recipe import (
    CLUSTER_OVERRIDES,
    SLURM_ONLY_OVERRIDES,
    check_local_overrides,
    describe_recipe,
)
from megatron.oellm.recipes import RecipeError, RunInputs, load_recipe

JUPITER = EXAMPLES / "qwen3_235b_a22b_jupiter.toml"  # no vocab_size: the card's vocabulary
QWEN3_30B = EXAMPLES / "qwen3_30b_a3b_mn5.toml"  # vocab_size = 262144


def _row_lines(text: str) -> list[list[str]]:
    """The whitespace-split row lines of a dry-run header's table (after its ``row  nodes ...`` title line, up to the
    blank line before the table command)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["row", "nodes"]) + 1
    return [line.split() for line in itertools.takewhile(bool, lines[start:])]


def test_the_dry_run_table_shows_each_rows_own_sequence_iterations_and_time_limit():
    """A row may set its own ``seq_length``, ``train_iters`` and ``time``; the dry run's table must list those (what
    the job runs and the limit SLURM kills it at), not the recipe's or the cluster's, and a row without them the
    recipe's. The row's own env is listed among its overrides."""
    recipe = load_recipe(JUPITER)
    base = recipe.rows[0]
    seq = random.choice([2048, 8192, 16384])
    iters = recipe.train_iters + random.randint(1, 500)
    time = f"{random.randint(2, 9):02d}:{random.randint(10, 59):02d}:00"
    connections = str(random.randint(2, 64))
    own = dataclasses.replace(base, seq_length=seq, train_iters=iters, time=time,
                              env={"CUDA_DEVICE_MAX_CONNECTIONS": connections})
    recipe = dataclasses.replace(recipe, rows=(base, own))
    [first, second] = _row_lines(describe_recipe(recipe, RunInputs()))
    assert first[:8] == ["1", str(base.nodes), str(base.nodes * recipe.cluster.gpus_per_node),
                         str(base.global_batch_size), str(base.micro_batch_size), str(recipe.seq_length),
                         str(recipe.train_iters), recipe.cluster.time]
    assert second[:8] == ["2", str(base.nodes), str(base.nodes * recipe.cluster.gpus_per_node),
                          str(base.global_batch_size), str(base.micro_batch_size), str(seq), str(iters), time]
    assert f"'CUDA_DEVICE_MAX_CONNECTIONS': '{connections}'" in " ".join(second)


def test_the_header_names_a_vocabulary_only_where_the_run_sets_one():
    """The header's ``(vocab N)`` tells the user the run's vocabulary differs from the card's: the recipe's
    ``vocab_size`` is named, a recipe without one names none (not ``(vocab None)``), and the byte tokenizer's
    replaces either."""
    header = describe_recipe(load_recipe(JUPITER), RunInputs()).splitlines()[1]
    assert header.startswith("recipe qwen3_235b_a22b_jupiter: model qwen3-235b-a22b, seq ") and "vocab" not in header
    recipe = load_recipe(QWEN3_30B)
    vocab = random.randrange(1000, 300_000)
    header = describe_recipe(dataclasses.replace(recipe, vocab_size=vocab), RunInputs()).splitlines()[1]
    assert f"model qwen3-30b-a3b (vocab {vocab}), seq " in header
    header = describe_recipe(recipe, RunInputs(("/data/corpus",), "byte")).splitlines()[1]
    assert "(vocab 257: the byte tokenizer's, instead of the recipe's)" in header


def _local_args(**given) -> argparse.Namespace:
    """``oellm recipe --local`` arguments with the cluster options in ``given`` set (the others not given)."""
    return argparse.Namespace(**{name: given.get(name) for name in CLUSTER_OVERRIDES})


def test_the_local_refusal_of_slurm_options_reads_for_one_option_and_for_several():
    """``--local`` refuses each SLURM-only option by name; the sentence tells the user to drop *it* (one option,
    ``applies``) or *them* (several, ``apply``), and ``--output-dir``, which ``--local`` uses, is no such option."""
    one = random.choice(SLURM_ONLY_OVERRIDES)
    with pytest.raises(RecipeError) as refused:
        check_local_overrides(_local_args(**{one: "x", "output_dir": "runs"}))
    assert str(refused.value).startswith(f"--{one} applies to SLURM jobs (--dry-run, --submit) only;")
    assert str(refused.value).endswith(": drop it, or use --dry-run / --submit")
    several = random.sample(SLURM_ONLY_OVERRIDES, random.randint(2, len(SLURM_ONLY_OVERRIDES)))
    with pytest.raises(RecipeError) as refused:
        check_local_overrides(_local_args(**dict.fromkeys(several, "x")))
    named = ", ".join(f"--{name}" for name in SLURM_ONLY_OVERRIDES if name in several)
    assert str(refused.value).startswith(f"{named} apply to SLURM jobs (--dry-run, --submit) only;")
    assert str(refused.value).endswith(": drop them, or use --dry-run / --submit")
    check_local_overrides(_local_args(output_dir="runs"))


def test_the_header_gives_the_recipes_parallel_sizes_each_under_its_name():
    """The header's ``parallel:`` line is how a user checks the layout before submitting: each size under its own
    name (EP and ETP differ in every MoE recipe), and the pipeline layout string when the recipe gives one."""
    recipe = load_recipe(JUPITER)
    tp, pp, vpp, ep, etp, cp = random.sample(range(2, 40), 6)
    sp = random.choice([True, False])
    layout = dataclasses.replace(recipe.parallel, tp=tp, pp=pp, vpp=vpp, ep=ep, etp=etp, cp=cp, sp=sp,
                                 pipeline_layout=None)
    lines = describe_recipe(dataclasses.replace(recipe, parallel=layout), RunInputs()).splitlines()
    assert lines[2] == f"parallel: TP{tp} PP{pp} VPP{vpp} EP{ep} ETP{etp} CP{cp}" + (" SP" if sp else "")
    given = recipe.parallel.pipeline_layout
    assert given and describe_recipe(recipe, RunInputs()).splitlines()[2].endswith(f", layout {given}")


def test_the_header_shows_sequence_parallelism_as_the_plans_layout_line_does(capsys):
    """The Jupiter recipes run TP2 with sequence parallelism: the header said ``TP2 PP8 VPP3 EP16 ETP1 CP1`` while the
    plan's layout line of row 1 (whose layout is the recipe's), under it, said ``... CP1 SP``."""
    assert load_recipe(JUPITER).parallel.sp and not load_recipe(JUPITER).rows[0].parallel
    assert main(["recipe", str(JUPITER), "--dry-run", "--row", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    sizes = out[2].removeprefix("parallel: ").split(",")[0]
    assert sizes.endswith(" SP")
    assert any(line.startswith(f"layout       {sizes} on ") for line in out)
    assert any(line.startswith(f"-- row 1: layout ok: {sizes} on ") for line in out)  # the row's line too


def test_the_header_prints_the_recipes_notes_indented_before_the_rows():
    """A recipe's ``notes`` (why a row's reference may not be matched, what differs from the report) are printed,
    each line indented by two spaces, between the header and the row table."""
    words = [f"w{random.randrange(10**6)}" for _ in range(6)]
    notes = f"{words[0]} {words[1]}\n{words[2]} {words[3]}\n{words[4]} {words[5]}\n"
    recipe = dataclasses.replace(load_recipe(JUPITER), notes=notes)
    lines = describe_recipe(recipe, RunInputs()).splitlines()
    start = lines.index(f"  {words[0]} {words[1]}")
    assert lines[start - 1:start + 4] == ["", f"  {words[0]} {words[1]}", f"  {words[2]} {words[3]}",
                                          f"  {words[4]} {words[5]}", ""]
    assert lines[start + 4].split()[:2] == ["row", "nodes"]


def test_the_cross_node_note_counts_expert_tensor_parallel_gpus_and_needs_the_flex_dispatcher():
    """An expert-parallel group is EP x ETP GPUs: at ep 2, etp 4 on 4-GPU nodes it spans 2 nodes (counting EP alone,
    2 GPUs, it fits one), so the note is given. Without the flex dispatcher (all-to-all) HybridEP / DeepEP are not
    used and no note is given, whatever the backend flag says."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.commands.recipe import cross_node_dispatch_note
    from megatron.oellm.recipes.resolve import ResolvedRow

    recipe = load_recipe(JUPITER)  # its rows' flex dispatcher with HybridEP, on 4-GPU nodes
    row = recipe.rows[0]
    flags = {"moe-token-dispatcher-type": "flex", "moe-flex-dispatcher-backend": "hybridep"}
    resolved = ResolvedRow(row, get_card(recipe.model), recipe.parallel, row.nodes * 4, flags)
    etp = random.choice([4, 8])
    wide = dataclasses.replace(resolved, layout=dataclasses.replace(resolved.layout, ep=2, etp=etp))
    note = cross_node_dispatch_note(wide)
    expected = f"note: the hybridep expert-parallel group ({2 * etp} GPUs) spans {2 * etp // 4} nodes "
    assert note.startswith(expected), note
    backend = random.choice(["hybridep", "deepep"])
    for dispatcher in ("alltoall", "allgather"):
        flags = {**resolved.flags, "moe-token-dispatcher-type": dispatcher, "moe-flex-dispatcher-backend": backend}
        assert cross_node_dispatch_note(dataclasses.replace(resolved, flags=flags)) == ""


def test_checkpoints_without_a_checkpoint_directory_are_refused():
    """``checkpoint_flags`` with a positive save interval but no directory must refuse: flags of ``--save ''`` would
    train and save nowhere (``oellm recipe`` always passes the run directory's; a caller of ``resolve_row`` may
    not). With a directory, both ``--save`` and ``--load`` name it (the run resumes from its own checkpoints)."""
    from megatron.oellm.recipes.resolve import checkpoint_flags

    interval = random.randint(1, 1000)
    with pytest.raises(RecipeError, match=r"^save_interval > 0 needs a checkpoint directory$"):
        checkpoint_flags(RunInputs(save_interval=interval))
    directory = f"/runs/ckpt-{random.randrange(10**6)}"
    assert checkpoint_flags(RunInputs(checkpoint_dir=directory, save_interval=interval)) == {
        "save": directory, "load": directory, "save-interval": interval}
    assert checkpoint_flags(RunInputs(checkpoint_dir=directory)) == {}


def test_a_refusal_about_a_flag_a_row_sets_says_where_a_recipe_sets_it():
    """When the entry refuses a Megatron flag the recipe sets (in ``[megatron_flags]`` or, here, only in a row's
    ``flags``), the message says where to change it; a flag the recipe does not set itself (the row's batch sizes,
    the card's) gets no such pointer."""
    from megatron.oellm.cards import get_card
    from megatron.oellm.commands.recipe import where_to_set
    from megatron.oellm.recipes.resolve import ResolvedRow

    recipe = load_recipe(JUPITER)
    flag = random.choice(["split", "lr-warmup-iters", "eval-interval"])
    assert flag not in recipe.megatron_flags
    value = str(random.randint(1, 99))
    row = dataclasses.replace(recipe.rows[0], flags={flag: value})
    resolved = ResolvedRow(row, get_card(recipe.model), recipe.parallel, row.nodes * 4,
                           {flag: value, "micro-batch-size": row.micro_batch_size})
    assert where_to_set(f"ValueError: --{flag} {value!r} is refused", recipe, resolved) == (
        f" (a recipe sets --{flag} in its [megatron_flags] or a row's flags)")
    assert where_to_set(f"ValueError: --micro-batch-size {row.micro_batch_size} is refused", recipe, resolved) == ""


def test_select_rows_refuses_a_row_outside_the_table_and_both_selectors():
    """``select_rows`` is where ``--row`` is checked against the table (before the dry-run header is printed or any
    row resolved): a row past the last is refused naming the table's rows; ``--row`` with ``--nodes`` is refused."""
    from megatron.oellm.recipes.resolve import select_rows

    recipe = load_recipe(JUPITER)
    count = len(recipe.rows)
    number = random.randint(1, count)
    assert select_rows(recipe, number) == [number]
    with pytest.raises(RecipeError):
        select_rows(recipe, count + random.randint(1, 50))
    with pytest.raises(RecipeError, match=r"^give --row or --nodes, not both$"):
        select_rows(recipe, number, recipe.rows[0].nodes)

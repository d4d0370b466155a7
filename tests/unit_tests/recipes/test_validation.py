"""Bad layouts, batches and environments are refused before anything is submitted, with a message naming the fix."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from recipe_helpers import EXAMPLES

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.models.parallel import ParallelLayoutError
from megatron.oellm.recipes import RecipeError, load_recipe, resolve_row
from megatron.oellm.recipes.local import fit_local

BASE = EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"


def _qwen3_5():
    return load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")


def _with_row(recipe, **changes):
    return dataclasses.replace(recipe, rows=(dataclasses.replace(recipe.rows[1], **changes),))


def test_layout_with_too_few_layers_is_refused():
    recipe = _with_row(_qwen3_5(), parallel={"pipeline_layout": "Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*0L"})
    with pytest.raises(ParallelLayoutError, match=r"places 39 decoder layers.*has 40"):
        resolve_row(recipe, recipe.rows[0])


def test_layout_stages_not_matching_pp_times_vpp_are_refused():
    recipe = _with_row(_qwen3_5(), parallel={"pipeline_layout": "Et*6|t*6|t*6|t*6|t*6|t*6|t*4L"})
    with pytest.raises(ParallelLayoutError, match=r"7 stages, not a multiple of pp \(4\)"):
        resolve_row(recipe, recipe.rows[0])
    recipe = _with_row(_qwen3_5(), parallel={"vpp": 4})
    with pytest.raises(ParallelLayoutError, match="vpp=4"):
        resolve_row(recipe, recipe.rows[0])


def test_layers_not_dividing_pp_times_vpp_without_a_layout_are_refused():
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    recipe = _with_row(recipe, parallel={"pipeline_layout": None, "vpp": 4})
    with pytest.raises(ParallelLayoutError, match=r"num_layers \(94\) is not divisible by pp x vpp \(32\)"):
        resolve_row(recipe, recipe.rows[0])


def test_experts_not_dividing_ep_are_refused():
    recipe = _with_row(_qwen3_5(), parallel={"ep": 3})
    with pytest.raises(ParallelLayoutError, match="num_experts"):
        resolve_row(recipe, recipe.rows[0])


def test_global_batch_not_filling_the_data_parallel_ranks_is_refused():
    recipe = _with_row(_qwen3_5(), global_batch_size=4100)
    with pytest.raises(RecipeError, match=r"not divisible by micro batch \(4\) x data-parallel size \(8"):
        resolve_row(recipe, recipe.rows[0])


def test_tensor_parallel_on_hopper_needs_one_device_connection():
    recipe = _with_row(_qwen3_5(), parallel={"tp": 2, "sp": True})
    with pytest.raises(RecipeError, match="CUDA_DEVICE_MAX_CONNECTIONS=1"):
        resolve_row(recipe, recipe.rows[0])


@pytest.mark.parametrize("fsdp", ["use-megatron-fsdp", "use-torch-fsdp2"])
def test_tensor_parallel_with_fsdp_keeps_more_device_connections(fsdp):
    """megatron-core only warns about TP > 1 beside FSDP, whose own check refuses CUDA_DEVICE_MAX_CONNECTIONS=1: the
    recipe demanded 1, so no value of the variable let such a row through."""
    recipe = _with_row(_qwen3_5(), parallel={"tp": 2, "sp": True}, flags={fsdp: True})
    assert recipe.cluster.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    argv = resolve_row(recipe, recipe.rows[0]).argv
    assert f"--{fsdp}" in argv and argv[argv.index("--tensor-model-parallel-size") + 1] == "2"


def test_the_command_reports_a_bad_layout_as_an_error(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "bad"\n'
                      '[parallel]\npipeline_layout = "Et*10|t*10|t*10|t*9L"\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "oellm recipe: error:" in err and "places 39 decoder layers ('t'), the model has 40" in err


def test_unknown_rows_and_keys_are_refused(tmp_path, capsys):
    strong = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    assert main(["recipe", strong, "--row", "7"]) == 2
    assert "rows 1..6, not 7" in capsys.readouterr().err
    assert main(["recipe", strong, "--nodes", "3"]) == 2
    assert "no row on 3 nodes" in capsys.readouterr().err
    config = tmp_path / "typo.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "typo"\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_sise = 4\n')
    assert main(["recipe", str(config)]) == 2
    assert "micro_batch_sise" in capsys.readouterr().err
    config.write_text('title = "no cluster"\nmodel = "qwen3-30b-a3b"\nseq_length = 4096\ntrain_iters = 10\n')
    assert main(["recipe", str(config)]) == 2
    assert "the [cluster] table is missing" in capsys.readouterr().err


@pytest.mark.parametrize("flags, owner", [
    ({"pipeline-model-parallel-size": 8}, "parallel layout"),
    ({"num-virtual-stages-per-pipeline-rank": 4}, "parallel layout"),
    ({"global-batch-size": 100}, "row"),
    ({"seq-length": 8192}, "row"),
    ({"num-experts": 128}, "model card"),
])
def test_row_flags_that_contradict_the_recipe_are_refused(flags, owner):
    recipe = _with_row(_qwen3_5(), flags=flags)
    with pytest.raises(RecipeError, match=f"--{next(iter(flags))}.*{owner}"):
        resolve_row(recipe, recipe.rows[0])


def test_recipe_flags_that_contradict_the_layout_are_refused_and_restating_a_value_is_not():
    recipe = _qwen3_5()
    contradicting = dataclasses.replace(recipe, megatron_flags={**recipe.megatron_flags, "sequence-parallel": True})
    with pytest.raises(RecipeError, match=r"--sequence-parallel True in \[megatron_flags\] contradicts the parallel layout"):
        resolve_row(contradicting, contradicting.rows[0])
    restating = _with_row(recipe, flags={"pipeline-model-parallel-size": 4, "sequence-parallel": False})
    assert resolve_row(restating, restating.rows[0]).argv == resolve_row(recipe, recipe.rows[1]).argv


@pytest.mark.parametrize("flag, value", [
    ("moe-grouped-gemm", False),  # the spec builders always build grouped experts: an A/B row measured one model
    ("moe-aux-loss-coeff", 0.0),
    ("moe-router-load-balancing-type", "aux_loss"),
    ("max-position-embeddings", 8192),
    ("oellm-model", "qwen3-30b-a3b"),
])
def test_the_card_owns_every_flag_it_fills_in(flag, value):
    """The run builds the card ``--oellm-model`` names, and the training entry refuses a flag that contradicts it:
    a change is refused here, before a job waits in the queue."""
    recipe = _qwen3_5()
    changed = dataclasses.replace(recipe, megatron_flags={**recipe.megatron_flags, flag: value})
    with pytest.raises(RecipeError, match=rf"--{flag} .* contradicts the model card"):
        resolve_row(changed, changed.rows[0])


def test_a_hybrid_pattern_without_the_layouts_stages_is_refused_and_the_staged_one_restates_it():
    """A hybrid model's ``--hybrid-layer-pattern`` is the card's layers with the layout's ``|`` stages in it, so both
    the card and the layout set it: the layout's (the later group) is the one a row must match. Matched against the
    card's, a row restating the card's pattern replaced the staged one, and the job ran megatron-core's even pipeline
    split instead of the report's layout that was validated and planned (megatron-core accepts either)."""
    recipe = _qwen3_5()
    staged = resolve_row(recipe, recipe.rows[1]).flags["hybrid-layer-pattern"]
    # the report's layout Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L: 8 stages of 6, 6, 6, 3, 6, 6, 6, 1 decoder layers, each
    # a mixer symbol and an MoE symbol
    assert [len(stage) for stage in staged.split("|")] == [2 * n for n in (6, 6, 6, 3, 6, 6, 6, 1)]
    unstaged = _with_row(recipe, flags={"hybrid-layer-pattern": staged.replace("|", "")})
    with pytest.raises(RecipeError, match=r"--hybrid-layer-pattern .* contradicts the parallel layout .*\|"):
        resolve_row(unstaged, unstaged.rows[0])
    restating = _with_row(recipe, flags={"hybrid-layer-pattern": staged})
    assert resolve_row(restating, restating.rows[0]).argv == resolve_row(recipe, recipe.rows[1]).argv


def test_pipeline_placement_may_not_change():
    recipe = _qwen3_5()
    for flag, value in (("decoder-first-pipeline-num-layers", 2), ("account-for-loss-in-pipeline-split", True)):
        placed = dataclasses.replace(recipe, megatron_flags={**recipe.megatron_flags, flag: value})
        with pytest.raises(RecipeError, match=rf"--{flag} .* contradicts the parallel layout"):
            resolve_row(placed, placed.rows[0])


def test_tokenizer_without_data_and_negative_save_interval_are_refused(capsys):
    strong = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    assert main(["recipe", strong, "--row", "1", "--tokenizer-model", "byte"]) == 2
    assert "--tokenizer-model needs --data-path" in capsys.readouterr().err
    assert main(["recipe", strong, "--row", "1", "--save-interval", "-5"]) == 2
    assert "--save-interval must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["--dry-run", "--submit", "--local"])
def test_object_storage_data_is_refused_with_what_to_do_instead(mode, tmp_path, capsys):
    """An ``s3://`` / ``msc://`` prefix used to be refused as a container bind source ``<cwd>/s3:/bucket`` with ':'
    in it, a message about a directory the user never named. The message now names the prefixes and the way out;
    a file-system prefix beside them is not named."""
    local = tmp_path / "corpus_text_document"
    image = tmp_path / "oellm.sif"
    image.write_bytes(b"")
    strong = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml")
    cluster = [] if mode == "--local" else ["--image", str(image), "--output-dir", str(tmp_path / "runs")]
    assert main(["recipe", strong, "--row", "1", mode, *cluster, "--tokenizer-model", "byte", "--data-path",
                 "0.3", str(local), "0.7", "s3://bucket/web_text_document", "0.1", "msc://profile/code"]) == 2
    err = capsys.readouterr().err
    assert "--data-path s3://bucket/web_text_document msc://profile/code: the recipes read datasets from the file " \
           "system the compute nodes share" in err
    assert "--object-storage-cache-path" in err and str(local) not in err and "bind source" not in err


def _two_row_config(tmp_path, table: str, second_row: str):
    """A recipe "types" on the Qwen3.5 MN5 base with ``table`` (TOML text before the rows), one valid row and a second
    row of the keys ``second_row`` writes."""
    config = tmp_path / "types.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "types"\n{table}'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n'
                      f'[[rows]]\n{second_row}')
    return config


@pytest.mark.parametrize("table, row, message", [
    ('[cluster]\nbinds = "/scratch"\n', "", "binds = '/scratch' is not an array of strings"),
    ('[cluster]\ngpus_per_node = "4"\n', "", "gpus_per_node = '4' is not an integer"),
    ('seq_length = "4096"\n', "", "seq_length = '4096' is not an integer"),
    ("", "nodes = true\n", "row 2: nodes = True is not an integer"),
    ("", 'label = 5\n', "row 2: label = 5 is not a string"),
    ("", 'reference = { note = "x" }\n', "row 2: reference.note = 'x' is not a number"),
    ("", 'parallel = { ep = "4" }\n', "row 2: parallel ep = '4' is not an integer"),
    ("", "flags = { lr = { value = 1 } }\n", "lr = {'value': 1} in row 2's flags is not a boolean or number or "
                                         "string or array of values"),
    ("[cluster.env]\nNCCL_MIN_NCHANNELS = 4\n", "",
     '[cluster.env]: NCCL_MIN_NCHANNELS = 4 is not a string; quote it (NCCL_MIN_NCHANNELS = "4")'),
])
def test_values_of_the_wrong_type_are_refused_with_the_field_named(tmp_path, capsys, table, row, message):
    second = f"global_batch_size = 4096\nmicro_batch_size = 4\n{row}" + ("" if row.startswith("nodes") else "nodes = 8\n")
    assert main(["recipe", str(_two_row_config(tmp_path, table, second)), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_an_unquoted_toml_time_is_the_jobs_time_limit(tmp_path, capsys):
    config = tmp_path / "time.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "t"\n[cluster]\ntime = 00:40:00\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\ntime = 01:10:00\n')
    assert main(["recipe", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --time=00:40:00" in out and "#SBATCH --time=01:10:00" in out


@pytest.mark.parametrize("flags, message", [
    ({"moe_router_force_load_balancing": False},
     "'moe_router_force_load_balancing' in the row's flags is not an option of the training entry "
     "(megatron-core 0.19.2's flags and --oellm-*) (did you mean 'moe-router-force-load-balancing'?)"),
    ({"moe-router-force-load-balacing": False}, "(did you mean 'moe-router-force-load-balancing'?)"),
    ({"overlap-p2p-communication": False}, "(did you mean 'no-overlap-p2p-communication'?)"),
    ({"manual-gcc": False}, "'manual-gcc' in the row's flags is not an option of the training entry"),
])
def test_a_wrong_flag_name_is_refused_even_with_the_value_false(flags, message):
    """flags_to_argv leaves a false out of the argv, so no parser ever saw the name: a misspelt removal vanished and
    the base's flag (here --moe-router-force-load-balancing) stayed on."""
    recipe = _with_row(_qwen3_5(), flags=flags)
    with pytest.raises(RecipeError, match=re.escape(message)):
        resolve_row(recipe, recipe.rows[0])


def test_a_wrong_flag_name_in_the_recipe_is_refused_for_local_runs_too():
    from megatron.oellm.recipes.local import fit_local

    recipe = _qwen3_5()
    recipe = dataclasses.replace(recipe, megatron_flags={**recipe.megatron_flags, "manual_gc": False})
    with pytest.raises(RecipeError, match=r"'manual_gc' in \[megatron_flags\] is not an option.*'manual-gc'"):
        fit_local(recipe, recipe.rows[0], gpus=1)


def test_false_removes_a_store_true_flag_the_base_turned_on(parse_megatron):
    recipe = _qwen3_5()
    assert recipe.megatron_flags["moe-router-force-load-balancing"] is True
    base = resolve_row(recipe, recipe.rows[1]).argv
    real = _with_row(recipe, flags={"moe-router-force-load-balancing": False, "manual-gc-interval": False})
    argv = resolve_row(real, real.rows[0]).argv
    assert "--moe-router-force-load-balancing" in base and "--moe-router-force-load-balancing" not in argv
    assert "--manual-gc-interval" not in argv
    args = parse_megatron(argv)
    assert not args.moe_router_force_load_balancing and args.manual_gc_interval == 0


def test_false_for_one_spelling_of_a_setting_another_spelling_sets_is_refused():
    """megatron-core has aliases (--override-opt_param-scheduler / --override-opt-param-scheduler): leaving one out
    of the argv does not remove the setting the other still makes."""
    recipe = _qwen3_5()
    recipe = dataclasses.replace(recipe, megatron_flags={**recipe.megatron_flags,
                                                         "override-opt-param-scheduler": True})
    recipe = _with_row(recipe, flags={"override-opt_param-scheduler": False})
    with pytest.raises(RecipeError, match=r"--override-opt_param-scheduler = false removes the flag, but "
                                          r"--override-opt-param-scheduler .* still sets 'override_opt_param_scheduler'"):
        resolve_row(recipe, recipe.rows[0])


def test_tensor_parallelism_without_sequence_parallelism_is_refused_for_the_moe_cards():
    """megatron-core's MoELayer raises at the first forward step; parser and validate_args accept it."""
    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    recipe = _with_row(recipe, parallel={"sp": False})
    with pytest.raises(ParallelLayoutError, match="tp=2 without sequence parallelism: qwen3-235b-a22b is an MoE"):
        resolve_row(recipe, recipe.rows[0])


@pytest.mark.parametrize("flag", ['data-path = ["/gpfs/corpus_text_document"]', 'tokenizer-model = "/tok"',
                                  'train-data-path = ["/gpfs/train"]'])
def test_a_data_source_as_a_megatron_flag_is_refused(tmp_path, capsys, flag):
    """It ended up beside --mock-data (megatron's validate_args: a single data source); --data-path is the way."""
    config = tmp_path / "data.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_5_35b_a3b_mn5_routing.toml"}"\n[megatron_flags]\n{flag}\n')
    assert main(["recipe", str(config), "--row", "1", "--dry-run"]) == 2
    name = flag.split(" = ")[0]
    assert (f"--{name} " in (err := capsys.readouterr().err)
            and "contradicts the run inputs (--data-path, --tokenizer-model), which leaves it unset" in err)


@pytest.mark.parametrize("top, row, message", [
    ("vocab_size = 0\n", "", "recipe zero: vocab_size must be >= 1, got 0; leave it out for the default"),
    ("", "seq_length = 0\n", "recipe zero row 1: seq_length must be >= 1, got 0; leave it out for the default"),
    ("", "train_iters = 0\n", "recipe zero row 1: train_iters must be >= 1, got 0; leave it out for the default"),
    ("", "train_iters = -3\n", "recipe zero row 1: train_iters must be >= 1, got -3"),
    ("train_iters = 0\n", "", "recipe zero: train_iters must be >= 1, got 0"),
    ("[local]\nnum_experts = -1\n", "", "recipe zero [local]: num_experts must be >= 0"),
    ("", "reference = { step_time_s = 0 }\n", "recipe zero row 1: reference step_time_s = 0 must be a positive finite"),
    ("", "reference = { step_time_s = nan }\n", "recipe zero row 1: reference step_time_s = nan must be a positive"),
    ("", "reference = { tflops_per_gpu = inf }\n", "recipe zero row 1: reference tflops_per_gpu = inf must be a positive"),
])
def test_zero_and_negative_values_are_refused_not_replaced_by_a_default(tmp_path, capsys, top, row, message):
    """``x or default`` turned a recipe's vocab_size = 0 into the card's and a row's 0 into the recipe's."""
    config = tmp_path / "zero.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "zero"\n{top}'
                      f'[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n{row}')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_false_drops_a_pipeline_layout_the_base_set(tmp_path, capsys):
    config = tmp_path / "uniform.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "uniform vpp"\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n'
                      'parallel = { pipeline_layout = false, vpp = 2 }\n')
    recipe = load_recipe(config)
    assert recipe.parallel.pipeline_layout is not None
    resolved = resolve_row(recipe, recipe.rows[0])
    assert resolved.layout.pipeline_layout is None
    assert resolved.flags["pipeline-model-parallel-layout"] is None
    assert resolved.flags["num-virtual-stages-per-pipeline-rank"] == 2
    assert main(["recipe", str(config), "--dry-run"]) == 0
    assert "--num-virtual-stages-per-pipeline-rank 2" in capsys.readouterr().out


@pytest.mark.parametrize("override, message", [
    ("ep = false", "parallel ep = False is not an integer"),
    ("pipeline_layout = 4", "parallel pipeline_layout = 4 is not a string; write false to drop it"),
])
def test_false_is_refused_where_there_is_nothing_to_drop(tmp_path, capsys, override, message):
    config = tmp_path / "bad.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "bad"\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 1024\nmicro_batch_size = 4\n'
                      f'parallel = {{ {override} }}\n')
    assert main(["recipe", str(config), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_every_row_names_its_card_so_the_run_builds_the_planned_one():
    """Without ``--oellm-model`` the entry rebuilds the card from Megatron's flags, which cannot carry every card
    field: the CKDA card could not be rebuilt ("ckda needs linear_gate_low_rank_dim > 0")."""
    from megatron.oellm.training.args import merge_card_flags

    for stem, number in (("qwen3_5_35b_a3b_mn5_strong", 1), ("qwen3_30b_a3b_mn5", 1), ("oellm_ckda_hybrid_mn5", 3)):
        recipe = load_recipe(EXAMPLES / f"{stem}.toml")
        resolved = resolve_row(recipe, recipe.row(number))
        assert resolved.argv[:2] == ["--oellm-model", recipe.model]
        merged = merge_card_flags(resolved.argv)  # what the entry does first; raises on a contradicting flag
        assert merged is not None and merged.argv == resolved.argv  # the recipe already gives every card flag
        assert dataclasses.replace(merged.card, seq_length=resolved.card.seq_length) == resolved.card


def test_a_card_the_registry_does_not_hold_is_not_named():
    """A local proxy with fewer experts has a registry name but not that card: naming it would build another."""
    from megatron.oellm.recipes.resolve import card_name_flag

    recipe = _qwen3_5()
    card = get_card(f"{recipe.model}-proxy-4L")
    assert card_name_flag(card) == {"oellm-model": card.name}
    assert card_name_flag(dataclasses.replace(card, num_experts=32)) == {"oellm-model": None}
    assert card_name_flag(dataclasses.replace(card, name="not-registered")) == {"oellm-model": None}
    local = fit_local(recipe, recipe.rows[0], 1)
    assert "--oellm-model" not in local.argv and local.card.num_experts == recipe.local.num_experts


@pytest.mark.parametrize("flag, message", [
    ("dataloader-inter-document-masking", "document masking is not wired"),
    ("reset-attention-mask", "the per-document attention mask it makes is not honoured"),
])
def test_unwired_data_flags_are_refused_on_any_row(tmp_path, capsys, flag, message):
    """Megatron's parser and validate_args accept the flags, but nothing builds document boundaries into the run."""
    config = tmp_path / "masked.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"}"\n'
                      f'[megatron_flags]\n{flag} = true\n')
    assert main(["recipe", str(config), "--row", "1"]) == 2
    assert f"row 1: --{flag}: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [
    ("extends = 5\n", "extends = 5 is not a string; give the base config's path"),
    (f'extends = "{BASE}"\ncluster = "x"\n', "cluster = 'x' is not a table; write it as [cluster]"),
    (f'extends = "{BASE}"\nparallel = 5\n', "parallel = 5 is not a table; write it as [parallel]"),
    (f'extends = "{BASE}"\nlocal = 5\n', "local = 5 is not a table; write it as [local]"),
])
def test_a_value_where_a_table_or_path_goes_is_an_error_not_a_traceback(tmp_path, capsys, text, message):
    """``extends``, ``cluster`` and top-level ``parallel`` raised TypeError, ValueError and AttributeError from the
    config reader (rc 1, a traceback); ``local`` gets the same message."""
    config = tmp_path / "bad.toml"
    config.write_text(text + 'title = "bad"\n[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n')
    assert main(["recipe", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm recipe: error:") and message in err


@pytest.mark.parametrize("base", ["_qwen3_5_35b_a3b_mn5", "_qwen3_235b_a22b_jupiter", "_mn5"])
def test_a_shared_base_run_as_a_recipe_is_named_as_one(base, capsys):
    """The examples' _*.toml are bases for recipes to extend; running one printed Python's "Recipe.__init__() missing
    1 required positional argument: 'title'"."""
    assert main(["recipe", str(EXAMPLES / f"{base}.toml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"recipe {base}: title" in err and f"{base} is a shared base (its name starts with '_'): run a recipe " \
        "that extends it" in err and "__init__" not in err, err


@pytest.mark.parametrize("table, row, message", [
    ("", "nodez = 8\n", "recipe types row 2: unknown key 'nodez' (did you mean 'nodes'?)"),
    ("", "frobnicate = 1\n", "recipe types row 2: unknown key 'frobnicate' (the keys are env, flags, global_batch_size"),
    ("[cluster]\ngpus_per_nod = 4\n", "", "recipe types [cluster]: unknown key 'gpus_per_nod' (did you mean "
                                          "'gpus_per_node'?)"),
    ("[local]\nnum_layer = 2\n", "", "recipe types [local]: unknown key 'num_layer' (did you mean 'num_layers'?)"),
    ("sequence_length = 4096\n", "", "recipe types: unknown key 'sequence_length' (did you mean 'seq_length'?)"),
    ("[parallel]\nttp = 2\n", "", "recipe types [parallel]: unknown key 'ttp' (did you mean 'tp'?)"),
    ("", "DELETE", "recipe types row 2: global_batch_size not set"),
])
def test_unknown_and_missing_keys_are_named_as_the_config_writes_them(tmp_path, capsys, table, row, message):
    """A misspelt or missing key of a row, ``[cluster]``, ``[local]`` or the recipe itself printed Python's
    ``TableRow.__init__() got an unexpected keyword argument 'nodez'`` (or ``missing 1 required positional
    argument``); the message now names the table, the key and the closest known one."""
    second = "micro_batch_size = 4\nnodes = 8\n" if row == "DELETE" else \
        f"global_batch_size = 4096\nmicro_batch_size = 4\n{row}" + ("" if "nodez" in row else "nodes = 8\n")
    assert main(["recipe", str(_two_row_config(tmp_path, table, second)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "__init__" not in err and err.count("\n") == 1, err


def test_a_folder_given_as_the_config_lists_its_recipes(tmp_path, capsys):
    """``oellm recipe examples/oellm`` said the config "does not exist" although the folder does; it now names the
    recipes in it (not the ``_*.toml`` bases), or that it holds none."""
    names = sorted(f"r{random.randrange(10**6)}-{i}.toml" for i in range(3))
    for name in [*names, "_base.toml"]:
        (tmp_path / name).write_text("")
    assert main(["recipe", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"oellm recipe: error: recipe config {tmp_path} is a folder; name one of its "
                                       f"configs: {', '.join(names)}\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["recipe", str(empty)]) == 2
    assert "is a folder; name a config; it holds no .toml recipe" in capsys.readouterr().err


def test_a_hybrid_cards_layer_count_given_as_a_flag_says_how_megatron_counts_layers(tmp_path, capsys):
    """``num-layers = 40`` on the 40-layer Qwen3.5 card was refused as contradicting "80" with no word on why:
    megatron counts the mixer and the MoE block of each layer as one layer each; the message now says so."""
    card = get_card("qwen3.5-35b-a3b")
    config = tmp_path / "layers.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"}"\n[megatron_flags]\n'
                      f"num-layers = {card.num_layers}\n")
    assert main(["recipe", str(config), "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert f"--num-layers {card.num_layers} in [megatron_flags] contradicts the model card" in err
    assert f"which sets it to {2 * card.num_layers} (megatron counts each symbol of the hybrid pattern " \
           f"{card.hybrid_layer_pattern!r} as a layer: {card.num_layers} mixer and {card.num_layers} MoE layers)" in err

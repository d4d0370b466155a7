"""``oellm recipe`` end to end: dry-run output, the .sh wrappers from a bare checkout, the entry's card read-back."""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_helpers import EXAMPLES, fake_sbatch

from megatron.oellm.cli import main
from megatron.oellm.recipes import load_recipe, resolve_row
from megatron.oellm.training.card_from_args import card_from_megatron_args


def test_dry_run_lists_rows_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("layout ok") == 6 and out.count("#!/bin/bash") == 6
    assert "tokens_per_s_per_gpu 6971" in out and "Et*6|t*6|t*6|t*3|t*6|t*6|t*6|t*1L" in out
    assert list(tmp_path.iterdir()) == []


def test_dry_run_prints_the_report_numbers_as_the_config_writes_them(tmp_path, capsys):
    """A reference number is shown as the TOML holds it: ``118.0`` stayed ``118`` and a large or precise value lost
    digits to ``:g`` (``1234567`` printed as ``1.23457e+06``)."""
    rng = random.Random(random.random())
    tflops = round(rng.uniform(100, 200), 1) // 1 + 0.0  # a whole number written as a float
    tokens = rng.randint(1_000_000, 9_999_999)
    config = tmp_path / "written.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "written"\n[[rows]]\n'
                      'nodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n'
                      f'reference = {{ tokens_per_s_per_gpu = {tokens}, tflops_per_gpu = {tflops!r} }}\n')
    assert main(["recipe", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"[report: tokens_per_s_per_gpu {tokens}, tflops_per_gpu {tflops!r}]" in out
    assert f"from the report's tokens_per_s_per_gpu {tokens}" in out


def test_wrapper_runs_from_a_checkout_without_install(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHON"] = sys.executable
    done = subprocess.run(["bash", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_attention.sh"), "--row", "2",
                           "--account", "ehpc533"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "--attention-backend auto" in done.stdout and "#SBATCH --account=ehpc533" in done.stdout
    assert done.stderr == ""  # megatron-core's import warnings of a machine without TE or Apex: 22 lines before


@pytest.mark.parametrize("stem", ["qwen3_5_35b_a3b_mn5_strong", "qwen3_30b_a3b_mn5", "qwen3_235b_a22b_jupiter"])
def test_training_entry_reads_back_the_recipes_card(stem, parse_megatron):
    """The entry rebuilds the card from the emitted flags (no --oellm-model): it must be the recipe's card."""
    recipe = load_recipe(EXAMPLES / f"{stem}.toml")
    resolved = resolve_row(recipe, recipe.rows[-1])
    rebuilt = card_from_megatron_args(parse_megatron(resolved.argv))
    ignore = {"name", "sources", "hf_architecture"}
    expected = {f.name: getattr(resolved.card, f.name) for f in dataclasses.fields(resolved.card) if f.name not in ignore}
    assert {name: getattr(rebuilt, name) for name in expected} == expected


def test_submit_writes_one_job_per_selected_row(tmp_path, monkeypatch, capsys):
    fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    config = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml")
    image = tmp_path / "image.sif"
    image.touch()
    assert main(["recipe", config, "--submit", "--nodes", "16", "--output-dir", str(tmp_path / "runs"),
                 "--account", "ehpc533", "--save-interval", "5", "--image", str(image)]) == 0
    job = tmp_path / "runs" / "qwen3_5_35b_a3b_mn5_weak" / "row03-16n" / "job.sbatch"
    script = job.read_text()
    assert "#SBATCH --nodes=16" in script and "#SBATCH --account=ehpc533" in script
    assert '--save "$CHECKPOINT_DIR"' in script and '--load "$CHECKPOINT_DIR"' in script
    assert 'CHECKPOINT_DIR="$RUN_DIR/checkpoints/job-$SLURM_JOB_ID"' in script and "--save-interval 5" in script
    assert capsys.readouterr().out.strip().splitlines()[-2] == f"row 3: Submitted batch job 7 ({job.parent})"
    assert len(list((tmp_path / "runs").rglob("job.sbatch"))) == 1


def test_a_bad_row_stops_the_submission_before_any_row_is_submitted(tmp_path, monkeypatch, capsys):
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    config = tmp_path / "partial.toml"
    config.write_text(f'extends = "{EXAMPLES / "_qwen3_5_35b_a3b_mn5.toml"}"\ntitle = "partial"\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4096\nmicro_batch_size = 4\n'
                      '[[rows]]\nnodes = 8\nglobal_batch_size = 4100\nmicro_batch_size = 4\n')
    assert main(["recipe", str(config), "--submit", "--image", str(image), "--output-dir", str(tmp_path / "runs")]) == 2
    assert "row 2: global batch 4100 is not divisible" in capsys.readouterr().err
    assert not record.exists() and not (tmp_path / "runs").exists()


def test_submit_refuses_an_image_that_does_not_exist(tmp_path, monkeypatch, capsys):
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    config = str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml")
    missing = tmp_path / "no such.sif"
    assert main(["recipe", config, "--submit", "--row", "1", "--image", str(missing),
                 "--output-dir", str(tmp_path / "runs")]) == 2
    assert f"image {str(missing)!r} does not exist" in capsys.readouterr().err
    assert not record.exists()
    assert main(["recipe", config, "--dry-run", "--row", "1", "--image", str(missing)]) == 0


@pytest.mark.parametrize(("flag", "message"), [
    ('atention-backend = "flash"', "{config}: 'atention-backend' in [megatron_flags] is not an option of the training "
                                   "entry (megatron-core 0.19.2's flags and --oellm-*) (did you mean "
                                   "'attention-backend'?)"),
    ('attention-backend = "flashy"', "row 1: Megatron's argument parser would stop the job at start: invalid value "
                                     "'flashy' for --attention-backend"),
    ("help = true", "row 1: Megatron's argument parser would stop the job at start: --help asks for the help page: "
                    "the job would print it and exit without training"),
    ('recompute-granularity = "selective"', "row 1: the training entry would stop the job at start: AssertionError: "
                                            "recompute method is not yet supported for selective recomputing "
                                            "granularity"),
    ("lr = -1.0", "row 1: the training entry would stop the job at start: AssertionError: assert args.min_lr <= "
                  "args.lr"),
])
def test_a_flag_megatron_would_refuse_at_job_start_is_refused_before_submission(tmp_path, monkeypatch, capsys, flag,
                                                                               message):
    """A misspelt name (named with its file, at load), a value outside the choices, a combination megatron's
    validate_args refuses (selective recompute beside the base's recompute-method), a value one of its message-less
    asserts refuses (named by the assert statement, not a bare ``AssertionError``): each would stop the job at start,
    after the queue."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    config = tmp_path / "typo.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_5_35b_a3b_mn5_strong.toml"}"\n[megatron_flags]\n{flag}\n')
    for mode in (["--dry-run"], ["--submit", "--image", str(image), "--output-dir", str(tmp_path / "runs")]):
        assert main(["recipe", str(config), "--row", "1", *mode]) == 2
        assert message.format(config=config) in capsys.readouterr().err
    assert not record.exists() and not (tmp_path / "runs").exists()


def test_submit_refuses_a_model_without_spec_builder_but_dry_run_prints_it(tmp_path, monkeypatch, capsys):
    """The CKDA jobs were queued and died in validate_args ("'K' is not a valid layer symbol")."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    config = str(EXAMPLES / "oellm_ckda_hybrid_mn5.toml")
    assert main(["recipe", config, "--submit", "--image", str(image), "--output-dir", str(tmp_path / "runs")]) == 2
    assert ("--submit: the spec builder of model family 'ckda_hybrid' (megatron/oellm/models/ckda_hybrid) does not "
            "exist yet, so every job would stop in megatron's validate_args") in capsys.readouterr().err
    assert not record.exists() and not (tmp_path / "runs").exists()
    assert main(["recipe", config, "--dry-run", "--row", "3"]) == 0
    out = capsys.readouterr().out
    assert "--submit refuses this recipe" in out and out.count("#!/bin/bash") == 1


def test_the_byte_tokenizer_vocabulary_is_the_one_the_header_and_plan_show(capsys):
    """--tokenizer-model byte trains a 257-token vocabulary (padded to 384): the plan counted the recipe's 262,144."""
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_routing.toml"), "--row", "1", "--data-path",
                 "/data/corpus", "--tokenizer-model", "byte"]) == 0
    out = capsys.readouterr().out
    assert "model qwen3.5-35b-a3b (vocab 257: the byte tokenizer's, instead of the recipe's)" in out
    assert "vocab 384)" in out and "vocab 262144" not in out and "logits 0.00" in out
    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_routing.toml")
    from megatron.oellm.recipes import RunInputs

    resolved = resolve_row(recipe, recipe.rows[0], RunInputs(("/data/corpus",), "byte"))
    assert resolved.card.vocab_size == 257 and resolved.built_card.vocab_size == 384
    assert resolved.argv.count("--vocab-size") == 1 and resolved.argv[resolved.argv.index("--vocab-size") + 1] == "257"


DOCUMENTS = 600
"""Enough documents for megatron's default split 969,30,1 to give its test split one (500 would leave it none)."""


def _dataset(directory, documents: int = DOCUMENTS):
    """A Megatron dataset prefix of ``documents`` short byte documents built in ``directory``."""
    from megatron.oellm.training.corpus import build_corpus

    directory.mkdir(parents=True)
    texts = []
    for number in range(documents):
        texts.append(directory / f"doc{number}.txt")
        texts[-1].write_text(f"document {number} {random.random()}")
    return Path(build_corpus(texts, directory / "corpus").prefix)


def test_submit_refuses_a_split_that_leaves_a_dataset_split_empty(tmp_path, monkeypatch, capsys):
    """megatron-core builds every split --split gives a share and hangs on one without a sequence; the training entry
    refuses it at start, and --submit now before the job waits in the queue (the default 969,30,1 on 400
    documents leaves the test split empty). Enough documents pass."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    submit = ["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml"), "--submit", "--row", "1", "--image",
              str(image), "--output-dir", str(tmp_path / "runs"), "--tokenizer-model", "byte"]
    small = _dataset(tmp_path / "small", documents=random.randint(100, 400))
    assert main([*submit, "--data-path", str(small)]) == 2
    err = capsys.readouterr().err
    assert "the training entry would stop the job at start: ValueError: --split '969, 30, 1' leaves the test split of " \
           f"dataset {str(small)!r}" in err, err
    # the message says to give another --split, which oellm recipe has no option for: it says where a recipe sets it
    assert err.endswith("larger datasets (a recipe sets --split in its [megatron_flags] or a row's flags)\n"), err
    assert not record.exists() and not (tmp_path / "runs").exists()
    assert main([*submit, "--data-path", str(_dataset(tmp_path / "large"))]) == 0


def test_submit_checks_the_data_path_and_binds_its_directory(tmp_path, monkeypatch, capsys):
    """The job was queued with a --data-path that did not exist, and the data was not visible in the container."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    submit = ["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml"), "--submit", "--row", "1", "--image",
              str(image), "--output-dir", str(tmp_path / "runs"), "--tokenizer-model", str(tokenizer)]
    missing = tmp_path / "nowhere" / "corpus"
    assert main([*submit, "--data-path", str(missing)]) == 2
    assert f"--data-path prefix {str(missing)!r}: '{missing}.bin' and '{missing}.idx' not found" in \
        capsys.readouterr().err
    assert not record.exists()
    first, second = _dataset(tmp_path / "a"), _dataset(tmp_path / "b")
    assert main([*submit, "--data-path", "0.7", str(first), "0.3", str(second)]) == 0
    script = (tmp_path / "runs" / "qwen3_5_35b_a3b_mn5_weak" / "row01-4n" / "job.sbatch").read_text()
    apptainer = next(line for line in script.splitlines() if "apptainer exec --nv" in line)
    for directory in (tmp_path / "a", tmp_path / "b", tokenizer):
        assert f"--bind {directory} " in apptainer


def test_a_refusal_about_a_flag_the_row_sets_does_not_send_the_user_to_the_megatron_flags(tmp_path, capsys):
    """A row's ``seq_length`` beyond the card's positions is refused by the entry's check of ``--seq-length``; the
    hint "a recipe sets --seq-length in [megatron_flags]" would be refused in turn (the row owns the flag), so none
    is given and the message's own fix stands."""
    config = tmp_path / "long.toml"
    config.write_text(f'extends = "{EXAMPLES / "qwen3_30b_a3b_mn5.toml"}"\ntitle = "long"\n[[rows]]\nnodes = 8\n'
                      f"global_batch_size = 1024\nmicro_batch_size = 1\nseq_length = {2**random.randint(17, 20)}\n")
    assert main(["recipe", str(config), "--row", "1"]) == 2
    err = capsys.readouterr().err
    assert "exceeds model card qwen3-30b-a3b's max_position_embeddings" in err and "[megatron_flags]" not in err, err


@pytest.mark.filterwarnings("error:Could not determine rank")
def test_submit_checks_the_data_as_rank_0_without_megatrons_rank_warning(tmp_path, monkeypatch, capsys):
    """The data check of ``--submit`` ran outside the cluster-rank context, so megatron-core's dataset code warned
    "Could not determine rank ... Defaulting to rank 0" on the login node (here that warning is an error)."""
    fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml"), "--submit", "--row", "1", "--image",
                 str(image), "--output-dir", str(tmp_path / "runs"), "--tokenizer-model", "byte", "--data-path",
                 str(_dataset(tmp_path / "data"))]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("written", ["absolute", "./", "../"])
def test_submit_refuses_a_tokenizer_path_that_does_not_exist(written, tmp_path, monkeypatch, capsys):
    """A ``--tokenizer-model`` written as a path that does not exist was taken for a Hugging Face hub name: the job
    was queued, unbound, and stopped at its first tokenizer call. A hub name (``org/name``) still goes through."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    monkeypatch.chdir(tmp_path)
    corpus = _dataset(tmp_path / "data")
    name = f"tok-{random.randrange(10**6)}"
    tokenizer = {"absolute": str(tmp_path / name), "./": f"./{name}", "../": f"../{tmp_path.name}/{name}"}[written]
    submit = ["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml"), "--submit", "--row", "1", "--image",
              str(image), "--output-dir", str(tmp_path / "runs"), "--data-path", str(corpus)]
    assert main([*submit, "--tokenizer-model", tokenizer]) == 2
    assert f"--tokenizer-model {tokenizer!r} does not exist (relative to {tmp_path})" in capsys.readouterr().err
    assert not record.exists() and not (tmp_path / "runs").exists()
    (tmp_path / name).mkdir()
    (tmp_path / name / "tokenizer_config.json").write_text("{}")
    assert main([*submit, "--tokenizer-model", tokenizer]) == 0
    assert main([*submit, "--tokenizer-model", "Qwen/Qwen3-30B-A3B"]) == 0


@pytest.mark.parametrize("order", ["weight after its prefix", "lone weight"])
def test_submit_checks_every_entry_megatron_reads_as_a_data_prefix(order, tmp_path, monkeypatch, capsys):
    """A weight written after its prefix (or alone) is a dataset prefix to megatron-core, which has no such files:
    --submit skipped every number in the list and queued a job that stopped at start."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    corpus = _dataset(tmp_path / "a")
    weight = f"{random.uniform(0.1, 0.9):.3f}"
    data_path = [str(corpus), weight] if order == "weight after its prefix" else [weight]
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml"), "--submit", "--row", "1", "--image",
                 str(image), "--output-dir", str(tmp_path / "runs"), "--tokenizer-model", "byte", "--data-path",
                 *data_path]) == 2
    err = capsys.readouterr().err
    assert f"--data-path prefix {weight!r}: '{weight}.bin' and '{weight}.idx' not found" in err
    assert "write each weight before its prefix" in err
    assert not record.exists() and not (tmp_path / "runs").exists()


def test_an_input_directory_that_a_bind_cannot_carry_is_refused(tmp_path):
    from megatron.oellm.recipes import RecipeError, RunInputs, sbatch_text

    recipe = load_recipe(EXAMPLES / "qwen3_5_35b_a3b_mn5_weak.toml")
    resolved = resolve_row(recipe, recipe.rows[0], RunInputs((str(tmp_path / "a:b" / "corpus"),), "byte"))
    with pytest.raises(RecipeError, match=r"container --bind \(Apptainer, Singularity\) cannot carry"):
        sbatch_text(recipe, 1, resolved, tmp_path / "run")


def test_a_run_directory_that_cannot_be_created_stops_the_submission_before_any_row(tmp_path, monkeypatch, capsys):
    """Row 1 was queued, then row 2's directory (a file in the way, no permission) ended in a traceback."""
    record = fake_sbatch(tmp_path, monkeypatch, "Submitted batch job 7")
    image = tmp_path / "image.sif"
    image.touch()
    blocked = tmp_path / "runs" / "qwen3_5_35b_a3b_mn5_attention" / "row02-4n"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a directory")
    assert main(["recipe", str(EXAMPLES / "qwen3_5_35b_a3b_mn5_attention.toml"), "--submit", "--nodes", "4",
                 "--image", str(image), "--output-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert f"oellm recipe: error: cannot create the run directory {str(blocked)!r}" in err
    assert "pass --output-dir DIR" in err and not record.exists()


def test_a_dry_run_notes_each_row_whose_flex_dispatcher_crosses_nodes(capsys):
    """HybridEP and DeepEP reach other nodes only in a DeepEP built for RDMA, which the Dockerfile's default hybridep
    build is not: the Jupiter rows (ep 16 and 32 on 4-GPU nodes) get a ``note:`` naming what each backend's build
    needs, the MN5 rows (expert groups within a node) none."""
    assert main(["recipe", str(EXAMPLES / "qwen3_235b_a22b_jupiter.toml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    rows = out.count("\n-- row ")
    notes = [line for line in out.splitlines() if line.startswith("note: the ") and "expert-parallel group" in line]
    assert rows > 0 and len(notes) == rows, (rows, notes)
    for note in notes:  # what each backend's build needs to cross nodes
        assert ("--build-arg HYBRID_EP_MULTINODE=1" in note) == note.startswith("note: the hybridep "), note
        assert ("NVSHMEM" in note) == note.startswith("note: the deepep "), note
    assert "note: the hybridep expert-parallel group (16 GPUs) spans 4 nodes of 4 GPUs" in out
    assert main(["recipe", str(EXAMPLES / "qwen3_30b_a3b_mn5.toml"), "--dry-run"]) == 0
    assert "expert-parallel group" not in capsys.readouterr().out


def test_the_cross_node_note_counts_a_partly_used_node():
    """An expert-parallel group of 6 GPUs on 4-GPU nodes spans 2 nodes (the note said 1, rounding down)."""
    import dataclasses

    from megatron.oellm.commands.recipe import cross_node_dispatch_note

    recipe = load_recipe(EXAMPLES / "qwen3_235b_a22b_jupiter.toml")
    resolved = resolve_row(recipe, recipe.rows[0])
    six = dataclasses.replace(resolved, layout=dataclasses.replace(resolved.layout, ep=6, etp=1))
    assert cross_node_dispatch_note(six).startswith("note: the hybridep expert-parallel group (6 GPUs) spans 2 nodes "
                                                    "of 4 GPUs")
    four = dataclasses.replace(resolved, layout=dataclasses.replace(resolved.layout, ep=4, etp=1))
    assert cross_node_dispatch_note(four) == ""

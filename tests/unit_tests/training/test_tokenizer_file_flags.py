"""Tokenizer files a run names that are not there: megatron-core 0.19.2 builds the tokenizer after the parse, and
``--tokenizer-type GPT2BPETokenizer`` without ``--merge-file`` ended in a traceback (``wget library should be
isntalled``: it downloads the missing file), a ``--vocab-file`` / ``--merge-file`` that does not exist waited on
huggingface.co's retries and then named the hub's ``gpt2``, not the file, and a ``--tokenizer-model`` path that does
not exist was read as a malformed hub name ("Repo id must be in the form ..."). The entry refuses each at start in
one line naming the flag and the path, as ``oellm recipe`` does where it checks the run's input files (``--submit``,
``--local``); its ``--dry-run`` reads no input file, so a path that exists on the cluster only still prints."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
from pathlib import Path

import pytest

from megatron.oellm.cli import main
from megatron.oellm.recipes.config import RecipeError
from megatron.oellm.recipes.host_paths import check_tokenizer_path
from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.data_sources import check_data_source
from tests.unit_tests.training.entry_helpers import Reached, entry_up_to_pretrain, refused_line

RUN = ["--oellm-model", "qwen3-30b-a3b-tiny", "--micro-batch-size", "1", "--global-batch-size", "8", "--seq-length",
       "64", "--train-iters", "10", "--lr", "1e-4", "--mock-data"]
"""A short mock-data run of the tiny Qwen3 MoE card, without its tokenizer flags."""


def _name() -> str:
    return f"tok{random.randrange(10**6)}"


def tokenizer_files(folder: Path) -> tuple[str, str]:
    """A random BPE vocabulary and merges file in ``folder`` (only their presence is checked)."""
    vocab, merges = folder / f"{_name()}-vocab.json", folder / f"{_name()}-merges.txt"
    letters = random.sample("abcdefghijklmnopqrstuvwxyz", random.randint(3, 8))
    vocab.write_text(json.dumps({letter: number for number, letter in enumerate(letters)}))
    merges.write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in itertools.pairwise(letters)) + "\n")
    return str(vocab), str(merges)


def test_megatron_core_downloads_a_missing_gpt2_file_and_fails_without_wget(monkeypatch, tmp_path):
    """What the refusal of a GPT2BPETokenizer without both files saves: megatron-core fetches the missing one from S3
    with the ``wget`` package (a traceback where it is not installed; a compute node has no network either)."""
    from megatron.core.tokenizers.text.libraries import megatron_hf_tokenizer

    monkeypatch.setattr(megatron_hf_tokenizer, "HAVE_WGET", False)
    monkeypatch.setattr(megatron_hf_tokenizer, "MEGATRON_CACHE", str(tmp_path / "cache"))
    vocab, _merges = tokenizer_files(tmp_path)
    with pytest.raises(ModuleNotFoundError, match="wget"):
        megatron_hf_tokenizer.MegatronHFTokenizer("GPT2BPETokenizer", vocab_file=vocab)


@pytest.mark.parametrize("tokenizer_type, hub_name", [("GPT2BPETokenizer", "gpt2"),
                                                      ("BertWordPieceLowerCase", "bert-large-uncased"),
                                                      ("BertWordPieceCase", "bert-large-cased")])
def test_megatron_s_own_tokenizers_load_a_hub_tokenizer_even_with_their_files(tokenizer_type, hub_name, monkeypatch,
                                                                              tmp_path):
    """megatron-core builds its GPT-2 BPE and BERT tokenizers as ``AutoTokenizer.from_pretrained`` of a hub name also
    when the vocabulary (and merges) files are given, so an offline node needs that tokenizer in its Hugging Face
    cache: the refusal of a missing file says so, naming the hub tokenizer, instead of promising that the files
    suffice."""
    from megatron.core.tokenizers.text.libraries import huggingface_tokenizer, megatron_hf_tokenizer

    class HubLookup(Exception):
        """The hub name the tokenizer asked transformers for, raised where transformers would look it up."""

    def from_pretrained(pretrained_model_name_or_path, **_kwargs):
        raise HubLookup(pretrained_model_name_or_path)

    monkeypatch.setattr(huggingface_tokenizer.AutoTokenizer, "from_pretrained", from_pretrained)
    monkeypatch.setattr(megatron_hf_tokenizer, "MEGATRON_CACHE", str(tmp_path / "cache"))
    vocab, merges = tokenizer_files(tmp_path)
    with pytest.raises(ValueError, match=rf"for {hub_name}\. Exception: {hub_name}$"):
        megatron_hf_tokenizer.MegatronHFTokenizer(tokenizer_type, vocab_file=vocab, merges_file=merges)
    args = parse_oellm_argv(["--tokenizer-type", tokenizer_type, "--mock-data"])
    with pytest.raises(ValueError, match=rf"still loads the hub tokenizer {hub_name}'s configuration, from "
                                         r"huggingface\.co or, on a node without network, the Hugging Face cache") as refused:
        check_data_source(args)
    # the files to give are this tokenizer's own (a BERT refusal named GPT-2's vocab.json and merges.txt)
    files = "vocab.json and merges.txt" if tokenizer_type == "GPT2BPETokenizer" else "vocab.txt;"
    assert f"give the files ({hub_name}'s {files}" in str(refused.value)
    assert ("merges.txt" in str(refused.value)) == (tokenizer_type == "GPT2BPETokenizer")


@pytest.mark.parametrize("given", ["--vocab-file", "--merge-file", None])
def test_gpt2_bpe_without_both_files_is_refused_naming_the_missing_flag(given, monkeypatch, capsys, tmp_path):
    vocab, merges = tokenizer_files(tmp_path)
    files = {"--vocab-file": vocab, "--merge-file": merges}
    flags = [] if given is None else [given, files[given]]
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*RUN, "--tokenizer-type", "GPT2BPETokenizer", *flags])
    missing = [flag for flag in files if flag != given]
    assert f"--tokenizer-type GPT2BPETokenizer needs {' and '.join(missing)}" in line, line
    with pytest.raises(Reached):
        entry.main([*RUN, "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab, "--merge-file", merges])


@pytest.mark.parametrize("flag", ["--vocab-file", "--merge-file"])
@pytest.mark.parametrize("tokenizer", ["GPT2BPETokenizer", "HuggingFaceTokenizer"])
@pytest.mark.parametrize("missing", ["no file", "a directory"])
def test_a_tokenizer_file_that_is_not_there_is_refused_naming_flag_and_path(flag, tokenizer, missing, monkeypatch,
                                                                             capsys, tmp_path):
    vocab, merges = tokenizer_files(tmp_path)
    files = {"--vocab-file": vocab, "--merge-file": merges}
    files[flag] = str(tmp_path / _name())
    if missing == "a directory":
        Path(files[flag]).mkdir()
    model = ["--tokenizer-model", f"{_name()}/{_name()}"] if tokenizer == "HuggingFaceTokenizer" else []
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*RUN, "--tokenizer-type", tokenizer, *model,
                                        *(item for pair in files.items() for item in pair)])
    assert f"error: {flag} {files[flag]!r} is no file" in line, line


def absent_path(form: str, tmp_path: Path) -> str:
    """A ``--tokenizer-model`` path of ``form`` (absolute, ``./``, ``../``, ``~/``) where nothing is."""
    return {"absolute": str(tmp_path / _name() / _name()), "./": f"./{_name()}", "../": f"../{_name()}/{_name()}",
            "~/": f"~/{_name()}"}[form]


@pytest.mark.parametrize("form", ["absolute", "./", "../", "~/"])
def test_a_tokenizer_model_path_that_does_not_exist_is_refused(form, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    path = absent_path(form, tmp_path)
    entry = entry_up_to_pretrain(monkeypatch)
    line = refused_line(entry, capsys, [*RUN, "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", path])
    assert f"error: --tokenizer-model {path!r} does not exist (relative to {tmp_path})" in line, line


def test_hub_names_and_existing_tokenizer_paths_pass(monkeypatch, tmp_path):
    """A hub name (``org/name`` where no directory ``org`` is here) is left to the run, as is a tokenizer folder that
    exists."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / _name()
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    entry = entry_up_to_pretrain(monkeypatch)
    for model in (f"{_name()}/{_name()}", _name(), str(folder), f"./{folder.name}"):
        with pytest.raises(Reached):
            entry.main([*RUN, "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", model])


@pytest.mark.parametrize("form", ["absolute", "./", "../", "~/", "hub name", "existing",
                                  "folder without tokenizer files"])
def test_the_recipe_and_the_entry_judge_a_tokenizer_model_by_one_rule(form, monkeypatch, tmp_path):
    """``oellm recipe`` checks ``--tokenizer-model`` on the login node (host_paths) and again through the entry's
    data check: both refuse the same values."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    empty = tmp_path / _name()
    empty.mkdir()
    path = ({"hub name": f"{_name()}/{_name()}", "existing": str(tmp_path), "folder without tokenizer files": str(empty)}
            .get(form) or absent_path(form, tmp_path))
    args = parse_oellm_argv(["--mock-data", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", path])
    refused = form not in ("hub name", "existing")
    with pytest.raises(RecipeError) if refused else contextlib.nullcontext():
        check_tokenizer_path(path)
    with pytest.raises(ValueError, match="--tokenizer-model") if refused else contextlib.nullcontext():
        check_data_source(args)



def test_the_recipe_dry_run_still_prints_a_row_whose_tokenizer_is_on_the_cluster_only(capsys, tmp_path):
    """``oellm recipe --dry-run`` reads none of the run's input files: a tokenizer path that exists only on the
    cluster's file system still prints its row."""
    recipe = Path(__file__).parents[3] / "examples" / "oellm" / "qwen3_5_35b_a3b_mn5_routing.toml"
    assert main(["recipe", str(recipe), "--dry-run", "--row", "1", "--data-path", str(tmp_path / _name()),
                 "--tokenizer-model", str(tmp_path / _name() / "tokenizer")]) == 0
    assert "-- row 1:" in capsys.readouterr().out

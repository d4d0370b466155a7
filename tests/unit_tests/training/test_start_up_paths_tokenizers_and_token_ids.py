"""Mistakes that passed every start-up check and failed on the cluster after the queue wait: a ``--data-cache-path``
or an output folder (``--tensorboard-dir``, ``--wandb-save-dir``) that cannot be created, FP8 recipe flags without
``--fp8-format`` (the run trained in BF16 without a word), a Hugging Face ``--tokenizer-model`` that is a file, a
folder without tokenizer files or a mistyped relative path, and a corpus whose token ids the run cannot embed. The
entry refuses each in one line (status 2), or warns of the ignored flags."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy
import pytest

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.data_sources import check_tokenizer_files
from tests.unit_tests.training.entry_helpers import (
    TINY_MOE_RUN,
    Reached,
    corpus,
    entry_on_a_cpu_node,
    entry_up_to_pretrain,
    refused_line,
    validated_tiny_moe_run,
)


def _under_a_file(tmp_path: Path) -> tuple[Path, str]:
    """A regular file, and a folder path under it (what ``os.makedirs`` cannot create)."""
    file = tmp_path / f"notes{random.randrange(10**6)}.txt"
    file.write_text(f"not a folder {random.random()}")
    return file, str(file / f"sub{random.randrange(100)}" / "dir")


def _data_run(prefix: str) -> list[str]:
    return ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "16",
            "--data-path", prefix, "--split", "100,0,0"]


def test_a_data_cache_path_under_a_file_is_refused_and_a_writable_one_is_not_created(tmp_path, monkeypatch, capsys):
    file, cache = _under_a_file(tmp_path)
    prefix = corpus(tmp_path, f"c{random.randrange(1000)}")
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, [*_data_run(prefix), "--data-cache-path", cache])
    assert f"error: --data-cache-path {cache} cannot be written: {file} is a file" in line
    assert line.endswith("give a folder this job can write on a file system every node of the job shares (rank 0 "
                         "writes the index caches there and every other rank reads them from the same path)")
    writable = tmp_path / f"caches{random.randrange(1000)}" / "gpt"
    with pytest.raises(Reached):
        entry_up_to_pretrain(monkeypatch).main([*_data_run(prefix), "--data-cache-path", str(writable)])
    assert not writable.parent.exists()


@pytest.mark.parametrize("flags", [["--tensorboard-dir"], ["--wandb-project", "oellm", "--wandb-save-dir"]])
def test_an_output_folder_under_a_file_is_refused(flags, tmp_path, monkeypatch, capsys):
    """megatron's tensorboard and wandb writers create their folders at job start, on the last rank."""
    from megatron.oellm.training import node_packages

    monkeypatch.setattr(node_packages, "check_parsed_packages", lambda _parsed: None)  # wandb need not be here
    file, folder = _under_a_file(tmp_path)
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, [*TINY_MOE_RUN, *flags, folder])
    assert f"error: {flags[-1]} {folder} cannot be written: {file} is a file" in line
    assert line.endswith("give a folder this job can write")
    with pytest.raises(Reached):  # megatron creates the wandb folder only for a run that logs to wandb
        entry_up_to_pretrain(monkeypatch).main([*TINY_MOE_RUN, "--wandb-save-dir", folder])


FP8_SETTINGS = {"--fp8-recipe": "tensorwise", "--fp8-margin": str(random.randint(1, 4)),
                "--fp8-amax-history-len": str(random.randint(2, 1024)), "--fp8-amax-compute-algo": "max",
                "--no-fp8-wgrad": None}
"""FP8 recipe flags megatron-core 0.19.2 reads only with ``--fp8-format``, with a value each (None: a switch)."""


def _fp8_warnings(flags: list[str], extra: list[str]) -> list[str]:
    from megatron.oellm.training.args import explicit_destinations, merge_card_flags
    from megatron.oellm.training.ignored_flags import ignored_flag_warnings

    words = [*extra, *(word for flag in flags for word in (flag, FP8_SETTINGS[flag]) if word is not None)]
    argv = merge_card_flags([*TINY_MOE_RUN, *words]).argv
    return [line for line in ignored_flag_warnings(validated_tiny_moe_run(words), explicit_destinations(argv))
            if "--fp8" in line]


def test_fp8_recipe_flags_without_a_format_are_named():
    flags = random.sample(sorted(FP8_SETTINGS), k=random.randint(1, len(FP8_SETTINGS)))
    (warning,) = _fp8_warnings(flags, ["--bf16"])
    assert warning.startswith(", ".join(f for f in FP8_SETTINGS if f in flags)), warning
    assert "nothing without --fp8-format" in warning and "add --fp8-format, or drop the FP8 flags" in warning


def test_the_tensorwise_recipe_alone_is_named_and_the_default_recipe_is_not():
    (warning,) = _fp8_warnings(["--fp8-recipe"], ["--bf16"])
    assert warning.startswith("--fp8-recipe does nothing without --fp8-format")
    assert _fp8_warnings([], ["--bf16"]) == []


def _tokenizer_refusal(model: str) -> str:
    args = parse_oellm_argv(["--mock-data", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", model])
    with pytest.raises(ValueError) as refused:
        check_tokenizer_files(args)
    return str(refused.value)


def test_a_hugging_face_tokenizer_file_is_refused_naming_its_folder(tmp_path):
    folder = tmp_path / f"tok{random.randrange(10**6)}"
    folder.mkdir()
    file = folder / "tokenizer.json"
    file.write_text(f'{{"version": "{random.random()}"}}')
    message = _tokenizer_refusal(str(file))
    assert message.startswith(f"--tokenizer-model {str(file)!r} is a file, and AutoTokenizer loads a tokenizer "
                              f"folder, never a single file (its folder, {folder},")
    assert "when megatron initialises" in message


def test_a_folder_without_tokenizer_files_is_refused_and_one_with_them_passes(tmp_path):
    """An empty folder and one of other files fail in transformers' AutoTokenizer; any one tokenizer file is left to
    it."""
    from megatron.oellm.training.data_sources import TOKENIZER_FOLDER_FILES

    folder = tmp_path / f"tok{random.randrange(10**6)}"
    folder.mkdir()
    (folder / "README.md").write_text(f"tokenizer {random.random()}")
    message = _tokenizer_refusal(str(folder))
    assert message.startswith(f"--tokenizer-model {str(folder)!r} is a folder without a tokenizer file")
    (folder / random.choice(sorted(TOKENIZER_FOLDER_FILES))).write_text("{}")
    check_tokenizer_files(parse_oellm_argv(["--mock-data", "--tokenizer-type", "HuggingFaceTokenizer",
                                            "--tokenizer-model", str(folder)]))


def test_a_mistyped_relative_path_beside_its_first_folder_is_refused(tmp_path, monkeypatch):
    """``tokenizers/oelm`` where a ``tokenizers`` folder is here is a path, not a hub name; a hub name ``org/name``
    without a local ``org`` folder still passes (no network look-up)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokenizers" / "oellm").mkdir(parents=True)
    typo = f"tokenizers/oelm{random.randrange(100)}"
    message = _tokenizer_refusal(typo)
    assert message.startswith(f"--tokenizer-model {typo!r} does not exist (relative to {tmp_path})")
    check_tokenizer_files(parse_oellm_argv(["--mock-data", "--tokenizer-type", "HuggingFaceTokenizer",
                                            "--tokenizer-model", "Qwen/Qwen3-30B-A3B"]))


def _bin_with_a_token(prefix: str, token: int, at_end: bool) -> None:
    """Put ``token`` into the first or last token of dataset ``prefix``'s ``.bin`` (its index's token type)."""
    _bin_with_a_token_at(prefix, token, -1 if at_end else 0)


def _bin_with_a_token_at(prefix: str, token: int, position: int) -> None:
    """Put ``token`` at token ``position`` of dataset ``prefix``'s ``.bin`` (its index's token type)."""
    from megatron.core.datasets.indexed_dataset import _IndexReader

    dtype = _IndexReader(f"{prefix}.idx", False).dtype
    tokens = numpy.fromfile(f"{prefix}.bin", dtype=dtype)
    tokens[position] = token
    tokens.tofile(f"{prefix}.bin")


def _text_corpora(tmp_path: Path, count: int) -> list[str]:
    """``count`` byte corpora of one random text each, 2,000 to 4,000 tokens long; their prefixes."""
    from megatron.oellm.training.corpus import build_corpus

    prefixes = []
    for number in range(count):
        text = tmp_path / f"text{number}.txt"
        text.write_text("".join(random.choice("abcdefghij klmnop\n") for _ in range(random.randint(2000, 4000))))
        prefixes.append(build_corpus([text], tmp_path / f"corpus{number}").prefix)
    return prefixes


def _bin_bytes_read(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The bytes ``numpy.fromfile`` reads from each file from now on (file name -> bytes), as it reads them."""
    read: dict[str, int] = {}
    fromfile = numpy.fromfile

    def counted(file, *args, **kwargs) -> numpy.ndarray:
        """``numpy.fromfile``, its bytes added to ``read`` under the file's name."""
        tokens = fromfile(file, *args, **kwargs)
        name = getattr(file, "name", file)
        read[name] = read.get(name, 0) + tokens.nbytes
        return tokens

    monkeypatch.setattr(numpy, "fromfile", counted)
    return read


def test_a_token_id_past_the_vocabulary_is_refused(tmp_path, monkeypatch, capsys):
    """The tiny card's 512-token vocabulary (the run's padded vocabulary here) and a token at or past it, at either
    end of the ``.bin``, refused; ids inside it pass."""
    prefix = corpus(tmp_path, f"c{random.randrange(1000)}")
    token = random.randint(512, 65535)
    _bin_with_a_token(prefix, token, at_end=random.random() < 0.5)
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, _data_run(prefix))
    assert f"error: dataset {prefix!r} holds token id {token}, at or above the run's 512-row vocabulary" in line
    assert line.endswith("or re-tokenize it")
    _bin_with_a_token(prefix, random.randint(256, 511), at_end=True)
    _bin_with_a_token(prefix, random.randint(256, 511), at_end=False)
    with pytest.raises(Reached):
        entry_up_to_pretrain(monkeypatch).main(_data_run(prefix))


def test_the_vocabulary_is_megatrons_padding_of_the_vocab_size_a_null_tokenizer_reads():
    """Before the tokenizer is built, a tokenizer whose vocabulary is ``--vocab-size`` gives megatron's padding of
    it; a Hugging Face tokenizer's is unknown, and its corpus is not sampled."""
    from megatron.oellm.training.data_sources import embedded_vocabulary

    vocab = random.randint(300, 5000)
    args = parse_oellm_argv(["--tokenizer-type", "NullTokenizer", "--vocab-size", str(vocab)])
    assert embedded_vocabulary(args) == -(-vocab // 128) * 128
    args = parse_oellm_argv(["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "org/name",
                             "--vocab-size", str(vocab)])
    assert embedded_vocabulary(args) is None


def test_the_sample_reads_both_ends_of_a_large_bin_and_not_its_middle(tmp_path):
    """A ``.bin`` of more tokens than two samples: an id past the vocabulary in its last token is found; one in its
    middle, outside both samples, is not read (the check's bound)."""
    from types import SimpleNamespace

    from megatron.oellm.training.data_sources import TOKEN_SAMPLE_BYTES, check_token_ids

    vocabulary = random.randint(1000, 30000)
    count = 2 * TOKEN_SAMPLE_BYTES // 2 + random.randint(10, 5000)
    tokens = numpy.array([random.randrange(vocabulary) for _ in range(97)], dtype=numpy.uint16)
    tokens = numpy.resize(tokens, count)
    index = SimpleNamespace(dtype=numpy.uint16, dtype_size=2, sequence_count=1,
                            sequence_pointers=numpy.array([0]), sequence_lengths=numpy.array([count]))
    prefix = str(tmp_path / "big")
    tokens[count // 2] = vocabulary + random.randint(0, 100)
    tokens.tofile(f"{prefix}.bin")
    check_token_ids(prefix, index, vocabulary)
    tokens[-1] = vocabulary + random.randint(0, 100)
    tokens.tofile(f"{prefix}.bin")
    with pytest.raises(ValueError, match=f"holds token id {tokens[-1]}, at or above the run's {vocabulary}-row"):
        check_token_ids(prefix, index, vocabulary)


@pytest.mark.parametrize("tokenizer", ["HuggingFaceTokenizer", "NullTokenizer"])
def test_off_a_gpu_node_token_ids_are_checked_only_against_a_known_vocabulary(tokenizer, tmp_path, monkeypatch,
                                                                               capsys):
    """Off a GPU node megatron builds no tokenizer, so a Hugging Face tokenizer's vocabulary is not known there: the
    card's ``--vocab-size`` padded as a stand-in (a vocabulary of 1 without one) refused corpora the cluster trains.
    Their ids are left to the GPU node; a null tokenizer's vocabulary is ``--vocab-size``, so its ids are checked."""
    prefix = corpus(tmp_path, f"c{random.randrange(1000)}")
    token = random.randint(512, 65535)  # past the tiny card's 512 rows
    _bin_with_a_token(prefix, token, at_end=random.random() < 0.5)
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    flags = (["--tokenizer-type", tokenizer, "--tokenizer-model", str(folder)] if tokenizer == "HuggingFaceTokenizer"
             else ["--tokenizer-type", tokenizer])
    run = [flag for flag in TINY_MOE_RUN if flag not in ("--mock-data", "--tokenizer-type", "NullTokenizer")]
    line = refused_line(entry_on_a_cpu_node(monkeypatch), capsys,
                        [*run, "--data-path", prefix, "--split", "100,0,0", *flags])
    if tokenizer == "NullTokenizer":
        assert f"holds token id {token}, at or above the run's 512-row vocabulary" in line, line
    else:
        assert "the training entry needs a GPU node" in line and "passed the checks" in line, line


def test_a_bin_of_empty_documents_only_has_no_token_to_refuse(tmp_path):
    """An index whose documents are all empty (a ``.bin`` of 0 bytes): ``max()`` of no sample ended the check in a
    bare "max() arg is an empty sequence" refusal."""
    from types import SimpleNamespace

    from megatron.oellm.training.data_sources import check_token_ids

    documents = random.randint(1, 5)
    index = SimpleNamespace(dtype=numpy.uint16, dtype_size=2, sequence_count=documents,
                            sequence_pointers=numpy.zeros(documents, dtype=numpy.int64),
                            sequence_lengths=numpy.zeros(documents, dtype=numpy.int32))
    prefix = str(tmp_path / f"empty{random.randrange(100)}")
    Path(f"{prefix}.bin").write_bytes(b"")
    check_token_ids(prefix, index, random.randint(1, 1000))


def test_the_token_samples_of_many_datasets_read_no_more_than_the_budget_in_all(tmp_path, monkeypatch):
    """Every rank samples every dataset at start: a blend of thousands of prefixes read 2 MiB of each, GBs per rank.
    All samples together stay within the budget (made small here, with datasets larger than their share), and every
    dataset is still read, each its share."""
    from megatron.oellm.training import data_sources

    prefixes = _text_corpora(tmp_path, random.randint(30, 50))
    budget = random.randint(8, 16) << 10
    # raising=False: without a budget in the module the test fails on the bytes read, not on a missing name
    monkeypatch.setattr(data_sources, "TOKEN_SAMPLE_BUDGET_BYTES", budget, raising=False)
    read = _bin_bytes_read(monkeypatch)
    data_sources.check_dataset_indices([*prefixes, random.choice(prefixes)], random.randint(257, 1000))
    assert sorted(read) == sorted(f"{prefix}.bin" for prefix in prefixes)
    assert sum(read.values()) <= budget, (sum(read.values()), budget)
    smallest = min(Path(f"{prefix}.bin").stat().st_size for prefix in prefixes)
    assert len(set(read.values())) == 1 and 0 < next(iter(read.values())) < smallest, read  # one share each


def test_a_bad_token_id_at_an_end_of_one_of_many_datasets_is_caught_and_one_past_its_share_is_not(tmp_path,
                                                                                               monkeypatch):
    """Under the budget each of many datasets is sampled at both ends: an id past the vocabulary in the first or last
    token of any one of them is refused naming it, while one in a dataset's middle, outside its share, is not read."""
    from megatron.oellm.training import data_sources

    prefixes = _text_corpora(tmp_path, random.randint(30, 50))
    monkeypatch.setattr(data_sources, "TOKEN_SAMPLE_BUDGET_BYTES", random.randint(8, 16) << 10, raising=False)
    vocabulary = random.randint(257, 1000)
    middle = random.choice(prefixes)
    _bin_with_a_token_at(middle, vocabulary + random.randint(0, 100), Path(f"{middle}.bin").stat().st_size // 4)
    data_sources.check_dataset_indices(prefixes, vocabulary)
    bad, token = random.choice(prefixes), vocabulary + random.randint(0, 100)
    _bin_with_a_token(bad, token, at_end=random.random() < 0.5)
    with pytest.raises(ValueError, match=re.escape(f"dataset {bad!r} holds token id {token}, at or above the run's "
                                                   f"{vocabulary}-row vocabulary")):
        data_sources.check_dataset_indices(prefixes, vocabulary)


# Fourteenth mutation audit: each test below failed with one mutant of session 53's start-up checks applied.


def test_an_unwritable_data_cache_path_holding_an_index_cache_is_reused(tmp_path, monkeypatch):
    """A read-only ``--data-cache-path`` (a shared cache) with a complete index cache in it is megatron-core's to
    reuse; one without any is refused."""
    from megatron.oellm.training import index_cache

    cache = tmp_path / f"shared{random.randrange(1000)}"
    cache.mkdir()
    monkeypatch.setattr(index_cache, "unwritable_reason", lambda path: f"{path} is on a read-only file system")
    with pytest.raises(ValueError, match="is on a read-only file system, and no index cache is there to reuse"):
        index_cache.check_data_cache_path(str(cache))
    base = f"{random.randrange(16**8):08x}-GPTDataset-{random.choice(['train', 'valid', 'test'])}-"
    for name in index_cache.INDEX_CACHE_FILES:
        (cache / f"{base}{name}").write_text(f"{random.random()}")
    index_cache.check_data_cache_path(str(cache))


def test_a_data_cache_path_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys):
    """The file itself, not only a path under one, is no folder megatron-core can create."""
    file, _ = _under_a_file(tmp_path)
    prefix = corpus(tmp_path, f"c{random.randrange(1000)}")
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, [*_data_run(prefix), "--data-cache-path", str(file)])
    assert f"error: --data-cache-path {file} cannot be written: {file} is a file" in line


def test_an_output_folder_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys):
    file, _ = _under_a_file(tmp_path)
    line = refused_line(entry_up_to_pretrain(monkeypatch), capsys, [*TINY_MOE_RUN, "--tensorboard-dir", str(file)])
    assert f"error: --tensorboard-dir {file} cannot be written: {file} is a file" in line


def test_object_storage_output_folders_are_left_to_their_writers():
    from megatron.oellm.training.run_schedule import output_directories

    url = f"{random.choice(['s3', 'gs', 'hdfs'])}://bucket{random.randrange(1000)}/runs"
    args = parse_oellm_argv(["--tensorboard-dir", url, "--wandb-project", "oellm", "--wandb-save-dir", f"{url}/wb"])
    assert output_directories(args) == {}


def _passes(tokenizer_type: str, model: str) -> None:
    """``check_tokenizer_files`` lets ``--tokenizer-type tokenizer_type --tokenizer-model model`` through."""
    check_tokenizer_files(parse_oellm_argv(["--mock-data", "--tokenizer-type", tokenizer_type,
                                            "--tokenizer-model", model]))


def test_a_path_of_three_parts_is_a_path_without_a_local_first_folder(tmp_path, monkeypatch):
    """No hub name has three parts: ``a/b/c`` where nothing is is refused as a missing path, as ``a`` is no folder."""
    monkeypatch.chdir(tmp_path)
    missing = "/".join(f"part{random.randrange(1000)}" for _ in range(3))
    assert _tokenizer_refusal(missing).startswith(f"--tokenizer-model {missing!r} does not exist")


def test_a_file_named_as_the_organisation_leaves_a_hub_name_a_hub_name(tmp_path, monkeypatch):
    """Only a folder named as a hub name's ``org`` makes ``org/name`` a mistyped path."""
    monkeypatch.chdir(tmp_path)
    org = f"org{random.randrange(1000)}"
    (tmp_path / org).write_text(f"{random.random()}")
    _passes("HuggingFaceTokenizer", f"{org}/model{random.randrange(1000)}")


def test_an_empty_tokenizer_model_is_not_taken_for_the_current_folder(tmp_path, monkeypatch):
    from megatron.oellm.training.data_sources import unloadable_tokenizer_folder

    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text(f"{random.random()}")
    assert unloadable_tokenizer_folder("") is None


def test_a_tilde_path_is_judged_as_written_not_in_the_home_folder(tmp_path, monkeypatch):
    """A ``~`` no shell expanded reaches transformers as written: ``~/tokenizer.json`` is the file under a ``~``
    folder here, refused as a file. It was looked up in the home folder instead (nothing there), and let through,
    though its missing-path check had judged it as written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / f"home{random.randrange(1000)}"))
    (tmp_path / "~").mkdir()
    (tmp_path / "~" / "tokenizer.json").write_text(f'{{"version": "{random.random()}"}}')
    assert _tokenizer_refusal("~/tokenizer.json").startswith("--tokenizer-model '~/tokenizer.json' is a file")


@pytest.mark.parametrize("suffix", [".model", ".tiktoken"])
def test_a_folder_of_another_model_or_tiktoken_file_passes(suffix, tmp_path):
    """AutoTokenizer loads a folder holding any ``*.model`` or ``*.tiktoken`` file, not only the named ones."""
    folder = tmp_path / f"tok{random.randrange(10**6)}"
    folder.mkdir()
    (folder / f"bpe{random.randrange(1000)}{suffix}").write_bytes(random.randbytes(16))
    _passes("HuggingFaceTokenizer", str(folder))


def test_a_tokenizer_folder_that_cannot_be_listed_is_let_through(tmp_path, monkeypatch):
    from megatron.oellm.training.data_sources import unloadable_tokenizer_folder

    folder = tmp_path / f"tok{random.randrange(10**6)}"
    folder.mkdir()
    iterdir = Path.iterdir

    def unlistable(path: Path):
        """``Path.iterdir``, refused for ``folder`` as for a folder this user may not read."""
        if path == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return iterdir(path)

    monkeypatch.setattr(Path, "iterdir", unlistable)
    assert unloadable_tokenizer_folder(str(folder)) is None


@pytest.mark.parametrize("tokenizer", ["SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"])
def test_a_sentencepiece_model_file_passes(tokenizer, tmp_path):
    """sentencepiece reads one file: the folder rule is AutoTokenizer's only."""
    model = tmp_path / f"tok{random.randrange(1000)}" / "tokenizer.model"
    model.parent.mkdir()
    model.write_bytes(random.randbytes(32))
    _passes(tokenizer, str(model))


def _one_sequence_index(count: int):
    """A stand-in for megatron-core's index of one ``count``-token sequence of uint16 tokens."""
    from types import SimpleNamespace

    return SimpleNamespace(dtype=numpy.uint16, dtype_size=2, sequence_count=1,
                           sequence_pointers=numpy.array([0]), sequence_lengths=numpy.array([count]))


def _bin_of(prefix: str, count: int, vocabulary: int) -> numpy.ndarray:
    """``count`` random tokens below ``vocabulary``, written to ``prefix``'s ``.bin``."""
    tokens = numpy.array([random.randrange(1, vocabulary) for _ in range(count)], dtype=numpy.uint16)
    tokens.tofile(f"{prefix}.bin")
    return tokens


def test_a_token_id_equal_to_the_vocabulary_is_refused_at_each_end_of_a_large_bin(tmp_path):
    """Rows run from 0 to the vocabulary less one: the id equal to the vocabulary is past them, caught in the first
    and in the last sample of a ``.bin`` larger than both (each end on its own, not one of them at random)."""
    from megatron.oellm.training.data_sources import TOKEN_SAMPLE_BYTES, check_token_ids

    vocabulary = random.randint(1000, 30000)
    count = TOKEN_SAMPLE_BYTES + random.randint(10, 5000)
    prefix = str(tmp_path / f"big{random.randrange(100)}")
    for position in (random.randrange(100), count - 1 - random.randrange(100)):
        tokens = _bin_of(prefix, count, vocabulary)
        check_token_ids(prefix, _one_sequence_index(count), vocabulary)
        tokens[position] = vocabulary
        tokens.tofile(f"{prefix}.bin")
        with pytest.raises(ValueError, match=f"holds token id {vocabulary}, at or above the run's {vocabulary}-row"):
            check_token_ids(prefix, _one_sequence_index(count), vocabulary)


def test_a_sample_below_one_token_still_reads_a_token_at_each_end(tmp_path):
    from megatron.oellm.training.data_sources import check_token_ids

    vocabulary, count = random.randint(300, 30000), random.randint(3, 50)
    prefix = str(tmp_path / f"small{random.randrange(100)}")
    for position in (0, count - 1):
        tokens = _bin_of(prefix, count, vocabulary)
        tokens[position] = vocabulary + random.randint(0, 100)
        tokens.tofile(f"{prefix}.bin")
        with pytest.raises(ValueError, match=f"holds token id {tokens[position]}"):
            check_token_ids(prefix, _one_sequence_index(count), vocabulary, sample_bytes=1)


def test_the_last_token_of_a_bin_between_one_and_two_samples_is_read(tmp_path):
    """The end sample of a ``.bin`` shorter than two samples starts where the first ends and reaches the last token."""
    from megatron.oellm.training.data_sources import check_token_ids

    vocabulary, sample = random.randint(300, 30000), random.randint(4, 40)
    count = random.randint(sample + 1, 2 * sample)
    prefix = str(tmp_path / f"mid{random.randrange(100)}")
    tokens = _bin_of(prefix, count, vocabulary)
    tokens[-1] = vocabulary + random.randint(0, 100)
    tokens.tofile(f"{prefix}.bin")
    with pytest.raises(ValueError, match=f"holds token id {tokens[-1]}"):
        check_token_ids(prefix, _one_sequence_index(count), vocabulary, sample_bytes=2 * sample)


def test_the_vocabulary_counts_the_null_multimodal_tokenizers_extra_row_and_the_tensor_parallel_padding():
    """megatron pads ``--vocab-size`` plus the null multimodal tokenizer's end-of-document row, to 128 x TP."""
    from megatron.oellm.training.data_sources import embedded_vocabulary

    vocab = 128 * random.randint(2, 40)
    args = parse_oellm_argv(["--tokenizer-type", "NullMultimodalTokenizer", "--vocab-size", str(vocab)])
    assert embedded_vocabulary(args) == vocab + 128
    tp = random.choice([2, 4, 8])
    vocab = 128 * tp * random.randint(2, 20) + random.randint(1, 128)
    args = parse_oellm_argv(["--tokenizer-type", "NullTokenizer", "--vocab-size", str(vocab),
                             "--tensor-model-parallel-size", str(tp)])
    assert embedded_vocabulary(args) == -(-vocab // (128 * tp)) * 128 * tp


def test_a_dataset_named_twice_takes_one_share_of_the_sample_budget(tmp_path, monkeypatch):
    """A blend naming its datasets twice reads each as much as naming them once: the budget is shared among the
    datasets, not the entries of the list."""
    from megatron.oellm.training import data_sources

    prefixes = _text_corpora(tmp_path, random.randint(30, 40))
    monkeypatch.setattr(data_sources, "TOKEN_SAMPLE_BUDGET_BYTES", random.randint(8, 16) << 10)
    vocabulary = random.randint(257, 1000)
    read = _bin_bytes_read(monkeypatch)
    data_sources.check_dataset_indices(prefixes, vocabulary)
    once = dict(read)
    read.clear()
    data_sources.check_dataset_indices([*prefixes, *random.sample(prefixes, len(prefixes))], vocabulary)
    assert read == once

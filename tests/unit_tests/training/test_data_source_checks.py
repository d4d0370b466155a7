"""Data sources megatron-core's dataset config or builder refuses only when the datasets are built (after the model
and optimizer are set up and a checkpoint loaded, on every rank): the training entry's ``data_sources.check_data_source``
refuses them at start, in agreement with megatron-core's own verdict. The dataset cache flags, a
``--per-dataset-sequences-path`` file, a data path list ``get_blend_from_list`` cannot read (a number where a
weight's prefix goes: a bare ``AssertionError``), and a ``--data-path`` in a directory the run cannot write (a
shared, read-only dataset) without ``--data-cache-path``, where megatron-core 0.19.2 writes the dataset index cache
under the prefix on rank 0 and stops with a permission error, unless a cache is already there to reuse."""

import gc
import json
import logging
import os
import random
import sys
from pathlib import Path

import numpy
import pytest

from megatron.oellm.training import data, data_sources, index_cache
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import (
    DATA_CHECK_RUN,
    Reached,
    corpus,
    data_config_args,
    entry_up_to_pretrain,
)

ARGV = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128"]
"""The entry's command line of the index cache tests (:data:`DATA_CHECK_RUN` is the other tests')."""


@pytest.fixture
def null_tokenizer(monkeypatch):
    """megatron's tokenizer global, as the byte corpus trains with it (the dataset config asks for one)."""
    import megatron.training
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    monkeypatch.setattr(megatron.training, "get_tokenizer", lambda: NullTokenizer(257))


def megatron_core_refuses(args) -> bool:
    """Whether megatron-core 0.19.2's GPTDatasetConfig, built as the data provider builds it, refuses ``args``."""
    try:
        data.dataset_config(args)
    except AssertionError:
        return True
    return False


CACHE_CASES = {
    "fast cache beside --data-path": (["--data-path", "TRAIN", "--dataloader-fast-cache-load", "--data-cache-path",
                                       "CACHE"], "--dataloader-fast-cache-load"),
    "fast cache without a cache path": (["--train-data-path", "TRAIN", "--dataloader-fast-cache-load"],
                                        "--dataloader-fast-cache-load"),
    "deferred index mmap without a cache path": (["--data-path", "TRAIN", "--dataloader-defer-npy-index-mmap"],
                                                 "--dataloader-defer-npy-index-mmap"),
    "mock data with fast cache, no cache path": (["--mock-data", "--dataloader-fast-cache-load"],
                                                 "--dataloader-fast-cache-load"),
    "fast cache per split with a cache path": (["--train-data-path", "TRAIN", "--dataloader-fast-cache-load",
                                                "--data-cache-path", "CACHE"], None),
    "deferred index mmap with a cache path": (["--data-path", "TRAIN", "--dataloader-defer-npy-index-mmap",
                                               "--data-cache-path", "CACHE", "--split", "1,1,0"], None),
}


def filled_index_cache(directory: Path) -> Path:
    """``directory`` holding the files of one GPTDataset index cache (empty: only their names are looked at)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = f"{random.getrandbits(128):032x}-GPTDataset-train-"
    for suffix in index_cache.INDEX_CACHE_FILES:
        (directory / f"{base}{suffix}").touch()
    return directory


@pytest.mark.parametrize("case", list(CACHE_CASES))
def test_dataset_cache_flags_are_judged_as_megatron_core_judges_them(case, tmp_path, null_tokenizer):
    """``--dataloader-fast-cache-load`` beside ``--data-path``, or either cache flag without ``--data-cache-path``,
    passed every check and stopped the run with megatron-core's AssertionError when the datasets were built."""
    flags, refused_flag = CACHE_CASES[case]
    train = corpus(tmp_path, "train")
    filled_index_cache(tmp_path / "cache")
    args = data_config_args([{"TRAIN": train, "CACHE": str(tmp_path / "cache")}.get(flag, flag) for flag in flags])
    assert megatron_core_refuses(args) == (refused_flag is not None)
    if refused_flag is None:
        data_sources.check_data_source(args)
        return
    with pytest.raises(ValueError, match=refused_flag):
        data_sources.check_data_source(args)


def test_the_entry_refuses_a_fast_cache_load_without_a_cache_path_in_one_line(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    argv = [*DATA_CHECK_RUN, "--train-data-path", corpus(tmp_path, "train"), "--dataloader-fast-cache-load"]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --dataloader-fast-cache-load") and "--data-cache-path" in line
    with pytest.raises(Reached):
        entry.main([*argv, "--data-cache-path", str(filled_index_cache(tmp_path / "cache"))])


def build_train_dataset(args):
    """The training dataset megatron-core's builder makes from ``args`` (one process, no torch.distributed)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    return BlendedMegatronDatasetBuilder(GPTDataset, [4, 0, 0], lambda: True, data.dataset_config(args)).build()[0]


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"),
    ("not json", "cannot read it"),
    ('["PREFIX"]', "not a JSON object"),
    ('{"PREFIX-other": [1, 2]}', "has no counts for 'PREFIX'"),
])
def test_a_sequences_file_megatron_core_cannot_use_is_refused_before_init(content, message, tmp_path,
                                                                          null_tokenizer):
    """megatron-core reads ``--per-dataset-sequences-path`` when the datasets are built and looks every dataset
    prefix up in it: a missing file (FileNotFoundError) or a prefix it lacks (KeyError) stopped the run there."""
    train = corpus(tmp_path, "train")
    path = tmp_path / "sequences.json"
    if content is not None:
        path.write_text(content.replace("PREFIX", train))
    args = data_config_args(["--train-data-path", train, "--per-dataset-sequences-path", str(path)])
    with pytest.raises((OSError, ValueError, KeyError, TypeError)):
        build_train_dataset(args)
    with pytest.raises(ValueError, match=f"--per-dataset-sequences-path {path}") as refused:
        data_sources.check_data_source(args)
    assert message.replace("PREFIX", train) in str(refused.value)


def test_a_sequences_file_naming_every_prefix_passes_and_builds(tmp_path, null_tokenizer):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    train = corpus(tmp_path, "train")
    indexed = IndexedDataset(train)
    path = tmp_path / "sequences.json"
    path.write_text(json.dumps({train: [indexed.index.sequence_count, indexed.index.document_count]}))
    args = data_config_args(["--train-data-path", train, "--per-dataset-sequences-path", str(path)])
    data_sources.check_data_source(args)
    assert len(build_train_dataset(args)) >= 4


def _dataset(tmp_path, name: str) -> str:
    """An indexed dataset's prefix whose ``.bin`` and ``.idx`` exist (empty: only their presence is checked)."""
    for suffix in (".bin", ".idx"):
        (tmp_path / f"{name}{suffix}").touch()
    return str(tmp_path / name)


def _mixed_list(tmp_path) -> list[str]:
    """Prefix first, then weights out of place: the first pair's weight is not a number, a later one's is."""
    weight = str(round(random.uniform(0.05, 0.95), 3))
    return [_dataset(tmp_path, "a"), weight, weight, _dataset(tmp_path, "b")]


@pytest.mark.parametrize("flags, named", [
    (lambda paths: ["--data-path", *paths], "--data-path"),
    (lambda paths: ["--train-data-path", *paths, "--valid-data-path", paths[0], "--test-data-path", paths[0]],
     "--train/valid/test-data-path"),
])
def test_a_list_mixing_weights_into_prefix_places_is_refused_with_its_form(tmp_path, flags, named):
    """megatron-core asserts without a message (on every rank, before any other check); the refusal names the flag."""
    args = parse_oellm_argv(flags(_mixed_list(tmp_path)))
    with pytest.raises(ValueError, match=rf"^{named}: give dataset prefixes \(PREFIX PREFIX \.\.\.\) or weight-prefix"):
        data_sources.check_data_source(args)


def test_weight_prefix_pairs_and_plain_prefixes_still_pass(tmp_path):
    """The two forms megatron-core reads pass the check (real datasets: the check reads every local index)."""
    a, b = corpus(tmp_path, "a"), corpus(tmp_path, "b")
    weights = [str(round(random.uniform(0.05, 0.95), 3)) for _ in range(2)]
    data_sources.check_data_source(parse_oellm_argv(["--data-path", weights[0], a, weights[1], b]))
    data_sources.check_data_source(parse_oellm_argv(["--data-path", a, b]))


def _name() -> str:
    return f"corpus{random.randrange(10**6)}"


def test_the_check_looks_where_megatron_core_writes_and_reuses_the_cache(tmp_path, null_tokenizer):
    prefix = corpus(tmp_path, _name())
    cache = index_cache.default_index_cache(prefix)
    assert index_cache.lacks_index_cache(cache)
    build_train_dataset(data_config_args(["--data-path", prefix, "--split", "100,0,0"]))
    assert any(name.endswith("-GPTDataset-train-shuffle_index.npy") for name in os.listdir(cache))
    assert not index_cache.lacks_index_cache(cache)
    # incomplete without any one of its index files: megatron-core's cache_hit needs all four, else builds them again
    for suffix in ("document_index.npy", "sample_index.npy", "shuffle_index.npy"):
        [name] = [name for name in os.listdir(cache) if name.endswith(f"-train-{suffix}")]
        (cache / name).rename(tmp_path / name)
        assert index_cache.lacks_index_cache(cache), suffix
        (tmp_path / name).rename(cache / name)
        assert not index_cache.lacks_index_cache(cache)


def _unwritable_under(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.access`` denies writing anywhere under ``root`` (as a read-only mount does, even to root)."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        inside = Path(os.path.abspath(path)).is_relative_to(root)
        return False if inside and mode & os.W_OK else real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_the_entry_refuses_an_unwritable_dataset_directory_without_a_cache(monkeypatch, capsys, tmp_path,
                                                                            null_tokenizer):
    entry = entry_up_to_pretrain(monkeypatch)
    shared = tmp_path / "shared"
    shared.mkdir()
    prefix = corpus(shared, _name())
    _unwritable_under(shared, monkeypatch)
    assert entry.main([*ARGV, "--data-path", prefix]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"dataset {prefix!r}" in line and str(index_cache.default_index_cache(prefix)) in line
    assert "give --data-cache-path DIR, a folder this job can write on a file system every node of the job shares" in line
    assert entry.main([*ARGV, "--train-data-path", prefix, "--valid-data-path", prefix]) == 2
    with pytest.raises(Reached):
        entry.main([*ARGV, "--data-path", prefix, "--data-cache-path", str(tmp_path / "cache")])
    with pytest.raises(Reached):  # a writable dataset directory: megatron-core writes the cache there
        entry.main([*ARGV, "--data-path", corpus(tmp_path, _name())])


def test_an_unwritable_dataset_directory_with_a_built_cache_passes(monkeypatch, tmp_path,
                                                                   null_tokenizer):
    entry = entry_up_to_pretrain(monkeypatch)
    prefix = corpus(tmp_path, _name())
    build_train_dataset(data_config_args(["--data-path", prefix, "--split", "100,0,0"]))
    _unwritable_under(tmp_path, monkeypatch)
    with pytest.raises(Reached):
        entry.main([*ARGV, "--data-path", prefix])


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only (chmod) directory")
def test_the_refusal_agrees_with_megatron_core_on_a_read_only_directory(tmp_path, null_tokenizer):
    shared = tmp_path / "shared"
    shared.mkdir()
    prefix = corpus(shared, _name())
    args = data_config_args(["--data-path", prefix, "--split", "100,0,0"])
    shared.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="--data-cache-path"):
            data_sources.check_data_source(args)
        with pytest.raises(PermissionError):
            build_train_dataset(args)
    finally:
        shared.chmod(0o755)
    build_train_dataset(args)
    shared.chmod(0o555)
    try:
        data_sources.check_data_source(args)
        build_train_dataset(args)
    finally:
        shared.chmod(0o755)


def _proportion() -> str:
    return str(round(random.uniform(0.5, 99.5), 2))


def test_a_run_whose_training_split_has_no_data_is_refused_unless_it_skips_training(tmp_path, null_tokenizer):
    """Per-split paths without ``--train-data-path``, or a ``--split`` whose training proportion is 0: megatron-core
    builds no training dataset, and megatron's ``pretrain`` then skips the training loop and exits with status 0
    without training a step. The entry passed both."""
    train = corpus(tmp_path, "train")
    weight = _proportion()  # validation and test one of the corpus' two documents each: an empty split would hang
    no_training = (["--data-path", train, "--split", f"0,{weight},{weight}"],
                   ["--valid-data-path", train, "--test-data-path", train])
    for flags in no_training:
        args = data_config_args(flags)
        assert build_train_dataset(args) is None
        with pytest.raises(ValueError, match="no training data|training split no share"):
            data_sources.check_data_source(args)
        # evaluation only: what megatron does
        data_sources.check_data_source(data_config_args([*flags, "--skip-train"]))
    args = data_config_args(["--data-path", train, "--split", f"{_proportion()},0,0"])
    assert build_train_dataset(args) is not None
    data_sources.check_data_source(args)


@pytest.mark.parametrize("flags, named", [
    (["--data-path"], "--data-path"),
    (["--train-data-path", "--valid-data-path", "PREFIX"], "--train-data-path"),
    (["--train-data-path", "PREFIX", "--test-data-path"], "--test-data-path"),
])
def test_a_data_path_flag_without_a_value_is_refused_naming_it(tmp_path, flags, named):
    """A flag whose value is an unset shell variable parses as an empty list, which megatron-core's
    ``get_blend_from_list`` fails on when it builds the datasets; the entry's refusal was its bare "not enough values
    to unpack (expected 2, got 0)"."""
    args = data_config_args([corpus(tmp_path, "train") if flag == "PREFIX" else flag for flag in flags])
    with pytest.raises(ValueError, match=rf"^{named} without a value .*give dataset prefixes"):
        data_sources.check_data_source(args)


def test_an_empty_data_args_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "data-args.txt"
    path.write_text(" \n")
    args = data_config_args(["--data-args-path", str(path), "--split", f"{_proportion()},{_proportion()},0"])
    with pytest.raises(ValueError, match=rf"^--data-args-path {path} is empty: .*give dataset prefixes"):
        data_sources.check_data_source(args)


@pytest.mark.parametrize("flags, named", [
    (["--multiple-validation-sets"], "--multiple-validation-sets"),
    (["--validation-set-names", "wiki", "code"], "--validation-set-names"),
])
def test_validation_set_flags_megatron_refuses_mid_run_are_refused_at_start(monkeypatch, capsys, tmp_path, flags,
                                                                            named):
    """``--multiple-validation-sets`` without ``--full-validation`` stopped the run with megatron's
    NotImplementedError when it built the data loaders (after the model and optimizer); ``--validation-set-names``
    without ``--multiple-validation-sets`` with its assertion at the first evaluation."""
    entry = entry_up_to_pretrain(monkeypatch)
    train, valid = corpus(tmp_path, "train"), corpus(tmp_path, "valid")
    argv = [*DATA_CHECK_RUN, "--train-data-path", train, "--valid-data-path", train, valid, *flags]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: {named}")
    with pytest.raises(Reached):
        entry.main([*DATA_CHECK_RUN, "--train-data-path", train, "--valid-data-path", train, valid,
                    "--multiple-validation-sets", "--full-validation", *flags])


def test_a_split_leaving_a_dataset_split_without_a_sequence_is_refused(tmp_path, null_tokenizer, caplog):
    """megatron-core builds every split that ``--split`` gives a share, also one whose share of a small dataset rounds
    to no sequence; its GPTDataset then counts epochs of no token forever (rank 0 hangs in the dataset build until
    the job's time limit), and a blend without weights stops with a bare AssertionError. The default 969,30,1 does
    that to any dataset of 500 sequences or fewer."""
    # two sequences each, each longer than a sample (so only an empty split leaves a dataset of a blend no sample)
    a, b = corpus(tmp_path, "a-corpus-of-two-long-documents"), corpus(tmp_path, "b-corpus-of-two-long-documents")
    share = _proportion()
    even = f"{share},{share},{share}"  # rounded: one sequence to train, none to validate, one to test
    with pytest.raises(AssertionError):
        build_train_dataset(data_config_args(["--data-path", a, b, "--split", even]))
    for flags in (["--data-path", a, b, "--split", even], ["--data-path", a, "--split", even],
                  ["--data-path", a, "--split", even, "--skip-train"]):
        with pytest.raises(ValueError, match=rf"^--split '{even}' leaves the valid split of dataset '{a}' "
                                             r"\(2 sequences\) without a sequence"):
            data_sources.check_data_source(data_config_args(flags))
    with pytest.raises(ValueError, match=r"leaves the valid and test split of dataset"):
        data_sources.check_data_source(data_config_args(["--data-path", a]))  # megatron's default split, 969,30,1
    args = data_config_args(["--data-path", a, b, "--split", f"{share},{share},0"])
    caplog.clear()
    with caplog.at_level(logging.INFO):
        data_sources.check_data_source(args)
    assert not caplog.records  # the index reader's INFO lines, which every rank would print before Megatron starts
    assert build_train_dataset(args) is not None


def test_validation_set_names_pass_when_megatron_does_not_evaluate(monkeypatch, capsys, tmp_path):
    """megatron-core reads ``--validation-set-names`` only when it evaluates (``evaluate_and_print_results``), which
    ``--eval-iters 0`` turns off unless ``--full-validation`` is given: the entry refused the names there too."""
    entry = entry_up_to_pretrain(monkeypatch)
    train, valid = corpus(tmp_path, _name()), corpus(tmp_path, _name())
    argv = [*DATA_CHECK_RUN, "--train-data-path", train, "--valid-data-path", train, valid, "--validation-set-names",
            _name(), _name(), "--eval-interval", str(random.randint(1, 50))]
    for off in (["--eval-iters", "0"], ["--eval-iters", "0", "--skip-train"]):
        with pytest.raises(Reached):
            entry.main([*argv, *off])
    for evaluates in (["--eval-iters", str(random.randint(1, 50))], ["--eval-iters", "0", "--full-validation"]):
        assert entry.main([*argv, *evaluates]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"{entry.PROG}: error: --validation-set-names")


def _without_documents(directory: Path) -> str:
    """The prefix of an indexed dataset megatron-core's own builder wrote without a document (its index counts 0
    sequences, its ``.bin`` is empty), as a tokenizer run over empty or filtered-out input leaves one."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = str(directory / _name())
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=random.choice([numpy.uint8, numpy.uint16, numpy.int32]))
    builder.finalize(f"{prefix}.idx")
    return prefix


def test_megatron_core_fails_on_a_dataset_without_documents(tmp_path, null_tokenizer):
    """Built as the data provider builds it, after the model and optimizer are set up: its IndexedDataset cannot map
    the empty ``.bin`` (with ``--no-mmap-bin-files``, or a ``.bin`` that is not empty, GPTDataset counts epochs of no
    token forever instead, as on an empty split)."""
    unraisable = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "unraisablehook", unraisable.append)  # its half-built IndexedDataset's "Exception ignored"
        with pytest.raises(ValueError, match="cannot mmap an empty file"):
            build_train_dataset(data_config_args(["--train-data-path", _without_documents(tmp_path)]))
        gc.collect()


def test_a_dataset_without_documents_is_refused_naming_it(monkeypatch, capsys, tmp_path, null_tokenizer):
    """Per-split paths passed the check (it read no index without a blend), and a blend's refusal was that the split
    left the dataset's splits without a sequence, suggesting --split 100,0,0, which fails the same way."""
    entry = entry_up_to_pretrain(monkeypatch)
    train, empty = corpus(tmp_path, _name()), _without_documents(tmp_path)
    weights = [_proportion(), _proportion()]
    for flags in (["--train-data-path", empty], ["--train-data-path", train, "--valid-data-path", empty],
                  ["--train-data-path", train, "--valid-data-path", train, empty, "--multiple-validation-sets",
                   "--full-validation"],
                  ["--data-path", weights[0], train, weights[1], empty, "--split", "100,0,0"],
                  ["--data-path", empty, "--split", f"{_proportion()},{_proportion()},0", "--skip-train"]):
        assert entry.main([*ARGV, *flags]) == 2, flags
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"{entry.PROG}: error: dataset {empty!r} holds no documents"), line
    with pytest.raises(Reached):
        entry.main([*ARGV, "--train-data-path", train, "--valid-data-path", train])


@pytest.mark.parametrize("damage", ["random bytes", "cut after the header's magic"])
def test_an_unreadable_dataset_index_is_one_refusal(tmp_path, damage):
    """Random bytes fail megatron-core's header assert, and an index cut inside its header fails ``struct.unpack``: the
    second was a traceback on every rank, and a whole IndexedDataset left half-built printed an "Exception ignored"
    block after the refusal."""
    prefix = corpus(tmp_path, "train")
    index = Path(f"{prefix}.idx")
    good = index.read_bytes()
    if damage == "random bytes":
        index.write_bytes(random.randbytes(64))
    else:
        index.write_bytes(good[:random.choice([9, 17, 18])])
    unraisable = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "unraisablehook", unraisable.append)
        with pytest.raises(ValueError, match=rf"^dataset '{prefix}': megatron-core cannot read its index"):
            data_sources.check_data_source(data_config_args(["--data-path", prefix, "--split", f"{_proportion()},0,0"]))
        gc.collect()
    assert not unraisable, [str(item.exc_value) for item in unraisable]


def test_a_binary_data_args_file_is_named_as_such(tmp_path):
    """Passing the dataset's .idx as --data-args-path was reported as an empty file."""
    path = tmp_path / "data-args.bin"
    path.write_bytes(b"\xff\xfe" + random.randbytes(62))
    args = data_config_args(["--data-args-path", str(path), "--split", f"{_proportion()},0,0"])
    with pytest.raises(ValueError, match=rf"^--data-args-path {path} is not a text file"):
        data_sources.check_data_source(args)


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_a_dataset_whose_bin_file_is_missing_is_refused_naming_it(tmp_path, null_tokenizer, split):
    """megatron-core reads a dataset's ``.idx`` alone until it maps the ``.bin``, when it builds the datasets after the
    model and optimizer are set up: a prefix whose ``.bin`` is missing (a copy stopped part-way) is refused at start,
    also as a validation or test path."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    paths = {name: corpus(tmp_path, f"{name}-{_name()}") for name in ("train", "valid", "test")}
    Path(f"{paths[split]}.bin").unlink()
    with pytest.raises(AssertionError, match="cannot be found"):
        IndexedDataset(paths[split])  # megatron-core's own reader
    args = data_config_args([item for name in paths for item in (f"--{name}-data-path", paths[name])])
    with pytest.raises(ValueError, match=rf"^no indexed dataset \(PREFIX.bin and PREFIX.idx\) at '{paths[split]}':"):
        data_sources.check_data_source(args)
    args = data_config_args(["--data-path", paths[split], "--split", f"{_proportion()},0,0"])
    with pytest.raises(ValueError, match=rf"^no indexed dataset \(PREFIX.bin and PREFIX.idx\) at '{paths[split]}':"):
        data_sources.check_data_source(args)


def test_a_sequences_file_lacking_any_one_prefix_of_a_blend_is_refused_naming_it(tmp_path, null_tokenizer):
    """megatron-core looks each dataset of the blend up in ``--per-dataset-sequences-path``: a file with counts for
    only some of them (here all but a random one, not the first) stops the dataset build with a KeyError."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    prefixes = [corpus(tmp_path, f"{number}-{_name()}") for number in range(3)]
    left_out = prefixes[random.randrange(1, 3)]
    counts = {}
    for prefix in prefixes:
        if prefix != left_out:
            index = IndexedDataset(prefix).index
            counts[prefix] = [index.sequence_count, index.document_count]
    path = tmp_path / "sequences.json"
    path.write_text(json.dumps(counts))
    args = data_config_args(["--data-path", *prefixes, "--split", "100,0,0", "--per-dataset-sequences-path", str(path)])
    with pytest.raises(KeyError):
        build_train_dataset(args)
    with pytest.raises(ValueError, match=rf"^--per-dataset-sequences-path {path} has no counts for '{left_out}':"):
        data_sources.check_data_source(args)


def test_object_storage_prefixes_pass_the_local_file_checks(tmp_path, null_tokenizer):
    """megatron-core reads ``s3://`` and ``msc://`` prefixes through its object-storage client: the checks of local
    files (``.bin``/``.idx`` present, index readable, cache directory writable) leave them to it."""
    from megatron.core.datasets.object_storage_utils import is_object_storage_path

    local = corpus(tmp_path, _name())
    remote = [f"s3://bucket-{_name()}/text", f"msc://profile/{_name()}/text"]
    assert all(map(is_object_storage_path, remote)) and not is_object_storage_path(local)
    flags = ["--data-path", *random.sample([local, *remote], 3), "--split", "100,0,0",
             "--object-storage-cache-path", str(tmp_path / _name()), "--no-mmap-bin-files"]
    assert data_sources.check_data_source(data_config_args(flags)).local == [local]


def test_the_object_storage_prefixes_come_back_beside_the_local_ones(tmp_path, null_tokenizer):
    """:func:`data_sources.check_data_source` returns the object-storage prefixes it found, in the blend's order, for
    the entry's multi-node check of ``--object-storage-cache-path``, which parsed the blend a second time for them."""
    local = corpus(tmp_path, _name())
    remote = [f"s3://bucket-{_name()}/text", f"msc://profile/{_name()}/text"]
    order = random.sample([local, *remote], 3)
    flags = ["--data-path", *order, "--split", "100,0,0", "--object-storage-cache-path", str(tmp_path / _name()),
             "--no-mmap-bin-files"]
    assert data_sources.check_data_source(data_config_args(flags)) == ([local], [prefix for prefix in order if prefix != local])
    assert data_sources.check_data_source(data_config_args(["--mock-data"])) == ([], [])


def test_mock_data_with_a_sequences_file_that_cannot_be_read_is_refused(tmp_path, null_tokenizer):
    """The data provider reads ``--per-dataset-sequences-path`` for the dataset config under ``--mock-data`` too,
    after the model and optimizer are set up."""
    path = tmp_path / f"{_name()}.json"
    args = data_config_args(["--mock-data", "--per-dataset-sequences-path", str(path)])
    with pytest.raises(FileNotFoundError):
        data.dataset_config(args)
    with pytest.raises(ValueError, match=rf"^--per-dataset-sequences-path {path}: cannot read it as JSON"):
        data_sources.check_data_source(args)


def _megatron_evaluation_error(data_iterators, eval_iters: int | list[int], full_validation: bool,
                               validation_set_names: list[str] | None = None,
                               raises: type[Exception] = TypeError) -> Exception:
    """What megatron 0.19.2's ``evaluate_and_print_results`` raises (``raises``) for ``--multiple-validation-sets``
    given these loaders, ``args.eval_iters`` and names (get_args and its writers stubbed; it fails before it touches
    a GPU)."""
    import types
    from unittest import mock

    from megatron.training import training

    megatron_args = types.SimpleNamespace(multiple_validation_sets=True, eval_iters=eval_iters,
                                          full_validation=full_validation, validation_set_names=validation_set_names)
    with mock.patch.object(training, "get_args", lambda: megatron_args), \
            mock.patch.object(training, "get_tensorboard_writer", lambda: None), \
            mock.patch.object(training, "get_wandb_writer", lambda: None), \
            pytest.raises(raises) as raised:
        training.evaluate_and_print_results("valid", None, data_iterators, None, 0, None, None)
    return raised.value


def test_multiple_validation_sets_without_full_validation_are_refused_in_an_evaluating_skip_train_run(
        monkeypatch, capsys, tmp_path):
    """Under ``--skip-train`` megatron builds the loaders without its NotImplementedError, but its evaluation pairs
    the sets with ``args.eval_iters``, a number unless ``--full-validation`` made it one count per set: a TypeError
    at the evaluation, after the model is set up and the checkpoint loaded. With ``--eval-iters 0`` nothing is
    evaluated and the run is let through. Found by a mutation audit helper."""
    from megatron.core.rerun_state_machine import RerunDataIterator

    iters = random.randint(1, 50)
    assert "not iterable" in str(_megatron_evaluation_error([RerunDataIterator(iter([]))] * 2, iters, False))
    entry = entry_up_to_pretrain(monkeypatch)
    train, valid = corpus(tmp_path, _name()), corpus(tmp_path, _name())
    argv = [*DATA_CHECK_RUN, "--train-data-path", train, "--valid-data-path", train, valid,
            "--multiple-validation-sets", "--skip-train"]
    assert entry.main([*argv, "--eval-iters", str(iters)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --multiple-validation-sets: megatron-core 0.19.2 evaluates")
    assert "with a TypeError at the first evaluation under --skip-train" in line
    for passes in (["--eval-iters", "0"], ["--full-validation"]):
        with pytest.raises(Reached):
            entry.main([*argv, *passes])


def test_a_test_set_beside_multiple_validation_sets_is_refused_naming_where_it_comes_from(monkeypatch, capsys,
                                                                                          tmp_path):
    """megatron evaluates the test set at the end of the run with the same function, which under
    ``--multiple-validation-sets`` takes the test set's one loader for the list of validation loaders: ``len()`` of
    it is a TypeError after the whole run has trained. A test set from per-split paths, a blend's ``--split`` or
    ``--mock-data`` is refused at start; per-split paths without a test path and a split without a test share pass."""
    from megatron.core.rerun_state_machine import RerunDataIterator

    sets = random.randint(2, 4)
    error = _megatron_evaluation_error(RerunDataIterator(iter([])), [random.randint(1, 50)] * sets, True)
    assert "has no len()" in str(error)
    entry = entry_up_to_pretrain(monkeypatch)
    train, valid, test = (corpus(tmp_path, _name()) for _ in range(3))
    multiple = ["--multiple-validation-sets", "--full-validation"]
    per_split = ["--train-data-path", train, "--valid-data-path", *[valid] * sets]
    refused = {  # the corpus holds two sequences: one to train, one to test
        "--test-data-path": [*per_split, "--test-data-path", test],
        "--split '1,0,1' (its test share)": ["--data-path", train, "--split", "1,0,1"],
        "--mock-data (megatron-core's mock datasets always have a test split)": ["--mock-data"],
    }
    for source, flags in refused.items():
        assert entry.main([*DATA_CHECK_RUN, *flags, *multiple]) == 2, source
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"{entry.PROG}: error: --multiple-validation-sets with a test set from {source}: "
                               "megatron-core 0.19.2 evaluates the test set as if"), line
    for flags in (per_split, ["--data-path", train, "--split", "1,1,0"]):
        with pytest.raises(Reached):
            entry.main([*DATA_CHECK_RUN, *flags, *multiple])


def test_validation_set_names_that_do_not_count_the_sets_are_refused(monkeypatch, capsys, tmp_path):
    """megatron asserts one ``--validation-set-names`` name per validation set at the first evaluation, after
    ``--eval-interval`` training iterations: a name too many or too few is refused at start. The sets are the
    validation paths' prefixes, their weights ignored."""
    from megatron.core.rerun_state_machine import RerunDataIterator

    sets = random.randint(2, 4)
    names = [_name() for _ in range(sets + random.choice([-1, 1]))]
    error = _megatron_evaluation_error([RerunDataIterator(iter([]))] * sets, [1] * sets, False, names, AssertionError)
    assert "Number of --validation-set-names" in str(error)
    entry = entry_up_to_pretrain(monkeypatch)
    train = corpus(tmp_path, _name())
    valid = [item for _ in range(sets) for item in (_proportion(), corpus(tmp_path, _name()))]
    argv = [*DATA_CHECK_RUN, "--train-data-path", train, "--valid-data-path", *valid,
            "--multiple-validation-sets", "--full-validation"]
    assert entry.main([*argv, "--validation-set-names", *names]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --validation-set-names gives {len(names)} name(s) for {sets} "
                           "validation set(s)"), line
    with pytest.raises(Reached):
        entry.main([*argv, "--validation-set-names", *names[:sets], *[_name() for _ in range(sets - len(names))]])


def _int32_corpus(tmp_path, name: str) -> str:
    """An indexed dataset of int32 tokens (random ids below 256), as a tokenizer of more than 65,536 tokens has its
    corpus written; returns its prefix."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = str(tmp_path / name)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.int32)
    for _ in range(random.randint(20, 40)):
        builder.add_item(torch.randint(1, 256, (random.randint(8, 24),)))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return prefix


def _own_counts_file(tmp_path, prefix: str) -> Path:
    """A ``--per-dataset-sequences-path`` file holding dataset ``prefix``'s own index counts."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    index = IndexedDataset(prefix).index
    path = tmp_path / f"{_name()}.json"
    path.write_text(json.dumps({prefix: [index.sequence_count, index.document_count]}))
    return path


def test_a_sequences_file_over_a_corpus_of_another_token_type_is_refused(tmp_path, monkeypatch):
    """Under ``--per-dataset-sequences-path`` megatron-core reads every dataset as uint16 for a tokenizer of at most
    65,536 tokens and as int32 above, whatever the ``.idx`` says: an int32 corpus with a small vocabulary was trained
    on as wrong tokens without an error. A vocabulary above 65,536 reads it right and passes."""
    import megatron.training
    from megatron.core.datasets.gpt_dataset import GPTDataset
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    prefix = _int32_corpus(tmp_path, _name())
    path = _own_counts_file(tmp_path, prefix)
    written = IndexedDataset(prefix)  # kept: a sample is a view of the dataset's memory map, closed with the dataset
    for vocabulary, refused in ((random.randint(257, 65536), True), (random.randint(65537, 200000), False)):
        monkeypatch.setattr(megatron.training, "get_tokenizer", lambda size=vocabulary: NullTokenizer(size))
        args = data_config_args(["--train-data-path", prefix, "--per-dataset-sequences-path", str(path),
                                 "--tokenizer-type", "NullTokenizer", "--vocab-size", str(vocabulary)])
        read = GPTDataset.build_low_level_dataset(prefix, data.dataset_config(args))
        assert numpy.array_equal(read[0], written[0]) != refused
        if not refused:
            assert data_sources.check_data_source(args).local == [prefix]
            continue
        with pytest.raises(ValueError, match=rf"^dataset '{prefix}' holds int32 tokens .* reads every dataset as "
                                             rf"uint16 for the run's {vocabulary}-token vocabulary"):
            data_sources.check_data_source(args)


@pytest.mark.parametrize("change", ["more sequences", "fewer sequences", "other documents", "strings", "floats",
                                    "three counts"])
def test_sequences_file_counts_other_than_the_index_s_are_refused(change, tmp_path, null_tokenizer):
    """megatron-core takes the file's ``[sequence count, document count]`` in place of the ``.idx`` header's: a stale
    file (or one of other data) stopped the dataset build after the model and optimizer were set up."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    prefix = corpus(tmp_path, _name())
    index = IndexedDataset(prefix).index
    own = [index.sequence_count, index.document_count]
    step = random.randint(1, 5)
    counts = {"more sequences": [own[0] + step, own[1] + step], "fewer sequences": [own[0] - 1, own[1] - 1],
              "other documents": [own[0], own[1] + step], "strings": list(map(str, own)),
              "floats": [float(count) for count in own], "three counts": [own[0] + step, own[1], step]}[change]
    path = tmp_path / f"{_name()}.json"
    path.write_text(json.dumps({prefix: counts}))
    args = data_config_args(["--train-data-path", prefix, "--per-dataset-sequences-path", str(path)])
    if change.endswith("sequences") or change == "three counts":
        with pytest.raises((AssertionError, ValueError)):
            build_train_dataset(args)
    with pytest.raises(ValueError, match=rf"^--per-dataset-sequences-path {path}[: ].*{prefix!r}") as refused:
        data_sources.check_data_source(args)
    assert f"[{own[0]}, {own[1]}]" in str(refused.value)


@pytest.mark.parametrize("flag", list(index_cache.CACHE_FLAGS.values()))
def test_a_cache_flag_over_a_cache_path_without_caches_is_refused_until_a_run_built_them(flag, tmp_path,
                                                                                        null_tokenizer):
    """Both flags take every index cache as built in ``--data-cache-path``: over a folder without any, megatron-core
    failed with a FileNotFoundError when it built the datasets (fast cache load) or read the first sample (deferred
    index mmap), after the model and optimizer were set up. A run without the flag builds them."""
    train = corpus(tmp_path, _name())
    cache = tmp_path / _name()
    args = data_config_args(["--train-data-path", train, flag, "--data-cache-path", str(cache)])
    with pytest.raises(FileNotFoundError):
        build_train_dataset(args)[0]
    with pytest.raises(ValueError, match=rf"^{flag} reads .* {cache} holds none: .* run once without the flag"):
        data_sources.check_data_source(args)
    build_train_dataset(data_config_args(["--train-data-path", train, "--data-cache-path", str(cache)]))
    data_sources.check_data_source(args)
    assert build_train_dataset(args)[0]["tokens"].numel() == 16


@pytest.mark.parametrize("scheme", ["s3://bucket", "msc://profile"])
def test_object_storage_prefixes_need_megatron_core_s_object_storage_flags(scheme, tmp_path, monkeypatch,
                                                                           null_tokenizer):
    """megatron-core 0.19.2 reads an ``s3://`` / ``msc://`` dataset only with ``--object-storage-cache-path`` and
    ``--no-mmap-bin-files``: without either it stopped on a bare assertion on every rank when it built the datasets
    (here before any object-storage access: the index copy is stubbed)."""
    from megatron.core.datasets import indexed_dataset
    from megatron.core.datasets.gpt_dataset import GPTDataset

    monkeypatch.setattr(indexed_dataset, "cache_index_file", lambda *_paths: None)
    remote = f"{scheme}-{_name()}/text"
    cache_path = ["--object-storage-cache-path", str(tmp_path / _name())]
    for flags, missing in (([], "--object-storage-cache-path DIR and --no-mmap-bin-files"),
                           (["--no-mmap-bin-files"], "--object-storage-cache-path DIR"),
                           (cache_path, "--no-mmap-bin-files")):
        args = data_config_args(["--data-path", remote, "--split", "100,0,0", *flags])
        with pytest.raises(AssertionError):
            GPTDataset.build_low_level_dataset(remote, data.dataset_config(args))
        with pytest.raises(ValueError, match=rf"^dataset '{remote}' is in object storage: .*; add {missing}$"):
            data_sources.check_data_source(args)
    args = data_config_args(["--data-path", remote, "--split", "100,0,0", *cache_path, "--no-mmap-bin-files"])
    assert data_sources.check_data_source(args).local == []


def test_mock_data_with_a_data_cache_path_it_cannot_write_is_refused(tmp_path, null_tokenizer):
    """megatron-core writes the mock datasets' index caches to ``--data-cache-path`` when one is given: a path it
    cannot create (here under a file) stopped the dataset build after the model and optimizer were set up."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import MockGPTDataset

    blocker = tmp_path / _name()
    blocker.write_text("a file where the cache folder's parent should be")
    cache = blocker / _name()
    args = data_config_args(["--mock-data", "--data-cache-path", str(cache)])
    with pytest.raises(Exception, match="failed to build as a mock data generator") as failed:
        BlendedMegatronDatasetBuilder(MockGPTDataset, [4, 4, 4], lambda: True, data.dataset_config(args)).build()
    assert isinstance(failed.value.__cause__, OSError)
    with pytest.raises(ValueError, match=rf"^--data-cache-path {cache} cannot be written: "):
        data_sources.check_data_source(args)
    args = data_config_args(["--mock-data", "--data-cache-path", str(tmp_path / _name())])
    assert data_sources.check_data_source(args).local == []


@pytest.mark.parametrize("flag", list(index_cache.CACHE_FLAGS.values()))
def test_a_cache_flag_over_mock_datas_built_caches_passes(flag, tmp_path, null_tokenizer):
    """``--mock-data`` writes its index caches as ``HASH-MockGPTDataset-SPLIT-...``: the check that a cache flag has a
    built cache to read looked for ``-GPTDataset-`` names only and refused such a run every time, though
    megatron-core reads those caches."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import MockGPTDataset

    cache = tmp_path / _name()
    sizes = [random.randint(2, 8) for _ in range(3)]

    def build(*flags: str):
        config = data.dataset_config(data_config_args(["--mock-data", "--data-cache-path", str(cache), *flags]))
        return BlendedMegatronDatasetBuilder(MockGPTDataset, sizes, lambda: True, config).build()

    args = data_config_args(["--mock-data", flag, "--data-cache-path", str(cache)])
    with pytest.raises(ValueError, match=rf"^{flag} reads .* holds none"):
        data_sources.check_data_source(args)
    build()  # a run without the flag writes the caches
    assert any("-MockGPTDataset-" in name for name in os.listdir(cache))
    assert data_sources.check_data_source(args).local == []
    assert build(flag)[0][0]["tokens"].numel() > 0  # megatron-core reads them under the flag


@pytest.mark.parametrize("form", ["no entry value", "empty list", "a third value"])
def test_sequences_file_entries_megatron_core_reads_right_pass(form, tmp_path, null_tokenizer):
    """megatron-core reads an empty entry (``null``, ``[]``) as none, taking the counts from the ``.idx`` itself, and
    only the first two values of a longer one: the check refused all three, though the run reads the right tokens."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    prefix = corpus(tmp_path, _name())
    index = IndexedDataset(prefix).index
    entry = {"no entry value": None, "empty list": [],
             "a third value": [index.sequence_count, index.document_count, random.randint(1, 99)]}[form]
    path = tmp_path / f"{_name()}.json"
    path.write_text(json.dumps({prefix: entry}))
    args = data_config_args(["--train-data-path", prefix, "--per-dataset-sequences-path", str(path)])
    assert data_sources.check_data_source(args).local == [prefix]
    assert build_train_dataset(args)[0]["tokens"].numel() == 16

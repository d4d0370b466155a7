"""Dataset options megatron-core's dataset config or builder refuses only when the datasets are built (after the
model and optimizer are set up and a checkpoint loaded, on every rank): the training entry refuses them at start, in
agreement with megatron-core's own verdict."""

import json
import sys
from pathlib import Path

import pytest

from megatron.oellm.training import data
from megatron.oellm.training.args import parse_oellm_argv

sys.path.insert(0, str(Path(__file__).parent))

from test_data import _corpus, _Reached, entry_up_to_pretrain  # noqa: E402

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--seq-length", "16"]


@pytest.fixture
def null_tokenizer(monkeypatch):
    """megatron's tokenizer global, as the byte corpus trains with it (the dataset config asks for one)."""
    import megatron.training
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    monkeypatch.setattr(megatron.training, "get_tokenizer", lambda: NullTokenizer(257))


def validated(argv: list[str]):
    """``argv`` parsed, with what megatron's ``validate_args`` fills in for the data config."""
    args = parse_oellm_argv(["--seq-length", "16", *argv])
    args.data_parallel_size = 1
    if args.data_path is not None and args.split is None:
        args.split = "969,30,1"
    return args


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
                                               "--data-cache-path", "CACHE"], None),
}


@pytest.mark.parametrize("case", list(CACHE_CASES))
def test_dataset_cache_flags_are_judged_as_megatron_core_judges_them(case, tmp_path, null_tokenizer):
    """``--dataloader-fast-cache-load`` beside ``--data-path``, or either cache flag without ``--data-cache-path``,
    passed every check and stopped the run with megatron-core's AssertionError when the datasets were built."""
    flags, refused_flag = CACHE_CASES[case]
    train = _corpus(tmp_path, "train")
    args = validated([{"TRAIN": train, "CACHE": str(tmp_path / "cache")}.get(flag, flag) for flag in flags])
    assert megatron_core_refuses(args) == (refused_flag is not None)
    if refused_flag is None:
        data.check_data_source(args)
        return
    with pytest.raises(ValueError, match=refused_flag):
        data.check_data_source(args)


def test_the_entry_refuses_a_fast_cache_load_without_a_cache_path_in_one_line(monkeypatch, capsys, tmp_path):
    entry = entry_up_to_pretrain(monkeypatch)
    argv = [*BASE, "--train-data-path", _corpus(tmp_path, "train"), "--dataloader-fast-cache-load"]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{entry.PROG}: error: --dataloader-fast-cache-load") and "--data-cache-path" in line
    with pytest.raises(_Reached):
        entry.main([*argv, "--data-cache-path", str(tmp_path / "cache")])


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
    train = _corpus(tmp_path, "train")
    path = tmp_path / "sequences.json"
    if content is not None:
        path.write_text(content.replace("PREFIX", train))
    args = validated(["--train-data-path", train, "--per-dataset-sequences-path", str(path)])
    with pytest.raises((OSError, ValueError, KeyError, TypeError)):
        build_train_dataset(args)
    with pytest.raises(ValueError, match=f"--per-dataset-sequences-path {path}") as refused:
        data.check_data_source(args)
    assert message.replace("PREFIX", train) in str(refused.value)


def test_a_sequences_file_naming_every_prefix_passes_and_builds(tmp_path, null_tokenizer):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    train = _corpus(tmp_path, "train")
    indexed = IndexedDataset(train)
    path = tmp_path / "sequences.json"
    path.write_text(json.dumps({train: [indexed.index.sequence_count, indexed.index.document_count]}))
    args = validated(["--train-data-path", train, "--per-dataset-sequences-path", str(path)])
    data.check_data_source(args)
    assert len(build_train_dataset(args)) >= 4

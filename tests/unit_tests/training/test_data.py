"""Data flags the training entry parses but does not honour are refused before Megatron allocates anything."""

import argparse
import re
import sys
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.megatron_args import megatron_parser
from megatron.oellm.training import data, data_sources
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import Reached, corpus, entry_up_to_pretrain, with_validated_fields

MASKING = "--dataloader-inter-document-masking"


def test_document_masking_is_refused_with_the_reason():
    """Megatron accepts the flag and only drops the dataloader's attention mask: the run trained unmasked."""
    with pytest.raises(ValueError, match="document masking is not wired in this release"):
        data_sources.check_data_args(parse_oellm_argv([MASKING]))
    data_sources.check_data_args(parse_oellm_argv([]))


def test_reset_attention_mask_is_refused_with_the_reason():
    """The flag's per-document mask reaches no attention that honours it; only the position ids would restart."""
    with pytest.raises(ValueError, match="--reset-attention-mask: the per-document attention mask"):
        data_sources.check_data_args(parse_oellm_argv(["--reset-attention-mask"]))
    data_sources.check_data_args(parse_oellm_argv(["--reset-position-ids"]))


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--sft", "--sft: supervised fine-tuning"),
        ("--fim-data", "--fim-data: fill-in-the-middle"),
        ("--hybrid-context-parallel", "--hybrid-context-parallel: megatron's hybrid context parallelism"),
    ],
)
def test_flags_that_select_another_dataset_or_sampler_are_refused(flag, message):
    """Megatron's parser accepts them; the data provider built the plain GPTDataset anyway (SFT and FIM runs
    pretrained on the raw corpus, hybrid context parallelism failed at the first step after GPU set-up)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        data_sources.check_data_args(parse_oellm_argv([flag]))


def test_an_external_dataloader_type_is_refused_as_the_datasets_are_not_loaders(monkeypatch):
    """Under ``--dataloader-type external`` megatron's ``build_pretraining_data_loader`` hands the dataset back as
    its loader; the provider's GPTDataset and MockGPTDataset are not iterators, so megatron's first ``next`` (the
    first training step, after set-up) raises TypeError. single and cyclic build a loader and pass."""
    from unittest import mock

    from megatron.core.datasets.gpt_dataset import GPTDataset, MockGPTDataset
    from megatron.training.datasets import data_samplers

    for cls in (GPTDataset, MockGPTDataset):
        dataset = object.__new__(cls)
        with mock.patch.object(data_samplers, "get_args", lambda: argparse.Namespace(dataloader_type="external")):
            assert data_samplers.build_pretraining_data_loader(dataset, 0) is dataset
        with pytest.raises(TypeError, match="is not an iterator"):
            next(dataset)
    with pytest.raises(ValueError, match=re.escape("--dataloader-type external: megatron-core 0.19.2 then hands each "
                                                   "dataset over as its own loader")):
        data_sources.check_data_args(parse_oellm_argv(["--dataloader-type", "external"]))
    for kind in ("single", "cyclic"):
        data_sources.check_data_args(parse_oellm_argv(["--dataloader-type", kind]))


def test_the_entry_refuses_document_masking_before_it_starts_anything(monkeypatch, capsys):
    """The entry's argument checks run before the throughput hook and ``pretrain`` (which set up GPUs), and the
    refusal is one error line (exit status 2), not a traceback on every rank."""
    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data", "--seq-length", "64"]
    assert entry.main([*argv, MASKING]) == 2
    assert capsys.readouterr().err.splitlines() == [f"{entry.PROG}: error: {data_sources.DOCUMENT_MASKING_UNWIRED}"]
    with pytest.raises(Reached):
        entry.main(argv)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--oellm-model", "qwen3.5-35b-a3b-tiny", "--hidden-size", "96"], "--hidden-size: the command line gives"),
        (["--oellm-model", "qwen9-nope"], "unknown model"),
        (["--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--transformer-impl", "transformer_engine"], "resolves to the torch backend"),
    ],
)
def test_the_entry_refuses_a_bad_command_line_in_one_line(monkeypatch, capsys, argv, message):
    """Card conflicts, unknown models and backend conflicts were tracebacks (one per rank under torchrun)."""
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"{entry.PROG}: error: ") and message in err[0]


def test_flags_no_card_describes_are_refused_in_one_line(monkeypatch, capsys):
    """Without ``--oellm-model`` the card is read from Megatron's flags after parsing; a refusal there is one line."""
    import megatron.training.arguments

    from megatron.oellm.megatron_args import flags_to_argv, model_flags
    from megatron.oellm.training import entry

    flops_and_peak = entry.flops_and_peak  # the real one: it reads the card before it asks CUDA for the GPU
    entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(entry, "flops_and_peak", flops_and_peak)
    monkeypatch.setattr(
        megatron.training.arguments,
        "parse_and_validate_args",
        lambda **_kwargs: with_validated_fields(parse_oellm_argv(sys.argv[1:] + ["--seq-length", "128", "--mock-data"])),
    )
    flags = {**model_flags(get_card("qwen3-30b-a3b-tiny")), "moe-layer-freq": "([0]+[1]*1)"}
    assert entry.main(["--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", *flags_to_argv(flags), "--seq-length", "128"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no model card describes these Megatron flags: --moe-layer-freq" in err[0]


@pytest.mark.parametrize("flag", ["--add-qkv-bias", "--use-rope-scaling"])
def test_flags_no_card_describes_are_refused_beside_a_named_card(monkeypatch, capsys, flag):
    """With ``--oellm-model`` the model is built from the card: these flags were accepted and did nothing."""
    entry = entry_up_to_pretrain(monkeypatch)
    assert entry.main(["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--mock-data",
                       "--seq-length", "64", flag]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"no model card describes these Megatron flags: {flag} True" in err[0]


@pytest.mark.parametrize(
    "flags, field, value",
    [
        (["--multiple-validation-sets"], "multiple_validation_sets", True),
        (["--full-validation"], "full_validation", True),
        (["--mid-level-dataset-surplus", "0.25"], "mid_level_dataset_surplus", 0.25),
        (["--allow-ambiguous-pad-tokens"], "allow_ambiguous_pad_tokens", True),
        (["--object-storage-cache-path", "/cache/s3"], "object_storage_cache_path", "/cache/s3"),
        (["--data-cache-path", "/cache", "--dataloader-fast-cache-load"], "fast_cache_load", True),
        (["--data-cache-path", "/cache", "--dataloader-defer-npy-index-mmap"], "defer_npy_index_mmap", True),
    ],
)
def test_data_flags_reach_the_dataset_config(monkeypatch, flags, field, value):
    """Megatron's parser accepts these flags; the dataset config ignored them (``--multiple-validation-sets``
    blended the validation sets into one loader, and megatron's evaluation expects one per set)."""
    import megatron.training
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    monkeypatch.setattr(megatron.training, "get_tokenizer", lambda: NullTokenizer(257))
    argv = ["--seq-length", "128", "--train-data-path", "train", "--valid-data-path", "valid-a", "valid-b", *flags]
    args = parse_oellm_argv(argv)
    args.data_parallel_size = 1
    assert getattr(data.dataset_config(args), field) == value


def test_the_runs_sample_settings_reach_the_dataset_config(monkeypatch, tmp_path):
    """The blend, split, seed, sample length, cache place and sample options of the command line are what
    megatron-core builds the samples from: one left at a default would train on other samples than the run names."""
    import random

    import megatron.training
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    monkeypatch.setattr(megatron.training, "get_tokenizer", lambda: NullTokenizer(257))
    rng = random.Random(random.random())
    seed, seq_length, threads = rng.randrange(1235, 10**6), rng.randrange(17, 4096), rng.randrange(2, 9)  # not 1234, the default
    cp, dp = rng.choice([2, 4]), rng.choice([2, 8])
    split = f"{rng.randrange(50, 100)},{rng.randrange(1, 10)},{rng.randrange(1, 10)}"
    weight = rng.randrange(1, 9) / 10
    args = parse_oellm_argv(["--seed", str(seed), "--seq-length", str(seq_length), "--data-path", str(weight), "a",
                             str(1 - weight), "b", "--split", split, "--data-cache-path", str(tmp_path),
                             "--no-mmap-bin-files", "--reset-position-ids", "--eod-mask-loss",
                             "--num-dataset-builder-threads", str(threads), "--context-parallel-size", str(cp)])
    args.data_parallel_size = dp
    config = data.dataset_config(args)
    assert config.blend == (["a", "b"], [weight, 1 - weight]) and config.blend_per_split is None
    assert (config.random_seed, config.sequence_length, config.split) == (seed, seq_length, split)
    assert (config.path_to_cache, config.mmap_bin_files, config.num_dataset_builder_threads) == (str(tmp_path), False,
                                                                                                  threads)
    assert (config.reset_position_ids, config.eod_mask_loss) == (True, True)
    assert (config.context_parallel_size, config.data_parallel_size) == (cp, dp)

    args = parse_oellm_argv(["--seq-length", str(seq_length), "--train-data-path", "t", "--valid-data-path", "v",
                             "w", "--test-data-path", "x"])
    args.data_parallel_size = dp
    config = data.dataset_config(args)
    assert config.blend is None and config.split is None
    assert config.blend_per_split == [(["t"], None), (["v", "w"], None), (["x"], None)]


@pytest.mark.parametrize("mock", [True, False])
def test_the_provider_builds_the_runs_datasets_on_every_rank(monkeypatch, mock):
    """``--mock-data`` builds MockGPTDataset, a corpus GPTDataset, with megatron's sample counts; every rank builds
    its own (megatron reads ``is_distributed``: without it only tensor-parallel rank 0 gets data loaders, and the
    forward step broadcasts no batch to the others)."""
    import random

    import megatron.training
    from megatron.core.datasets import blended_megatron_dataset_builder
    from megatron.core.datasets.gpt_dataset import GPTDataset, MockGPTDataset
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    built = []

    class Builder:
        def __init__(self, cls, sizes, is_built_on_rank, config):
            built.append((cls, sizes, is_built_on_rank(), config.mock))

        def build(self):
            return "train", "valid", "test"

    args = parse_oellm_argv(["--seq-length", "16", *(["--mock-data"] if mock else ["--data-path", "corpus", "--split", "1,0,0"])])
    args.data_parallel_size = 1
    monkeypatch.setattr(blended_megatron_dataset_builder, "BlendedMegatronDatasetBuilder", Builder)
    monkeypatch.setattr(megatron.training, "get_tokenizer", lambda: NullTokenizer(257))
    monkeypatch.setattr(megatron.training, "get_args", lambda: args)
    monkeypatch.setattr(megatron.training, "print_rank_0", lambda *_args: None)
    sizes = [random.randrange(1, 10**6), random.randrange(1, 10**4), random.randrange(1, 10**3)]
    assert data.train_valid_test_datasets(sizes) == ("train", "valid", "test")
    assert built == [(MockGPTDataset if mock else GPTDataset, sizes, True, mock)]
    assert data.train_valid_test_datasets.is_distributed is True


@pytest.mark.parametrize("flags", [[], ["--no-create-attention-mask-in-dataloader"]])
def test_the_loader_makes_no_attention_mask(monkeypatch, flags):
    """megatron's default made a [1, seq, seq] causal mask per sample (576 MiB at seq 24k), stacked it per
    micro-batch and copied it to the GPU, where no layer of either backend reads it."""
    import megatron.training
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    assert megatron_parser().parse_args([]).create_attention_mask_in_dataloader  # megatron's own default
    monkeypatch.setattr(megatron.training, "get_tokenizer", lambda: NullTokenizer(257))
    args = parse_oellm_argv(["--seq-length", "128", "--mock-data", *flags])
    args.data_parallel_size = 1
    assert data.dataset_config(args).create_attention_mask is False


def test_per_dataset_sequences_reach_the_dataset_config(monkeypatch, tmp_path):
    import json

    import megatron.training
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    monkeypatch.setattr(megatron.training, "get_tokenizer", lambda: NullTokenizer(257))
    counts = {"train": [1000, 10], "valid-a": [20, 2]}
    (tmp_path / "sequences.json").write_text(json.dumps(counts))
    args = parse_oellm_argv(
        [
            "--seq-length",
            "128",
            "--train-data-path",
            "train",
            "--valid-data-path",
            "valid-a",
            "--per-dataset-sequences-path",
            str(tmp_path / "sequences.json"),
        ]
    )
    args.data_parallel_size = 1
    assert data.dataset_config(args).sequences_per_dataset == counts


def test_a_layout_that_does_not_fit_the_card_is_refused_before_megatron_initialises(monkeypatch, capsys):
    """Megatron's validation passes a pipeline split inside a decoder layer; the model provider refused it, after
    process groups and GPU memory were set up on every rank."""
    entry = entry_up_to_pretrain(monkeypatch)
    pattern = get_card("qwen3.5-35b-a3b-tiny").hybrid_layer_pattern
    argv = ["--oellm-model", "qwen3.5-35b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--pipeline-model-parallel-size", "2",
            "--mock-data", "--seq-length", "64"]
    assert entry.main([*argv, "--hybrid-layer-pattern", pattern[:3] + "|" + pattern[3:]]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "hybrid pattern stage 'GEG' is not whole decoder layers" in err[0]
    with pytest.raises(Reached):
        entry.main([*argv, "--hybrid-layer-pattern", pattern[:4] + "|" + pattern[4:]])


def test_a_transformer_config_refusal_comes_before_megatron_initialises(monkeypatch, capsys):
    """megatron-core's TransformerConfig refuses combinations Megatron's validation passes; the model provider
    built it (and so refused) after process groups and GPU memory were set up on every rank."""
    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128", "--mock-data"]
    assert entry.main([*argv, "--moe-router-padding-for-fp8"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "TransformerConfig refuses the run's arguments" in err[0]
    assert "fp8/fp4 must be specified" in err[0]
    with pytest.raises(Reached):
        entry.main(argv)


def test_a_run_without_data_or_with_a_missing_prefix_is_refused_before_megatron_initialises(monkeypatch, capsys,
                                                                                            tmp_path):
    """Megatron opened the corpus only after building the model and optimizer (a run with no data source built
    "mock" GPTDatasets and failed there); a mistyped prefix is now one error line at start."""
    entry = entry_up_to_pretrain(monkeypatch)
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128"]
    assert entry.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [f"{entry.PROG}: error: {data_sources.NO_DATA}"]

    train = corpus(tmp_path, "train")
    assert entry.main([*argv, "--data-path", "0.3", train, "0.7", f"{train}-typo"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"no indexed dataset (PREFIX.bin and PREFIX.idx) at '{train}-typo'" in line and f"'{train}'," not in line
    Path(f"{train}.idx").rename(tmp_path / "moved.idx")
    assert entry.main([*argv, "--train-data-path", train, "--valid-data-path", corpus(tmp_path, "valid")]) == 2
    assert f"at '{train}':" in capsys.readouterr().err
    (tmp_path / "moved.idx").rename(f"{train}.idx")
    assert entry.main([*argv, "--data-args-path", str(tmp_path / "no-such-list.txt")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "--data-args-path / --per-split-data-args-path: cannot read the data paths" in line
    (tmp_path / "data-args.txt").write_text(f"1.0 {train}\n")
    for source in (["--data-path", train], ["--train-data-path", train, "--valid-data-path", corpus(tmp_path, "v2")],
                   ["--data-args-path", str(tmp_path / "data-args.txt"), "--split", "1,1,0"], ["--mock-data",
                                                                                               "--seq-length", "64"]):
        with pytest.raises(Reached):
            entry.main([*argv, *source])


@pytest.mark.parametrize("content", ['{"train": "PREFIX", "valid": "PREFIX"}', '["PREFIX"]', "not json",
                                     '{"train": [1, "PREFIX", "PREFIX"], "valid": null, "test": null}',
                                     '{"train": [["PREFIX"]], "valid": "PREFIX", "test": null}'])
def test_a_per_split_data_args_file_without_its_three_splits_is_one_error_line(content, monkeypatch, capsys,
                                                                               tmp_path):
    """megatron reads the file's ``train``, ``valid`` and ``test`` keys; a file missing one, or no JSON object, ended
    in a KeyError / TypeError traceback on every rank, one whose prefix is no string (a number, a nested list) in an
    AttributeError traceback from megatron-core's ``get_blend_from_list``."""
    entry = entry_up_to_pretrain(monkeypatch)
    path = tmp_path / "splits.json"
    path.write_text(content.replace("PREFIX", corpus(tmp_path, "train")))
    argv = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "128",
            "--per-split-data-args-path", str(path)]
    assert entry.main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f"--per-split-data-args-path {path}: not a JSON object with 'train', 'valid' and 'test'" in line

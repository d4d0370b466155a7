"""Data-source checks of the training entry (``megatron.oellm.training.data_sources`` and ``index_cache``) that a
mutation audit found untested: each test fails when the check it names is dropped or inverted."""

import errno
import os
import random
from pathlib import Path

import pytest

from megatron.oellm.training import data_sources, index_cache
from megatron.oellm.training.args import parse_oellm_argv
from tests.unit_tests.training.entry_helpers import Reached, corpus, entry_up_to_pretrain, one_error_line

BASE = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--tokenizer-type", "NullTokenizer", "--seq-length", "16"]


def _name() -> str:
    return f"corpus{random.randrange(10**6)}"


def _validated(argv: list[str]):
    """``argv`` parsed, with what megatron's ``validate_args`` fills in for the data checks."""
    args = parse_oellm_argv(["--seq-length", "16", *argv])
    args.data_parallel_size = 1
    return args


def test_multiple_validation_sets_are_refused_in_a_training_run_that_does_not_evaluate(monkeypatch, capsys,
                                                                                        tmp_path):
    """megatron-core 0.19.2 raises its NotImplementedError for ``--multiple-validation-sets`` without
    ``--full-validation`` while it builds the validation loaders of any run that trains, whatever ``--eval-iters``
    says: ``--eval-iters 0`` does not avoid it, so the entry must refuse that run too (and let the same run through
    once it gives ``--full-validation``)."""
    entry = entry_up_to_pretrain(monkeypatch)
    train, valid = corpus(tmp_path, _name()), corpus(tmp_path, _name())
    argv = [*BASE, "--train-data-path", train, "--valid-data-path", train, valid, "--multiple-validation-sets",
            "--eval-iters", "0"]
    assert entry.main(argv) == 2
    line = one_error_line(capsys)
    assert "--multiple-validation-sets: megatron-core 0.19.2 evaluates separate validation sets only with " \
           "--full-validation" in line
    assert "add --full-validation" in line
    with pytest.raises(Reached):
        entry.main([*argv, "--full-validation"])


def test_a_test_set_beside_multiple_validation_sets_names_the_flag_that_gave_it(tmp_path):
    """The refusal of a test set beside ``--multiple-validation-sets`` tells the user which flag to drop:
    ``--test-data-path`` when that flag gave it (also in a run without ``--valid-data-path``), the ``test`` entry of
    ``--per-split-data-args-path`` when the file did."""
    train, test = corpus(tmp_path, _name()), corpus(tmp_path, _name())
    multiple = ["--multiple-validation-sets", "--full-validation"]
    args = _validated(["--train-data-path", train, "--test-data-path", test, *multiple])
    with pytest.raises(ValueError, match=r"^--multiple-validation-sets with a test set from --test-data-path: .*; "
                                         r"drop --test-data-path, or drop --multiple-validation-sets$"):
        data_sources.check_data_source(args)
    split_file = tmp_path / f"{_name()}.json"
    split_file.write_text(f'{{"train": ["{train}"], "valid": ["{train}", "{test}"], "test": ["{test}"]}}')
    args = _validated(["--per-split-data-args-path", str(split_file), *multiple])
    with pytest.raises(ValueError, match=r"^--multiple-validation-sets with a test set from the 'test' paths of "
                                         r"--per-split-data-args-path: .*; drop the 'test' paths of "
                                         r"--per-split-data-args-path, or drop --multiple-validation-sets$"):
        data_sources.check_data_source(args)


def test_an_index_cache_directory_that_cannot_be_listed_is_let_through(monkeypatch, tmp_path):
    """A shared dataset whose cache directory the job may enter but not list (mode 0711): megatron-core reuses a
    cache there by opening its files by name, so the entry must not refuse the run for a cache it cannot see (as
    root, a chmod does not stop listing: the refusal of ``os.listdir`` is stood in)."""
    prefix = corpus(tmp_path, _name())
    cache = index_cache.default_index_cache(prefix)
    cache.mkdir(parents=True)
    listdir = os.listdir

    def unlistable(path=".", *rest):
        if os.fspath(path) == str(cache):
            raise PermissionError(errno.EACCES, "Permission denied", str(cache))
        return listdir(path, *rest)

    monkeypatch.setattr(os, "listdir", unlistable)
    assert index_cache.lacks_index_cache(cache) is False
    monkeypatch.setattr(index_cache, "can_write_into", lambda _directory, _mounts: False)  # the read-only dataset directory
    index_cache.check_index_cache(_validated(["--data-path", prefix]), [prefix])
    other = corpus(tmp_path, _name())  # no cache directory at all: nothing to reuse, so refused
    with pytest.raises(ValueError, match=rf"^dataset '{other}': without --data-cache-path .* cannot write"):
        index_cache.check_index_cache(_validated(["--data-path", prefix, other]), [prefix, other])


def test_a_file_at_the_dataset_prefix_is_no_index_cache(tmp_path):
    """A plain file named like the dataset prefix (raw text kept beside ``PREFIX.bin``/``.idx``) sits where megatron
    would create ``PREFIX/cache``: it can neither hold nor get a cache there, so without --data-cache-path the run is
    refused instead of failing with ``NotADirectoryError`` when megatron builds the datasets."""
    prefix = corpus(tmp_path, _name())
    Path(prefix).write_text(f"raw text {random.random()} kept next to the indexed dataset\n")
    assert index_cache.lacks_index_cache(index_cache.default_index_cache(prefix)) is True
    with pytest.raises(ValueError, match=rf"^dataset '{prefix}': without --data-cache-path .* cannot write"):
        index_cache.check_index_cache(_validated(["--data-path", prefix]), [prefix])

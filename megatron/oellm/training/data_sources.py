"""The training entry's checks of its data flags, before megatron initialises: one data source, data path lists
megatron-core can read, blend weights, ``--split`` and the sequences each split gets, each dataset's ``.bin`` against
its ``.idx``, the tokenizer files the run names and the tokenizer flags its type needs, validation and test sets, and
the dataset flags this release does not honour; each refusal is one ``ValueError`` naming the flag (megatron-core
would fail later, on every rank, or not at all).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import struct
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from types import ModuleType

    from megatron.core.datasets.indexed_dataset import _IndexReader

    from megatron.oellm.training.stored_checkpoint import StoredCheckpoint


from megatron.oellm.paths import LFS_POINTER_FIX, is_lfs_pointer
from megatron.oellm.training.index_cache import check_cache_flags, check_index_cache

Blend = tuple[list[str], list[float] | None]
"""megatron's blend of one data source: dataset prefixes and their weights (None: weighted by size)."""


BlendPerSplit = list[Blend | None]
"""megatron's blends of the train, validation and test splits (None for a split without paths)."""


DOCUMENT_MASKING_UNWIRED = (
    "--dataloader-inter-document-masking: document masking is not wired in this release (the datasets are built "
    "without document boundaries and the forward step passes none to the model), so the run would train without "
    "it; drop the flag (in a recipe row: dataloader-inter-document-masking = false) and do not compare the run "
    "with a document-masked one"
)
"""Why the training entry and ``oellm recipe`` refuse ``--dataloader-inter-document-masking``: megatron's parser
accepts it, and on its own it only turns off the dataloader's attention mask."""


RESET_ATTENTION_MASK_UNWIRED = (
    "--reset-attention-mask: the per-document attention mask it makes is not honoured (both backends' causal "
    "attention ignores a mask tensor and the GDN layers take none), so tokens would still attend across documents "
    "while their position ids restart at each one; drop the flag"
)
"""Why the training entry and ``oellm recipe`` refuse ``--reset-attention-mask``."""


OTHER_DATASET_UNWIRED = (
    "--{flag}: {what} needs megatron's {dataset}, but this entry's data provider builds the plain GPTDataset "
    "(or MockGPTDataset), so the run would pretrain on the corpus as it is; drop the flag, or train with "
    "Megatron-LM's own {script}"
)
"""Why the training entry and ``oellm recipe`` refuse a data flag that selects another megatron dataset."""


HYBRID_CP_UNWIRED = (
    "--hybrid-context-parallel: megatron's hybrid context parallelism regroups samples by their documents' lengths "
    "(cu_seqlens) and gives each micro-batch its own context-parallel group, which this entry's datasets (built "
    "without document boundaries) and forward step do not provide, so the run would fail at its first step, after "
    "GPU set-up; drop the flag and use --context-parallel-size"
)
"""Why the training entry and ``oellm recipe`` refuse ``--hybrid-context-parallel``."""


UNWIRED_DATA_FLAGS: dict[str, str] = {
    "dataloader-inter-document-masking": DOCUMENT_MASKING_UNWIRED,
    "reset-attention-mask": RESET_ATTENTION_MASK_UNWIRED,
    "sft": OTHER_DATASET_UNWIRED.format(flag="sft", what="supervised fine-tuning (loss on answers only)",
                                        dataset="SFTDataset", script="pretrain_gpt.py --sft"),
    "fim-data": OTHER_DATASET_UNWIRED.format(flag="fim-data", what="fill-in-the-middle sample rewriting",
                                             dataset="GPTFIMDataset", script="pretrain_gpt.py --fim-data"),
    "hybrid-context-parallel": HYBRID_CP_UNWIRED,
}
"""Data flags megatron's parser accepts and this release does not honour (flag name -> why it is refused)."""


EXTERNAL_LOADER_UNWIRED = (
    "--dataloader-type external: megatron-core 0.19.2 then hands each dataset over as its own loader, and this "
    "entry's datasets (GPTDataset, MockGPTDataset) are not iterators, so the run stops with a TypeError at its "
    "first step, after the model, optimizer and checkpoint are set up; use --dataloader-type single (the default) "
    "or cyclic"
)
"""Why the training entry and ``oellm recipe`` refuse ``--dataloader-type external``."""


def check_data_args(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` (the reason in :data:`UNWIRED_DATA_FLAGS`) for a data flag the run would accept but not
    honour.

    The training entry calls it right after parsing, before Megatron allocates anything, so the run stops with a
    message instead of training something other than what its command line says.
    """
    for flag, reason in UNWIRED_DATA_FLAGS.items():
        if getattr(args, flag.replace("-", "_"), False):
            raise ValueError(reason)
    if args.dataloader_type == "external":
        raise ValueError(EXTERNAL_LOADER_UNWIRED)


def evaluates(args: argparse.Namespace) -> bool:
    """Whether the run evaluates its validation and test sets: megatron's ``do_valid`` and ``do_test`` (given the
    data), with ``--full-validation`` or a positive ``--eval-iters``."""
    return bool(args.full_validation or args.eval_iters > 0)


def check_validation_sets(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for the validation-set flags megatron-core 0.19.2 refuses only once the run is under way:
    ``--multiple-validation-sets`` without ``--full-validation`` in a run that trains (a ``NotImplementedError``
    when the data loaders are built, after the model and optimizer are set up and a checkpoint loaded) or, under
    ``--skip-train``, evaluates (a ``TypeError`` at the first evaluation, which pairs the sets with
    ``--eval-iters``, a number where ``--full-validation`` makes it one count per set), and
    ``--validation-set-names`` without ``--multiple-validation-sets`` in a run that evaluates (an assertion at the
    first evaluation, after ``--eval-interval`` training iterations or at the end of a shorter run; megatron reads
    the names nowhere else, and evaluates only with ``--full-validation`` or a positive ``--eval-iters``)."""
    if args.multiple_validation_sets and not args.full_validation and (evaluates(args) or not args.skip_train):
        raise ValueError("--multiple-validation-sets: megatron-core 0.19.2 evaluates separate validation sets only "
                         "with --full-validation (else it stops after the model and optimizer are set up: with "
                         "NotImplementedError when it builds the data loaders of a run that trains, with a TypeError "
                         "at the first evaluation under --skip-train); add --full-validation, or drop "
                         "--multiple-validation-sets")
    if args.validation_set_names and not args.multiple_validation_sets and evaluates(args):
        raise ValueError("--validation-set-names names the sets of --multiple-validation-sets, which is not given: "
                         "megatron-core asserts it at the first evaluation (after --eval-interval training "
                         "iterations, or at the end of a shorter run); add --multiple-validation-sets "
                         "--full-validation, or drop --validation-set-names")


NO_DATA = ("no training data: give --data-path PREFIX (or --train-data-path / --valid-data-path / --test-data-path, "
           "--data-args-path, --per-split-data-args-path), PREFIX naming an indexed dataset's .bin/.idx files without "
           "the suffix, or --mock-data for synthetic tokens")
"""Why the training entry refuses a run without a data source: megatron then builds real datasets from nothing and
fails after the model and optimizer are set up."""


DATA_SOURCE_FLAGS: dict[str, tuple[str, ...]] = {
    "--mock-data": ("mock_data",),
    "--data-path": ("data_path",),
    "--data-args-path": ("data_args_path",),
    "--train/valid/test-data-path": ("train_data_path", "valid_data_path", "test_data_path"),
    "--per-split-data-args-path": ("per_split_data_args_path",),
}
"""The run's data sources (how a refusal names one -> its arguments): megatron reads one of them and ignores the
others (it builds mock datasets under ``--mock-data`` whatever else is given, and takes a blend over per-split
paths), asserting only some pairs in ``validate_args``."""


def given_data_sources(args: argparse.Namespace) -> list[str]:
    """The :data:`DATA_SOURCE_FLAGS` that ``args`` gives (a flag given with no value counts as given)."""
    return [flag for flag, names in DATA_SOURCE_FLAGS.items()
            if any(getattr(args, name, None) not in (None, False) for name in names)]


def check_single_data_source(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` when ``args`` give more than one data source (:data:`DATA_SOURCE_FLAGS`).

    Made on the parsed command line before megatron's ``validate_args``: for some pairs (``--mock-data`` with
    ``--data-args-path``, ``--data-path`` with ``--per-split-data-args-path``, ...) megatron trains on one source and
    ignores the other without a word; for the others it stops with an assertion traceback on every rank.
    """
    given = given_data_sources(args)
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)}: give one data source, megatron reads only one of them and ignores "
                         "the others")


SPLIT_FORM = "up to three non-negative proportions (train, validation, test) with a positive sum, e.g. 969,30,1"
"""What ``--split`` takes, for the refusals of :func:`check_split`."""


def check_split(args: argparse.Namespace, blend: Blend | None, blend_per_split: BlendPerSplit | None) -> None:
    """Raise ``ValueError`` when ``--split`` does not fit the run's data (``blend``, ``blend_per_split`` as megatron
    reads them): megatron-core's dataset config refuses it (or builds NaN split bounds) only when the datasets are
    built, after the model and optimizer are set up.

    A blend (``--data-path``, ``--data-args-path``) needs a split, which ``validate_args`` fills in for
    ``--data-path`` only; per-split paths take none.

    A run that trains (no ``--skip-train``) must also give the training split data: per-split paths need
    ``--train-data-path`` (or a ``train`` entry in ``--per-split-data-args-path``), a blend's split a positive training
    proportion. Else megatron-core builds no training dataset, and megatron's ``pretrain`` skips the training loop,
    runs the validation and test evaluations, and exits with status 0 without training a step.
    """
    from megatron.core.datasets.blended_megatron_dataset_config import parse_and_normalize_split

    if blend_per_split is not None:
        if args.split is not None:
            raise ValueError(f"--split {args.split!r}: the per-split data paths give each split its own data, and "
                             "megatron-core refuses a split beside them; drop --split")
        if blend_per_split[0] is None and not args.skip_train:
            raise ValueError("the per-split data paths give no training data (no --train-data-path, or no 'train' "
                             "in --per-split-data-args-path): megatron-core builds no training dataset and the run "
                             "ends without training a step, with exit status 0; give the training data, or "
                             "--skip-train to only evaluate")
        return
    if blend is None:
        return
    if args.split is None:
        if args.data_args_path is not None:
            raise ValueError(f"--data-args-path {args.data_args_path}: give --split, {SPLIT_FORM} (megatron fills "
                             "it in for --data-path only)")
        return
    try:
        proportions = parse_and_normalize_split(args.split)
    except (AssertionError, ValueError):
        proportions = []
    if len(proportions) != 3 or not all(0 <= value <= 1 for value in proportions):  # NaN for an all-zero split
        raise ValueError(f"--split {args.split!r}: not {SPLIT_FORM}")
    if proportions[0] == 0 and not args.skip_train:
        raise ValueError(f"--split {args.split!r} gives the training split no share of the data: megatron-core "
                         "builds no training dataset and the run ends without training a step, with exit status 0; "
                         "give training the first, positive proportion (e.g. 969,30,1), or --skip-train to only "
                         "evaluate")


def check_test_set_beside_validation_sets(
    args: argparse.Namespace, blend: Blend | None, blend_per_split: BlendPerSplit | None
) -> None:
    """Raise ``ValueError`` for ``--multiple-validation-sets`` in a run that evaluates and has a test set
    (``blend``, ``blend_per_split`` as megatron reads them): megatron-core 0.19.2's evaluation takes the test set's
    one loader for the list of validation loaders and stops with a ``TypeError`` (``len()`` of the loader) at the
    test evaluation that ends the run, after training and its last checkpoint save, so the job fails. A test set
    exists with ``--mock-data`` (megatron-core's mock datasets split 1,1,1 whatever ``--split`` says), with test
    paths beside the per-split ones, and with a blend whose ``--split`` gives the test split a share."""
    from megatron.core.datasets.blended_megatron_dataset_config import parse_and_normalize_split

    if not args.multiple_validation_sets or not evaluates(args):
        return
    if args.mock_data:
        test_set, way_out = "--mock-data (megatron-core's mock datasets always have a test split)", "drop"
    elif blend_per_split is not None:
        if blend_per_split[2] is None:
            return
        given = "--test-data-path" if args.test_data_path else "the 'test' paths of --per-split-data-args-path"
        test_set, way_out = given, f"drop {given}, or drop"
    elif blend is not None and args.split is not None and parse_and_normalize_split(args.split)[2] > 0:
        test_set, way_out = f"--split {args.split!r} (its test share)", "give the test split no share, or drop"
    else:
        return
    raise ValueError(f"--multiple-validation-sets with a test set from {test_set}: megatron-core 0.19.2 evaluates "
                     "the test set as if its one loader were the list of validation loaders and stops with a "
                     "TypeError at the test evaluation that ends the run, after training; "
                     f"{way_out} --multiple-validation-sets")


def check_validation_set_names(args: argparse.Namespace, blend_per_split: BlendPerSplit | None) -> None:
    """Raise ``ValueError`` when ``--validation-set-names`` names another number of sets than
    ``--multiple-validation-sets`` evaluates (one per prefix of the validation paths, their weights ignored; one for a
    blend or mock data): megatron-core 0.19.2 asserts the counts equal at the first evaluation, after
    ``--eval-interval`` training iterations."""
    if not (args.validation_set_names and args.multiple_validation_sets and evaluates(args)):
        return
    if blend_per_split is not None and blend_per_split[1] is None:
        return  # no validation set: nothing is evaluated
    sets = len(blend_per_split[1][0]) if blend_per_split is not None else 1
    names = len(args.validation_set_names)
    if names != sets:
        raise ValueError(f"--validation-set-names gives {names} name(s) for {sets} validation set(s) (one per prefix of "
                         "the validation data paths): megatron-core asserts the counts equal at the first evaluation, "
                         "after --eval-interval training iterations; give one name per validation set")


RANK_UNKNOWN_WARNING = r"Could not determine rank from torch\.distributed, RANK, or SLURM_PROCID"
"""The start of megatron-core 0.19.2's ``UserWarning`` when its log lines ask for the rank of a process started
without ``torch.distributed``, ``RANK`` or ``SLURM_PROCID`` (a login node), as a ``warnings`` filter's pattern."""


def _read_index(indexed_dataset: ModuleType, prefix: str) -> _IndexReader:
    """Dataset ``prefix``'s index, read by megatron-core's ``indexed_dataset`` module (passed in: importing it imports
    megatron-core); ``ValueError`` naming the dataset when megatron-core cannot read it. The reader's log lines ask
    for the rank, which a process started without a launcher has not: megatron-core's warning of that
    (:data:`RANK_UNKNOWN_WARNING`) is not shown for this read, where it came before the entry's one ``error:`` line
    on a login node; every other warning is."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", RANK_UNKNOWN_WARNING, UserWarning)
            return indexed_dataset._IndexReader(f"{prefix}.idx", False)
    except (AssertionError, OSError, ValueError, IndexError, struct.error) as error:
        raise ValueError(f"dataset {prefix!r}: megatron-core cannot read its index {prefix}.idx "
                         f"({error or type(error).__name__})") from error


def described_bin_size(index: _IndexReader) -> int:
    """The bytes of the ``.bin`` that megatron-core's ``index`` describes: its sequences lie one after another from
    byte 0, each at its byte pointer, so the last one's pointer plus its length times the token size (0 for an index
    without sequences)."""
    if index.sequence_count == 0:
        return 0
    return int(index.sequence_pointers[-1]) + int(index.sequence_lengths[-1]) * index.dtype_size


def check_bin_size(prefix: str, index: _IndexReader) -> None:
    """Raise ``ValueError`` naming both files and sizes when dataset ``prefix``'s ``.bin`` is not the size its
    ``index`` describes (:func:`described_bin_size`), as when the ``.bin`` and ``.idx`` of two datasets meet at one
    prefix or a copy was cut short. megatron-core never compares the two: a shorter ``.bin`` fails ("buffer is smaller
    than requested size") when a sample of its missing part comes up, mid-run; a longer one is read as far as the
    index says, another corpus's tokens included. Only the file's size is read."""
    actual, described = Path(f"{prefix}.bin").stat().st_size, described_bin_size(index)
    if actual == described:
        return
    if actual < described:
        size, outcome = "shorter", ("megatron-core would stop mid-run (\"buffer is smaller than requested size\") "
                                    "when a sample of the missing part comes up")
    else:
        size, outcome = "longer", "megatron-core would read only the part the index describes, another dataset's tokens"
    raise ValueError(f"dataset {prefix!r}: {prefix}.bin holds {actual} bytes, {size} than the {described} bytes its "
                     f"index {prefix}.idx describes ({index.sequence_count} sequences of {index.dtype.__name__} "
                     f"tokens), so the two files are not of one dataset: {outcome}; put the .bin and .idx one tool "
                     "wrote together at the prefix (copy both again), or rebuild the dataset")


TOKEN_SAMPLE_BYTES = 1 << 20
"""The most bytes read at each end of a dataset's ``.bin`` by :func:`check_token_ids`: a bounded sample, so the check
costs two small reads per dataset however large the corpus."""


TOKEN_SAMPLE_BUDGET_BYTES = 64 << 20
"""The bytes :func:`check_dataset_indices` lets :func:`check_token_ids` read in all, on each rank, spread evenly over
the datasets (:func:`token_sample_bytes`): every rank reads every dataset at start, so a blend of thousands of prefixes
sampled at :data:`TOKEN_SAMPLE_BYTES` per end would read GBs per rank from the shared file system. Up to 32 datasets
keep the full sample."""


def token_sample_bytes(datasets: int) -> int:
    """The bytes :func:`check_token_ids` reads at each end of each of ``datasets`` datasets' ``.bin``: an even share of
    :data:`TOKEN_SAMPLE_BUDGET_BYTES` (half of it per end), at most :data:`TOKEN_SAMPLE_BYTES`. It depends on the
    number of datasets alone, which every rank gives alike, so every rank reads the same sample and reaches the same
    verdict (no rank waits at a collective for one that refused). The ranks of a node read the same bytes, so the
    node's page cache serves all but the first: the shared file system sees about one budget per node, not per
    rank."""
    return min(TOKEN_SAMPLE_BYTES, TOKEN_SAMPLE_BUDGET_BYTES // (2 * max(datasets, 1)))


def tokenizer_vocabulary(args: argparse.Namespace) -> int | None:
    """The vocabulary size of the tokenizer megatron will build from ``args`` (its ``vocab_size``, unpadded), where
    ``args`` alone give it: ``--vocab-size`` plus the tokenizer's extra rows for a tokenizer whose vocabulary is that
    flag (:data:`~megatron.oellm.training.load_checks.VOCAB_SIZE_TOKENIZERS`); None where only the tokenizer knows."""
    from megatron.oellm.training.load_checks import TOKENIZER_EXTRA_ROWS, VOCAB_SIZE_TOKENIZERS

    if args.vocab_size is None or args.tokenizer_type not in VOCAB_SIZE_TOKENIZERS:
        return None
    return args.vocab_size + TOKENIZER_EXTRA_ROWS.get(args.tokenizer_type, 0)


def embedded_vocabulary(args: argparse.Namespace) -> int | None:
    """The embedding rows of the run, as ``args`` hold them before megatron builds the tokenizer: its
    ``padded_vocab_size`` where set, else the :func:`tokenizer_vocabulary` padded as megatron pads it; None where
    only the tokenizer knows (a Hugging Face tokenizer not yet built)."""
    from megatron.oellm.flops import megatron_padded_vocab

    padded = getattr(args, "padded_vocab_size", None)
    if padded is not None:
        return padded
    vocabulary = tokenizer_vocabulary(args)
    if vocabulary is None:
        return None
    return megatron_padded_vocab(vocabulary, args.tensor_model_parallel_size, args.make_vocab_size_divisible_by)


def check_token_ids(prefix: str, index: _IndexReader, vocabulary: int,
                    sample_bytes: int = TOKEN_SAMPLE_BYTES) -> None:
    """Raise ``ValueError`` when the first or last ``sample_bytes`` (:data:`TOKEN_SAMPLE_BYTES` unless given; at least
    one token each) of dataset ``prefix``'s ``.bin`` (read as its ``index``'s token type) hold a token id at or above
    the run's ``vocabulary`` embedding rows: a corpus tokenized with another tokenizer. megatron-core looks the ids up
    in the embedding without a bound check, which fails on the GPU (a device-side assert) at the first such sample,
    after the model and optimizer are set up. Only a sample is read: a clean sample does not prove the whole corpus
    clean."""
    import numpy

    tokens = described_bin_size(index) // index.dtype_size
    sample = max(1, sample_bytes // index.dtype_size)
    with open(f"{prefix}.bin", "rb") as file:
        parts = [numpy.fromfile(file, dtype=index.dtype, count=min(sample, tokens))]
        if tokens > sample:
            file.seek(max(sample, tokens - sample) * index.dtype_size)
            parts.append(numpy.fromfile(file, dtype=index.dtype, count=tokens - max(sample, tokens - sample)))
    largest = max((int(part.max()) for part in parts if part.size), default=None)
    if largest is not None and largest >= vocabulary:  # None: no token (empty documents only)
        raise ValueError(f"dataset {prefix!r} holds token id {largest}, at or above the run's {vocabulary}-row "
                         "vocabulary (--vocab-size padded, or the tokenizer's): it was tokenized with another "
                         "tokenizer, and the embedding lookup would fail on the GPU at the first such sample, after "
                         "the model is set up; give the tokenizer and --vocab-size the corpus was made with, or "
                         "re-tokenize it")


class IndexHeader(NamedTuple):
    """What a dataset's ``.idx`` header says, as megatron-core's index reader names it: its sequence count, its
    document count (the entries of its document index: the documents plus one) and its token type."""

    sequence_count: int
    document_count: int
    dtype: type


def check_dataset_indices(prefixes: list[str], vocabulary: int | None = None) -> dict[str, IndexHeader]:
    """The index header (:class:`IndexHeader`) of each local dataset of ``prefixes``, after a ``ValueError`` for one
    whose index megatron-core cannot read, whose index counts no sequence, or whose ``.bin`` is not the size the
    index describes (:func:`check_bin_size`): megatron-core fails on each when it builds the datasets (mapping an empty ``.bin``
    fails; with one it maps, it counts epochs of no token forever) or mid-run, after the model and optimizer are set
    up; and, given the run's ``vocabulary`` (:func:`embedded_vocabulary`), for a sampled token id it cannot embed
    (:func:`check_token_ids`). The token samples of all datasets together read at most
    :data:`TOKEN_SAMPLE_BUDGET_BYTES` (64 MiB) per rank, each dataset its share at both ends
    (:func:`token_sample_bytes`: the full 1 MiB per end up to 32 datasets, about 6.5 KiB per end at 5,000); each
    dataset still gets at least one token per end, which passes the budget only beyond four million datasets."""
    from megatron.core.datasets import indexed_dataset

    reader_log = logging.getLogger(indexed_dataset.__name__)
    level = reader_log.level
    reader_log.setLevel(logging.WARNING)  # its INFO lines, which every rank would print before Megatron initialises
    headers = {}
    unique = list(dict.fromkeys(prefixes))  # a prefix named twice (a blend) is read once
    sample_bytes = token_sample_bytes(len(unique))
    try:
        for prefix in unique:
            # megatron-core's index reader alone: GPTDataset counts the index's sequences (sequence_count); a whole
            # IndexedDataset left half-built by a bad index prints an "Exception ignored" block when collected
            index = _read_index(indexed_dataset, prefix)
            if index.sequence_count == 0:
                raise ValueError(f"dataset {prefix!r} holds no documents (its index {prefix}.idx counts 0 sequences): "
                                 "megatron-core fails on it when it builds the datasets, after the model and optimizer "
                                 "are set up (or hangs there until the job's time limit); drop it from the data paths, "
                                 "or rebuild it from input that has text")
            check_bin_size(prefix, index)
            if vocabulary is not None:
                check_token_ids(prefix, index, vocabulary, sample_bytes)
            headers[prefix] = IndexHeader(index.sequence_count, index.document_count, index.dtype)
    finally:
        reader_log.setLevel(level)
    return headers


def check_split_sequences(args: argparse.Namespace, blend: Blend | None, counts: dict[str, int]) -> None:
    """Raise ``ValueError`` when ``--split`` leaves a split of one of the local datasets of ``blend`` (``--data-path``
    / ``--data-args-path``; ``counts``: prefix -> sequence count, :func:`check_dataset_indices`) without a sequence.

    megatron-core splits each dataset of a blend by ``--split`` and builds every split that gets a share, also one
    whose share of a small dataset rounds to no sequence (the default 969,30,1 leaves the test split of a dataset of
    500 sequences or fewer empty). Its GPTDataset then counts epochs of no token forever: rank 0 loops in the dataset
    build, after the model and optimizer are set up, until the job's time limit (a blend without weights stops there
    with a bare AssertionError instead). Per-split paths (``blend`` None) take no split."""
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )
    from megatron.core.datasets.utils import Split

    if blend is None or args.split is None:
        return
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(args.split))
    for prefix, count in counts.items():
        # the sequence range of each split, as megatron-core's builder rounds it
        empty = [split.name for split in Split if matrix[split.value] is not None
                 and int(round(matrix[split.value][1] * count)) <= int(round(matrix[split.value][0] * count))]
        if empty:
            raise ValueError(f"--split {args.split!r} leaves the {' and '.join(empty)} split of dataset {prefix!r} "
                             f"({count} sequences) without a sequence: megatron-core would build it anyway and never "
                             "finish (the job hangs in its dataset build until its time limit, or under "
                             "--full-validation stops at its first evaluation); give a split whose every positive "
                             "proportion covers a sequence of each dataset (e.g. 100,0,0 trains on all of it), or "
                             "larger datasets")


def missing_dataset_files(prefix: str) -> list[str]:
    """The files of the Megatron indexed dataset ``prefix`` (``PREFIX.bin``, ``PREFIX.idx``) that are not here."""
    return [f"{prefix}{suffix}" for suffix in (".bin", ".idx") if not Path(f"{prefix}{suffix}").is_file()]


def blend_prefixes(blend: Blend | None, blend_per_split: BlendPerSplit | None) -> list[str]:
    """Every dataset prefix of megatron's ``blend`` or, without one, of its ``blend_per_split``."""
    blends = [blend] if blend is not None else [split for split in blend_per_split or [] if split is not None]
    return [prefix for prefixes, _weights in blends for prefix in prefixes]


def check_blend_weights(args: argparse.Namespace, blend: Blend | None, blend_per_split: BlendPerSplit | None) -> None:
    """Raise ``ValueError`` for a weight of a data blend (``blend``, or each split's of ``blend_per_split``) that is
    not a finite number >= 0, or for a blend whose weights add up to 0. megatron-core normalises the weights when it
    builds the datasets, after the model and optimizer: a NaN or a zero sum stopped the job on an ``assert`` without
    a message, a negative weight gave datasets of negative sizes."""
    if blend is not None:
        named = [(" / ".join(given_data_sources(args)), blend)]
    else:
        named = [(f"--per-split-data-args-path {args.per_split_data_args_path} ({split})"
                  if args.per_split_data_args_path else f"--{split}-data-path", split_blend)
                 for split, split_blend in zip(("train", "valid", "test"), blend_per_split or [], strict=False)
                 if split_blend is not None]
    for sources, (prefixes, weights) in named:
        if weights is None:
            continue
        for prefix, weight in zip(prefixes, weights, strict=True):
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(f"{sources}: the weight {weight:g} of dataset {prefix!r} is not a finite number >= 0; "
                                 "a blend is weight-prefix pairs, each weight its share of the samples")
        if sum(weights) <= 0:
            raise ValueError(f"{sources}: the weights of datasets {', '.join(map(repr, prefixes))} add up to 0, so "
                             "no dataset has a share of the samples; give at least one a positive weight")


def megatron_token_type(vocabulary: int) -> type:
    """The token type megatron-core 0.19.2 reads every dataset as under ``--per-dataset-sequences-path``, from the
    tokenizer's ``vocabulary`` size alone (the ``.idx`` header's own type is then not read): int32 above 65,536
    tokens, uint16 up to it."""
    import numpy

    return numpy.int32 if vocabulary > numpy.iinfo(numpy.uint16).max + 1 else numpy.uint16


def check_sequence_counts(path: str, prefix: str, counts: object, header: IndexHeader,
                          vocabulary: int | None) -> None:
    """Raise ``ValueError`` when the ``--per-dataset-sequences-path`` entry ``counts`` of local dataset ``prefix`` is
    no list starting with a ``[sequence count, document count]`` pair of integers or its pair is not its index's own
    ``header`` counts, or when the index's token type is not the one megatron-core then reads it as
    (:func:`megatron_token_type` of the tokenizer's ``vocabulary``, where known; uint16 or int32 in any case).
    megatron-core takes the entry's first two values and that type in place of the index header's: other counts stop
    the dataset build (a bare assertion, or "buffer is smaller than requested size") after the model and optimizer are
    set up, another type reads every token wrong without an error. An empty entry (``null``, ``[]``) is none:
    megatron-core then reads the header itself."""
    import numpy

    if not counts:
        return
    own = f"[{header.sequence_count}, {header.document_count}]"
    if not (isinstance(counts, list) and len(counts) >= 2 and all(type(count) is int for count in counts[:2])):
        raise ValueError(f"--per-dataset-sequences-path {path}: the counts of dataset {prefix!r} are {counts!r}, not a "
                         f"[sequence count, document count] pair of integers (its index {prefix}.idx says {own}); "
                         "rebuild the file with megatron's tools/build_sequences_per_dataset.py, or drop the flag")
    if counts[:2] != [header.sequence_count, header.document_count]:
        raise ValueError(f"--per-dataset-sequences-path {path} gives dataset {prefix!r} the counts {counts[:2]}, but its "
                         f"index {prefix}.idx says {own} (sequences, document index entries): megatron-core would "
                         "read the index with the file's counts and fail when it builds the datasets, after the model "
                         "and optimizer are set up (the file is stale, or of other data); rebuild it for the "
                         "datasets as they are now, or drop the flag")
    kept = (numpy.uint16, numpy.int32) if vocabulary is None else (megatron_token_type(vocabulary),)
    if header.dtype not in kept:
        read_as = ("uint16 or int32 by the tokenizer's vocabulary size" if vocabulary is None else
                   f"{kept[0].__name__} for the run's {vocabulary}-token vocabulary (uint16 up to 65,536, int32 above)")
        raise ValueError(f"dataset {prefix!r} holds {header.dtype.__name__} tokens (its index {prefix}.idx), but under "
                         f"--per-dataset-sequences-path megatron-core does not read the index's token type: it reads "
                         f"every dataset as {read_as}, so it would train on wrong tokens without an error; drop "
                         "--per-dataset-sequences-path (megatron-core then reads each index's type), or tokenize the "
                         "corpus with the token type the vocabulary size gives")


def check_sequences_file(args: argparse.Namespace, headers: dict[str, IndexHeader]) -> None:
    """Raise ``ValueError`` when ``--per-dataset-sequences-path`` is unreadable, no JSON object, lacks one of the
    local datasets of ``headers`` (prefix -> :class:`IndexHeader`, :func:`check_dataset_indices`), or gives one counts
    or a token type megatron-core would read it with wrongly (:func:`check_sequence_counts`): megatron-core reads the
    file and looks every such prefix up in it when it builds the datasets (a ``FileNotFoundError`` or ``KeyError``
    there), and trusts what it finds in place of the index header."""
    path = args.per_dataset_sequences_path
    if path is None:
        return
    try:
        counts = sequences_per_dataset(args)
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"--per-dataset-sequences-path {path}: cannot read it as JSON ({error})") from error
    if not isinstance(counts, dict):
        raise ValueError(f"--per-dataset-sequences-path {path}: not a JSON object of dataset prefix -> "
                         "[sequence count, document count]")
    missing = [prefix for prefix in headers if prefix not in counts]
    if missing:
        raise ValueError(f"--per-dataset-sequences-path {path} has no counts for {', '.join(map(repr, missing))}: "
                         "megatron-core looks every dataset prefix up in it; rebuild it for the run's data paths, or "
                         "drop the flag")
    vocabulary = tokenizer_vocabulary(args)
    for prefix, header in headers.items():
        check_sequence_counts(path, prefix, counts[prefix], header, vocabulary)


TOKENIZER_PATH_STARTS = ("/", "./", "../", "~")
"""How a ``--tokenizer-model`` written as a path starts: absolute, from the current directory or its parent, or from
a home directory. No Hugging Face hub name (``name``, ``org/name``) starts so."""


def written_as_local_path(tokenizer_model: str) -> bool:
    """Whether ``--tokenizer-model`` ``tokenizer_model`` names a local path rather than a hub name: it starts as a
    path does (:data:`TOKENIZER_PATH_STARTS`), has more parts than a hub name's ``org/name``, or its first part is a
    folder here (``tokenizers/oelm`` beside a ``tokenizers`` folder: a mistyped path, not the hub organisation
    ``tokenizers``). ``org/name`` without a local ``org`` folder reads as a hub name."""
    if tokenizer_model.startswith(TOKENIZER_PATH_STARTS):
        return True
    parts = tokenizer_model.split("/")
    return len(parts) > 2 or (len(parts) == 2 and Path(parts[0]).is_dir())


def absent_tokenizer_path(tokenizer_model: str) -> bool:
    """Whether ``--tokenizer-model`` ``tokenizer_model`` names a local path (:func:`written_as_local_path`) where
    nothing is (from the current directory, where the run starts; a ``~`` reaches the run as it stands). Such a value
    can be no hub name: megatron-core's tokenizer library fails on it when megatron initialises, on every rank
    (transformers says "Repo id must be in the form ...", or looks a mistyped ``org/name`` up on the hub). The one
    rule of the training entry and of ``oellm recipe``'s login-node check."""
    return written_as_local_path(tokenizer_model) and not Path(tokenizer_model).exists()


TOKENIZER_FOLDER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                                    "vocab.txt", "merges.txt", "spiece.model", "sentencepiece.bpe.model"})
"""File names of which transformers' ``AutoTokenizer.from_pretrained`` needs at least one in a tokenizer folder (with
any other ``*.model`` or ``*.tiktoken`` file): a folder without any fails ("Couldn't instantiate the backend
tokenizer ...")."""


def unloadable_tokenizer_folder(tokenizer_model: str) -> str | None:
    """Why ``AutoTokenizer.from_pretrained`` cannot load the existing local ``--tokenizer-model`` ``tokenizer_model``,
    or None (nothing there, or a folder holding a tokenizer file): a file (transformers takes it for a malformed hub
    name: "Repo id must be in the form ..."), or a folder without any :data:`TOKENIZER_FOLDER_FILES`. A folder that
    cannot be listed is let through, and so is an empty value (a recipe's unset tokenizer; ``Path("")`` would be the
    current folder). The path is judged as written, ``~`` included, as :func:`absent_tokenizer_path` judges it and
    transformers opens it: a ``~`` the shell did not expand is a folder of that name here, not the home folder."""
    if not tokenizer_model:
        return None
    path = Path(tokenizer_model)
    if path.is_file():
        return f"is a file, and AutoTokenizer loads a tokenizer folder, never a single file (its folder, {path.parent}, where it holds the tokenizer's files)"
    try:
        names = [entry.name for entry in path.iterdir()] if path.is_dir() else None
    except OSError:
        return None
    if names is None or any(name in TOKENIZER_FOLDER_FILES or name.endswith((".model", ".tiktoken"))
                            for name in names):
        return None
    return (f"is a folder without a tokenizer file (none of {', '.join(sorted(TOKENIZER_FOLDER_FILES))}), which "
            "AutoTokenizer cannot load")


TOKENIZER_FILE_FLAGS: dict[str, tuple[str, str]] = {"vocab_file": ("--vocab-file", "vocabulary"),
                                                    "merge_file": ("--merge-file", "BPE merges")}
"""The tokenizer file arguments (argument -> flag, what the file holds)."""


DOWNLOADED_TOKENIZER_FILES: dict[str, tuple[str, ...]] = {
    "GPT2BPETokenizer": ("vocab_file", "merge_file"),
    "BertWordPieceLowerCase": ("vocab_file",),
    "BertWordPieceCase": ("vocab_file",),
}
"""megatron's own ``--tokenizer-type`` values and the file arguments each reads: megatron-core 0.19.2 downloads a file
not given from S3 when megatron initialises, which needs the ``wget`` package and network on the node (else a
traceback on every rank). Given the files or not, it then builds the tokenizer with transformers'
``AutoTokenizer.from_pretrained`` of a hub name (:data:`MEGATRON_HUB_TOKENIZERS`), which reads that tokenizer's
configuration from huggingface.co or the node's Hugging Face cache: an offline node needs it cached."""


MEGATRON_HUB_TOKENIZERS: dict[str, str] = {
    "GPT2BPETokenizer": "gpt2",
    "BertWordPieceLowerCase": "bert-large-uncased",
    "BertWordPieceCase": "bert-large-cased",
}
"""The Hugging Face hub tokenizer megatron-core 0.19.2 loads for each of :data:`DOWNLOADED_TOKENIZER_FILES`' types
(with the vocabulary and merges files as given or downloaded)."""


FILE_READING_TOKENIZERS = (*DOWNLOADED_TOKENIZER_FILES, "HuggingFaceTokenizer")
"""The ``--tokenizer-type`` values megatron-core 0.19.2 hands ``--vocab-file`` / ``--merge-file`` to; the others
(Null, SentencePiece, TikToken, multimodal, SFT) never read them, so a path left over from another tokenizer is no
error there."""

HUB_TOKENIZER_FORM = ("an existing tokenizer directory (a Hugging Face tokenizer's folder, as save_pretrained "
                      "writes it: AutoTokenizer loads no single file), or a hub name (org/name, not written as a "
                      "path; a node without network needs the directory)")
"""What ``--tokenizer-model`` must be for a tokenizer megatron-core builds with ``AutoTokenizer.from_pretrained``."""
SENTENCEPIECE_FORM = "the path of an existing SentencePiece model file (tokenizer.model)"
"""What ``--tokenizer-model`` must be for a tokenizer megatron-core builds with sentencepiece."""

TOKENIZER_MODEL_FORMS: dict[str, str] = {
    "HuggingFaceTokenizer": HUB_TOKENIZER_FORM,
    "SFTTokenizer": HUB_TOKENIZER_FORM,
    "SentencePieceTokenizer": SENTENCEPIECE_FORM,
    "GPTSentencePieceTokenizer": SENTENCEPIECE_FORM,
    "Llama2Tokenizer": SENTENCEPIECE_FORM,
    "TikTokenizer": "the path of an existing tiktoken vocabulary file (a .json file)",
}
"""The ``--tokenizer-type`` values megatron-core 0.19.2 hands ``--tokenizer-model`` to, each with what the value must
be (the hint of :func:`check_tokenizer_files`' refusal): transformers' ``AutoTokenizer.from_pretrained`` (the
Hugging Face and SFT tokenizers) loads a folder or downloads a hub name, and takes a file path for a malformed hub
name; sentencepiece and tiktoken read one file. The others (Null, GPT-2 BPE, BERT, multimodal) never read it, so a
path left over from another tokenizer is no error there."""

MEGATRON_CACHE_SUFFIXES = {"vocab_file": "_vocab", "merge_file": "_merges"}
"""The suffix of each tokenizer file in megatron-core's download cache (``<TYPE><suffix>`` under its cache folder)."""


def downloaded_before(tokenizer_type: str, name: str) -> bool:
    """Whether megatron-core's download cache already holds the file argument ``name`` of ``tokenizer_type``
    (megatron-core then reads it there and downloads nothing from S3): a node with a filled cache needs no flag for
    it, though still the hub tokenizer's configuration (:data:`MEGATRON_HUB_TOKENIZERS`)."""
    try:
        from megatron.core.tokenizers.text.libraries.megatron_hf_tokenizer import MEGATRON_CACHE
    except ImportError:
        return False
    return Path(MEGATRON_CACHE, tokenizer_type + MEGATRON_CACHE_SUFFIXES[name]).exists()


def check_tokenizer_files(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for a tokenizer file ``args`` name that is not there: a ``--vocab-file`` or
    ``--merge-file`` that is no file where the tokenizer type reads it (:data:`FILE_READING_TOKENIZERS`), a megatron
    tokenizer type without the files it would download and has not cached (:data:`DOWNLOADED_TOKENIZER_FILES`,
    :func:`downloaded_before`), a ``--tokenizer-model`` path where nothing is (:func:`absent_tokenizer_path`), where
    the tokenizer type reads one (:data:`TOKENIZER_MODEL_FORMS`, whose hint the refusal gives), for the types
    sentencepiece and tiktoken read, any value that is no file (a hub name or bare word too: they open a local file
    only), or, for the types transformers' ``AutoTokenizer`` loads, a file or a folder without tokenizer files
    (:func:`unloadable_tokenizer_folder`). megatron-core builds
    the tokenizer when megatron initialises, on every rank: a missing file waited out huggingface.co's retries (some
    30 s) and was then refused under the hub tokenizer's name, a file left to download ended in a ``wget`` traceback."""
    for name, (flag, content) in TOKENIZER_FILE_FLAGS.items():
        value = getattr(args, name)
        if value is None or args.tokenizer_type not in FILE_READING_TOKENIZERS:
            continue
        if not Path(value).is_file():
            raise ValueError(f"{flag} {value!r} is no file (relative to {Path.cwd()}): megatron-core would fail to "
                             "build the tokenizer when megatron initialises, naming a hub tokenizer instead of this "
                             f"file; give the path of the tokenizer's {content} file")
        check_not_lfs_pointer(Path(value), flag)
    needed = [TOKENIZER_FILE_FLAGS[name][0] for name in DOWNLOADED_TOKENIZER_FILES.get(args.tokenizer_type, ())
              if getattr(args, name) is None and not downloaded_before(args.tokenizer_type, name)]
    if needed:
        hub_name = MEGATRON_HUB_TOKENIZERS[args.tokenizer_type]
        raise ValueError(f"--tokenizer-type {args.tokenizer_type} needs {' and '.join(needed)}: without them "
                         "megatron-core downloads its files from S3 when megatron initialises, which needs the wget "
                         f"package and network on every node (else a traceback); give the files ({hub_name}'s "
                         f"{'vocab.json and merges.txt' if args.tokenizer_type == 'GPT2BPETokenizer' else 'vocab.txt'}"
                         f"; megatron-core still loads the hub tokenizer {hub_name}'s "
                         "configuration, from huggingface.co or, on a node without network, the Hugging Face cache), "
                         "or --tokenizer-type HuggingFaceTokenizer --tokenizer-model NAME_OR_DIRECTORY (a directory "
                         "needs no network)")
    model, form = args.tokenizer_model, TOKENIZER_MODEL_FORMS.get(args.tokenizer_type)
    if model is None or form is None:
        return
    if absent_tokenizer_path(model):
        raise ValueError(f"--tokenizer-model {model!r} does not exist (relative to {Path.cwd()}): megatron-core would "
                         f"fail to build the {args.tokenizer_type} when megatron initialises; give {form}")
    if form != HUB_TOKENIZER_FORM:
        if not Path(model).is_file():
            raise ValueError(f"--tokenizer-model {model!r} is no file (relative to {Path.cwd()}): megatron-core's "
                             f"{args.tokenizer_type} opens it as a local file, never a hub name or a folder, and would "
                             f"fail when megatron initialises, on every rank; give {form}")
        check_not_lfs_pointer(Path(model), "--tokenizer-model")
        return
    reason = unloadable_tokenizer_folder(model)
    if reason is not None:
        raise ValueError(f"--tokenizer-model {model!r} {reason}: megatron-core would fail to build the "
                         f"{args.tokenizer_type} when megatron initialises, on every rank; give the folder the "
                         "tokenizer's save_pretrained wrote (its tokenizer.json / tokenizer_config.json), or a hub name")
    pointer = lfs_pointer_in_tokenizer_folder(model, use_fast=not args.tokenizer_hf_no_use_fast)
    if pointer is not None:
        raise ValueError(lfs_pointer_refusal(pointer, "--tokenizer-model"))


FAST_TOKENIZER_FILE = "tokenizer.json"
"""The file a fast Hugging Face tokenizer loads from its folder where it is there, instead of the slow tokenizer's."""


def tokenizer_files_read(folder: Path, use_fast: bool) -> list[Path]:
    """The :data:`TOKENIZER_FOLDER_FILES` of tokenizer folder ``folder`` that ``AutoTokenizer.from_pretrained``
    reads (``use_fast``: megatron-core's default, off under ``--tokenizer-hf-no-use-fast``): the configuration and,
    for a fast tokenizer whose ``tokenizer.json`` is there, that file alone; else every slow tokenizer's file (a fast
    tokenizer without ``tokenizer.json`` converts the slow one's). A Mistral-style repository keeps its
    ``tokenizer.model`` in Git LFS and a small ``tokenizer.json`` in git: a clone without git-lfs loads."""
    fast = folder / FAST_TOKENIZER_FILE
    if use_fast and fast.is_file():
        return [folder / "tokenizer_config.json", fast]
    return [folder / name for name in sorted(TOKENIZER_FOLDER_FILES - {FAST_TOKENIZER_FILE})]


def lfs_pointer_in_tokenizer_folder(tokenizer_model: str, use_fast: bool = True) -> Path | None:
    """The first file :func:`tokenizer_files_read` names in the local ``--tokenizer-model`` folder
    ``tokenizer_model`` that is a Git LFS pointer (:func:`megatron.oellm.paths.is_lfs_pointer`), or None (none is,
    or no such folder: a hub name). A Hugging Face model repository cloned without git-lfs holds one for its
    ``tokenizer.json``."""
    if not tokenizer_model or not Path(tokenizer_model).is_dir():
        return None
    return next((path for path in tokenizer_files_read(Path(tokenizer_model), use_fast) if is_lfs_pointer(path)),
                None)


def check_not_lfs_pointer(path: Path, flag: str) -> None:
    """Raise ``ValueError`` when the tokenizer file ``path`` (given by, or in the folder of, ``flag``) is a Git LFS
    pointer (:func:`megatron.oellm.paths.is_lfs_pointer`): the tokenizer's library failed on it on every rank when
    megatron initialises, with a parse error that names neither the file nor the cause."""
    if is_lfs_pointer(path):
        raise ValueError(lfs_pointer_refusal(path, flag))


def lfs_pointer_refusal(path: Path, flag: str) -> str:
    """The refusal of tokenizer file ``path`` (given by, or in the folder of, ``flag``), a Git LFS pointer."""
    return f"{flag}: {path} is a Git LFS pointer file, not the tokenizer's file: {LFS_POINTER_FIX}"


VOCAB_SIZE_BUILT_TOKENIZERS = ("NullTokenizer", "NullMultimodalTokenizer")
"""The ``--tokenizer-type`` values megatron-core 0.19.2's ``build_tokenizer`` builds from ``--vocab-size`` alone:
without it their constructor gets no vocabulary size and fails (a ``TypeError``) when megatron initialises."""

PATHLESS_TOKENIZERS = ("MultimodalTokenizer",)
"""The ``--tokenizer-type`` values megatron-core 0.19.2's ``build_tokenizer`` hands no tokenizer path, whatever
``--tokenizer-model`` says, and so stops on "Tokenizer path must be specified"."""

TOKENIZER_TYPE_FORM = ("--tokenizer-type NullTokenizer --vocab-size N (mock data, or --vocab-size 257 for a byte "
                       "corpus) or --tokenizer-type HuggingFaceTokenizer --tokenizer-model NAME_OR_DIRECTORY")
"""The tokenizer flags :func:`check_tokenizer_given` suggests for a command line without ``--tokenizer-type``."""


def built_tokenizer_setting(args: argparse.Namespace, sources: list[StoredCheckpoint],
                            name: str) -> tuple[str | None, str]:
    """The value of tokenizer argument ``name`` (``tokenizer_type`` or ``tokenizer_model``) megatron-core 0.19.2
    builds the tokenizer with, and where it comes from ('' for the command line, else the checkpoint's flag and
    folder). Under ``--use-checkpoint-args`` (``sources``: the checkpoints it reads,
    :func:`~megatron.oellm.training.load_checks.checkpoint_args_sources`) and megatron's default
    ``--use-tokenizer-model-from-checkpoint-args``, ``load_args_from_checkpoint`` sets it from every checkpoint that
    stores one, ``--load``'s after ``--pretrained-checkpoint``'s; otherwise the command line's stands."""
    if args.use_tokenizer_model_from_checkpoint_args:
        for checkpoint in reversed(sources):
            stored = getattr(checkpoint.common.get("args"), name, None)
            if stored is not None:
                return stored, checkpoint.named_by
    return getattr(args, name), ""


def check_tokenizer_given(args: argparse.Namespace, sources: list[StoredCheckpoint]) -> None:
    """Raise ``ValueError`` when megatron-core 0.19.2's ``build_tokenizer``, which megatron calls for every run (mock
    data included) right after ``validate_args``, on every rank, would fail for want of a flag: no
    ``--tokenizer-type`` ("tokenizer_type None is not supported"), a type that reads ``--tokenizer-model``
    (:data:`TOKENIZER_MODEL_FORMS`) without one, or one of :data:`PATHLESS_TOKENIZERS` (both an assertion naming no
    flag, "Tokenizer path must be specified"), a type of :data:`VOCAB_SIZE_BUILT_TOKENIZERS` without
    ``--vocab-size``. The type and model are those a checkpoint ``--use-checkpoint-args`` reads supplies, where one
    does (``sources``, :func:`built_tokenizer_setting`); no checkpoint supplies ``--vocab-size``. Under
    ``--tokenizer-metadata``, whose file names the tokenizer library (one of which needs no path), the path is left
    to megatron."""
    tokenizer_type, type_source = built_tokenizer_setting(args, sources, "tokenizer_type")
    if tokenizer_type is None:
        nor = " (nor does a checkpoint --use-checkpoint-args reads store one)" if args.use_checkpoint_args else ""
        raise ValueError(f"no --tokenizer-type{nor}: megatron-core builds a tokenizer for every run, mock data "
                         "included, and stops on every rank when megatron initialises (\"tokenizer_type None is not "
                         f"supported\"); give {TOKENIZER_TYPE_FORM}")
    named = f"--tokenizer-type {tokenizer_type}" + (f" (stored in {type_source})" if type_source else "")
    if tokenizer_type in VOCAB_SIZE_BUILT_TOKENIZERS and not args.vocab_size:
        raise ValueError(f"{named} needs --vocab-size: megatron-core builds that tokenizer from it when megatron "
                         "initialises and fails on every rank without it (no checkpoint supplies it); give "
                         "--vocab-size N (the corpus's vocabulary; 257 for a byte corpus)")
    if args.metadata_path is not None:
        return
    if tokenizer_type in PATHLESS_TOKENIZERS:
        raise ValueError(f"{named}: megatron-core's build_tokenizer hands it no tokenizer path (--tokenizer-model or "
                         "not) and stops on every rank when megatron initialises (\"Tokenizer path must be "
                         "specified\"); give --tokenizer-type HuggingFaceTokenizer --tokenizer-model NAME_OR_DIRECTORY")
    form = TOKENIZER_MODEL_FORMS.get(tokenizer_type)
    if form is not None and built_tokenizer_setting(args, sources, "tokenizer_model")[0] is None:
        raise ValueError(f"{named} needs --tokenizer-model: megatron-core builds the tokenizer from it when megatron "
                         "initialises and, without it, stops on every rank on an assertion naming no flag "
                         f"(\"Tokenizer path must be specified\"); give --tokenizer-model: {form}")


BLEND_FORM = ("give dataset prefixes (PREFIX PREFIX ...) or weight-prefix pairs (WEIGHT PREFIX WEIGHT PREFIX ...), "
              "each weight a number before its prefix; megatron-core refuses a list that mixes numbers into other "
              "places with a bare AssertionError")
"""What megatron-core's ``get_blend_from_list`` takes for a data path list, for the refusal of :func:`check_data_source`."""


def reads_as_number(word: str) -> bool:
    """Whether data path list entry ``word`` reads as a number, as megatron-core's ``get_blend_from_list`` reads a
    blend weight."""
    try:
        float(word)
    except ValueError:
        return False
    return True


WEIGHT_AS_PREFIX = ("; a number there is a weight megatron-core read as a dataset prefix, since it reads a list of an "
                    "odd word count, or with a weight after its prefix, as prefixes without weights: a weighted data "
                    "path list is WEIGHT PREFIX pairs, each weight before its prefix")
"""What :func:`check_data_source` adds when a missing dataset prefix reads as a number."""


DATA_PATH_LISTS = ("data_path", "train_data_path", "valid_data_path", "test_data_path")
"""The data path arguments megatron's parser reads as lists (``nargs='*'``): a flag given without a value is ``[]``."""


EMPTY_LIST = ("megatron-core reads a data path list of no words as nothing to unpack and fails when it builds the "
              "datasets; give dataset prefixes (PREFIX PREFIX ...) or weight-prefix pairs (WEIGHT PREFIX ...)")
"""Why :func:`check_data_source` refuses a data path list without a word."""


class DataPrefixes(NamedTuple):
    """The run's dataset prefixes as :func:`check_data_source` found them (none of either with ``--mock-data``), in
    the blend's order: read once, for the entry's later checks."""

    local: list[str]
    """Prefixes of indexed datasets on a file system, whose files it checked, for the index cache checks."""
    remote: list[str]
    """Prefixes in object storage (``s3://``, ``msc://``), whose ``.idx`` megatron-core 0.19.2 copies into
    ``--object-storage-cache-path``, for :func:`~megatron.oellm.training.index_cache.check_cache_shared_by_nodes`."""


def check_data_source(args: argparse.Namespace) -> DataPrefixes:
    """Raise ``ValueError`` for a tokenizer file the run names that is not there (:func:`check_tokenizer_files`), and
    when a run without ``--mock-data`` names no dataset, a data path list that is neither
    prefixes nor weight-prefix pairs (:data:`BLEND_FORM`) or has no word (:data:`EMPTY_LIST`), blend weights
    megatron-core cannot make shares of (:func:`check_blend_weights`), a ``--split`` that
    does not fit its data or gives a run that trains no training data (:func:`check_split`), a test set beside
    ``--multiple-validation-sets`` (:func:`check_test_set_beside_validation_sets`), validation set names that do not
    count its sets (:func:`check_validation_set_names`), or leaves a split of a
    dataset empty (:func:`check_split_sequences`), object-storage prefixes without the flags megatron-core reads
    them with (:func:`check_object_storage_flags`; their files are left to megatron), a local prefix without its
    ``.bin`` and ``.idx`` files, with an index megatron-core cannot read, without sequences,
    describing another ``.bin`` size, or with a sampled token id past the run's vocabulary
    (:func:`check_dataset_indices`), or whose index cache megatron could neither
    reuse nor write (:func:`check_index_cache`); and,
    with or without ``--mock-data``, for dataset options megatron-core refuses (:func:`check_cache_flags`,
    :func:`check_sequences_file`) and a ``--data-cache-path`` it could neither reuse nor write
    (:func:`~megatron.oellm.training.index_cache.check_data_cache_path`).

    Megatron opens the corpus only after it has set up process groups, built the model and optimizer and loaded a
    checkpoint, on every rank; a mistyped path is a message at start instead. Returns the run's local and
    object-storage dataset prefixes (:class:`DataPrefixes`), for the entry's
    :func:`~megatron.oellm.training.index_cache.stale_cache_warnings` and
    :func:`~megatron.oellm.training.index_cache.check_cache_shared_by_nodes`.
    """
    from megatron.core.datasets.object_storage_utils import is_object_storage_path
    from megatron.training.utils import get_blend_and_blend_per_split

    check_tokenizer_files(args)  # megatron builds the tokenizer also for mock data
    if args.mock_data:
        check_test_set_beside_validation_sets(args, None, None)
        check_validation_set_names(args, None)
        check_cache_flags(args, None)
        check_index_cache(args, [])  # megatron-core writes the mock datasets' index caches to --data-cache-path too
        check_sequences_file(args, {})
        return DataPrefixes([], [])
    empty = [f"--{name.replace('_', '-')}" for name in DATA_PATH_LISTS if getattr(args, name, None) == []]
    if empty:  # megatron-core's get_blend_from_list fails on an empty list with "not enough values to unpack"
        raise ValueError(f"{' and '.join(empty)} without a value (an empty shell variable?): {EMPTY_LIST}")
    try:
        blends = get_blend_and_blend_per_split(args)
    except OSError as error:
        raise ValueError(f"--data-args-path / --per-split-data-args-path: cannot read the data paths ({error})") from error
    except AssertionError as error:  # megatron-core's get_blend_from_list: a number where a weight's prefix goes
        raise ValueError(f"{' / '.join(given_data_sources(args))}: {BLEND_FORM}") from error
    except (AttributeError, KeyError, TypeError, ValueError) as error:  # AttributeError: a prefix that is no string
        if args.per_split_data_args_path is None:
            if isinstance(error, UnicodeDecodeError):
                raise ValueError(f"--data-args-path {args.data_args_path} is not a text file ({error}): give a file "
                                 "of dataset prefixes or weight-prefix pairs") from error
            if args.data_args_path is not None:  # a file without a word: get_blend_from_list's empty list
                raise ValueError(f"--data-args-path {args.data_args_path} is empty: {EMPTY_LIST}") from error
            raise
        raise ValueError(  # a JSON that is no {"train", "valid", "test"} object of data paths
            f"--per-split-data-args-path {args.per_split_data_args_path}: not a JSON object with 'train', 'valid' and "
            "'test' data paths (each null, a string, or a list of prefixes or of weight-prefix pairs) "
            f"({type(error).__name__}: {error})") from error
    prefixes = blend_prefixes(*blends)
    if not prefixes:
        raise ValueError(NO_DATA)
    check_blend_weights(args, *blends)
    check_split(args, *blends)
    check_test_set_beside_validation_sets(args, *blends)
    check_validation_set_names(args, blends[1])
    remote = [prefix for prefix in prefixes if is_object_storage_path(prefix)]
    check_object_storage_flags(args, remote)
    local = [prefix for prefix in prefixes if not is_object_storage_path(prefix)]
    missing = list(dict.fromkeys(prefix for prefix in local if missing_dataset_files(prefix)))
    if missing:
        raise ValueError(f"no indexed dataset (PREFIX.bin and PREFIX.idx) at {', '.join(map(repr, missing))}: check "
                         "the data paths (--data-path, --train/valid/test-data-path or the file of --data-args-path / "
                         "--per-split-data-args-path); a prefix names the files without their suffix"
                         f"{WEIGHT_AS_PREFIX if any(map(reads_as_number, missing)) else ''}")
    check_cache_flags(args, blends[0])  # megatron-core's dataset config refuses these before it builds a split
    headers = check_dataset_indices(local, embedded_vocabulary(args))
    check_split_sequences(args, blends[0], {prefix: header.sequence_count for prefix, header in headers.items()})
    check_index_cache(args, local)
    check_sequences_file(args, headers)
    return DataPrefixes(local, remote)


def check_object_storage_flags(args: argparse.Namespace, remote: list[str]) -> None:
    """Raise ``ValueError`` when the run reads object-storage dataset prefixes ``remote`` (``s3://``, ``msc://``)
    without what megatron-core 0.19.2 reads them with: ``--object-storage-cache-path`` (the local folder it copies
    each index into) and ``--no-mmap-bin-files`` (it cannot memory-map a ``.bin`` in object storage). Without either
    it stops on a bare assertion on every rank when it builds the datasets, after the model and optimizer are set
    up."""
    if not remote:
        return
    missing = [flag for flag, absent in (("--object-storage-cache-path DIR", args.object_storage_cache_path is None),
                                         ("--no-mmap-bin-files", args.mmap_bin_files)) if absent]
    if missing:
        raise ValueError(f"dataset {remote[0]!r} is in object storage: megatron-core reads such datasets only with "
                         "--object-storage-cache-path (a local folder for their index copies) and --no-mmap-bin-files "
                         "(it cannot memory-map their .bin), and otherwise stops on a bare assertion on every rank "
                         f"after the model and optimizer are set up; add {' and '.join(missing)}")


def sequences_per_dataset(args: argparse.Namespace) -> dict | None:
    """The ``--per-dataset-sequences-path`` JSON (dataset prefix -> sequence and document counts), or None."""
    if args.per_dataset_sequences_path is None:
        return None
    with open(args.per_dataset_sequences_path, encoding="utf-8") as file:
        return json.load(file)

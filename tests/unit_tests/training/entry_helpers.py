"""Stand-ins shared by the training-entry tests: the entry run up to ``pretrain`` on CPU, a tiny corpus, a tilelang
that does not import, and the command lines of more than one test module.

Megatron modules (``megatron.training``) are imported inside the functions, so importing this module at collection
loads no more than ``megatron.oellm.training.args`` and ``.corpus``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import os
import random
import string
import sys
import types
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

from megatron.oellm.training.args import parse_oellm_argv
from megatron.oellm.training.corpus import build_corpus


def installed_stand_in(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``name`` importable as an empty module with a spec, as an installed package would be to ``find_spec``."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    monkeypatch.setitem(sys.modules, name, module)


class Reached(Exception):
    """Raised by :func:`entry_up_to_pretrain`'s stand-ins for the steps after the entry's argument checks."""


def parsed_with_padded_vocab(**_kwargs) -> argparse.Namespace:
    """``sys.argv`` parsed as Megatron would, with the fields its validation and tokenizer set: the data-parallel
    size as on one process (the tests run none of megatron's distributed set-up), and the batch sizes (a micro batch
    of 1 where the command line gives none, which megatron would refuse; the global batch one micro batch per
    data-parallel rank, megatron's default)."""
    return with_validated_fields(parse_oellm_argv(sys.argv[1:]))


def with_validated_fields(args: argparse.Namespace) -> argparse.Namespace:
    """Parsed ``args`` with the fields :func:`parsed_with_padded_vocab` says megatron's validation sets."""
    args.padded_vocab_size, args.virtual_pipeline_model_parallel_size = args.vocab_size, None
    args.data_parallel_size = 1
    args.micro_batch_size = args.micro_batch_size or 1
    args.global_batch_size = args.global_batch_size or args.micro_batch_size * args.data_parallel_size
    args.params_dtype = torch.bfloat16 if args.bf16 else torch.float32
    return args


def entry_in_a_test(monkeypatch: pytest.MonkeyPatch):
    """The training entry module with what it changes outside its own checks undone after the test (``sys.argv``,
    megatron's runtime patches, which are not applied) and TE's attention switches cleared: megatron-core leaves them
    in ``os.environ`` when an earlier test builds a model, and the entry refuses a preset one that disagrees with
    ``--attention-backend``."""
    from megatron.oellm.patches import dataset_helpers, distrib_optimizer_step
    from megatron.oellm.training import entry
    from megatron.oellm.training.attention_env import SWITCHES, VERSION_PINS

    for name in (*SWITCHES, *VERSION_PINS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["entry"])
    monkeypatch.setattr(dataset_helpers, "apply", lambda: True)
    monkeypatch.setattr(distrib_optimizer_step, "apply", lambda: True)
    return entry


def entry_up_to_pretrain(monkeypatch: pytest.MonkeyPatch):
    """The training entry module, patched to run its argument checks on CPU and raise :class:`Reached` after them."""
    # Megatron's validation (it needs CUDA) is replaced by the plain parse, and the entry's check for a GPU passes;
    # megatron's tokenizer build and global set-up are left out (their globals would outlive the test); every step
    # after the argument checks (FLOP count, megatron's config container, throughput hook, ``pretrain``) raises
    # Reached.
    import megatron.training
    import megatron.training.arguments
    import megatron.training.global_vars

    from megatron.oellm.backends import selection
    from megatron.oellm.training import throughput

    entry = entry_in_a_test(monkeypatch)

    def reached(*_args, **_kwargs):
        raise Reached

    monkeypatch.setattr(megatron.training.arguments, "parse_and_validate_args", parsed_with_padded_vocab)
    monkeypatch.setattr(megatron.training.global_vars, "rebuild_tokenizer", lambda _args: None)
    monkeypatch.setattr(megatron.training.global_vars, "set_global_variables", lambda *_args, **_kwargs: None)
    monkeypatch.setattr(entry, "check_gpu_node", lambda _world_size: None)  # the GPU megatron's validation would ask
    monkeypatch.setattr(selection, "check_args_support", lambda *_args: None)
    monkeypatch.setattr(entry, "flops_and_peak", reached)
    monkeypatch.setattr(entry, "training_config", reached)  # megatron's container needs validated arguments
    monkeypatch.setattr(throughput, "install_throughput_logging", reached)
    monkeypatch.setattr(megatron.training, "pretrain", reached)
    return entry


def entry_on_a_cpu_node(monkeypatch: pytest.MonkeyPatch, cuda_build: str | None = None):
    """The training entry module on a node where torch sees no GPU (``cuda_build``: torch's CUDA version, None for a
    CPU build), started without a launcher (no ``WORLD_SIZE``) from a shell that exports none of the variables
    megatron's validation reads, megatron's validation and every check of the entry as they are; ``pretrain`` fails
    the test."""
    import megatron.training

    from megatron.oellm.recipes.megatron_validation import VALIDATION_ENVIRONMENT

    entry = entry_in_a_test(monkeypatch)
    for name in ("WORLD_SIZE", *VALIDATION_ENVIRONMENT):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)

    def no_training(*_args, **_kwargs):
        raise AssertionError("pretrain was reached on a node without a GPU")

    monkeypatch.setattr(megatron.training, "pretrain", no_training)
    return entry


def entry_up_to_throughput_hook(monkeypatch: pytest.MonkeyPatch):
    """:func:`entry_up_to_pretrain` with the FLOP count and megatron's config container answered, so that every step
    before the throughput hook (which raises :class:`Reached`) runs, the runtime patches and the MoE metrics tracker
    included."""
    entry = entry_up_to_pretrain(monkeypatch)
    monkeypatch.setattr(entry, "flops_and_peak", lambda *_args: (1.0, None))
    monkeypatch.setattr(entry, "training_config", lambda _args: object())
    return entry


TINY_MOE_RUN = ["--oellm-model", "qwen3-30b-a3b-tiny", "--micro-batch-size", "1", "--global-batch-size", "8",
                "--seq-length", "64", "--train-iters", "10", "--lr", "1e-4", "--mock-data", "--tokenizer-type",
                "NullTokenizer"]
"""A short mock-data run of the tiny Qwen3 MoE card that the entry's checks pass."""


def tiny_moe_run(card: str = "qwen3-30b-a3b-tiny") -> list[str]:
    """:data:`TINY_MOE_RUN` of another tiny MoE ``card``."""
    run = list(TINY_MOE_RUN)
    run[run.index("--oellm-model") + 1] = card
    return run


def validated_tiny_moe_run(extra: list[str], card: str = "qwen3-30b-a3b-tiny") -> argparse.Namespace:
    """Megatron's validated arguments of :func:`tiny_moe_run` of ``card`` with ``extra`` (``validate_args`` answered
    as on an H100 node), with the padded vocabulary its tokenizer would set."""
    from megatron.oellm.recipes.megatron_validation import validate_args_on_cluster
    from megatron.oellm.training.args import merge_card_flags

    args = validate_args_on_cluster(parse_oellm_argv(merge_card_flags([*tiny_moe_run(card), *extra]).argv), 1, None)
    args.padded_vocab_size = args.vocab_size
    return args


def corpus(tmp_path: Path, name: str) -> str:
    """A two-document byte corpus built at ``tmp_path / name``; returns its prefix for ``--data-path``."""
    docs = []
    for i in range(2):
        docs.append(tmp_path / f"{name}{i}.txt")
        docs[-1].write_text(f"document {i} of {name}")
    return build_corpus(docs, tmp_path / name).prefix


def one_error_line(capsys: pytest.CaptureFixture) -> str:
    """The single line the entry printed on stderr, its ``error:`` line (fails on a traceback or argparse's page-long
    usage)."""
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err[:3]
    assert err[0].startswith("megatron.oellm.training.entry: error: ")
    return err[0]


def refused_line(entry, capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """The entry's one error line for ``argv``, which it must refuse with exit status 2."""
    assert entry.main(argv) == 2
    return one_error_line(capsys)


def tilelang_import_fails(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """Importing tilelang through the check raises ``error`` (a library it loads missing); every other module, fla's
    own among them, imports as it is."""
    from megatron.oellm.training import fla_kernels

    import_module = importlib.import_module

    def failing_import(name, *rest):
        if name == "tilelang":
            raise error
        return import_module(name, *rest)

    monkeypatch.setattr(fla_kernels.importlib, "import_module", failing_import)


TILELANG_STACK_STAND_INS = ("fla", "tilelang", "z3", "tvm_ffi")
"""Top-level modules that :func:`stand_in_tilelang_stack` makes a process import afresh."""


def tilelang_library_missing(monkeypatch: pytest.MonkeyPatch, site: Path, library: str) -> None:
    """A stand-in site in ``site`` (:func:`stand_in_tilelang_stack`) whose ``z3`` loads the shared library
    ``library`` with ctypes as tilelang imports it; the library is not there, so the import raises OSError as a
    z3-solver without its ``libz3`` does."""
    stand_in_tilelang_stack(monkeypatch, site, {"tilelang": "import z3\n",
                                                "z3": f"import ctypes\n\nctypes.CDLL({library!r})\n"})


def tilelang_raising(monkeypatch: pytest.MonkeyPatch, site: Path, error: str) -> None:
    """A stand-in site in ``site`` (:func:`stand_in_tilelang_stack`) whose ``tvm_ffi``, which tilelang imports,
    raises ``error`` (Python source of an exception, ``RuntimeError('...')``) as a TVM whose FFI registry or version
    check fails does."""
    stand_in_tilelang_stack(monkeypatch, site, {"tilelang": "import tvm_ffi\n", "tvm_ffi": f"raise {error}\n"})


def stand_in_tilelang_stack(monkeypatch: pytest.MonkeyPatch, site: Path, sources: Mapping[str, str]) -> None:
    """A stand-in site in ``site``, first on ``sys.path`` and on PYTHONPATH (for fresh interpreters), holding the
    packages of ``sources`` (top-level module of :data:`TILELANG_STACK_STAND_INS` -> its ``__init__``'s code) and
    tilelang's and z3-solver's distributions (:func:`~tests.unit_tests.fake_site.add_distribution`). fla's modules and
    the stack's are taken out of ``sys.modules``: fla imports tilelang again (wherever an nvcc is found) and meets
    the stand-in."""
    from tests.unit_tests.fake_site import add_distribution

    for name, code in sources.items():
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(code)
    add_distribution(site, "tilelang", "0.1.15")
    add_distribution(site, "z3-solver", "4.15.4.0")
    for name in [name for name in sys.modules if name.split(".")[0] in TILELANG_STACK_STAND_INS]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))


def fla_raising_attribute_error(monkeypatch: pytest.MonkeyPatch, site: Path) -> str:
    """A stand-in ``fla`` in ``site``, first on ``sys.path`` and on PYTHONPATH (for fresh interpreters), whose
    ``__init__`` raises AttributeError as an fla built against another torch does, reading an attribute that torch
    lacks; fla's modules are taken out of ``sys.modules``. Returns its error line, ``Type: message``."""
    missing = f"_oellm_absent_{''.join(random.choices(string.ascii_lowercase, k=10))}"
    (site / "fla").mkdir(parents=True)
    (site / "fla" / "__init__.py").write_text(f"import torch\ntorch.{missing}\n")
    for name in [name for name in sys.modules if name.split(".")[0] == "fla"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return f"AttributeError: module 'torch' has no attribute '{missing}'"


DATA_CHECK_RUN = ["--oellm-model", "qwen3-30b-a3b-tiny", "--oellm-backend", "torch", "--seq-length", "16",
                  "--tokenizer-type", "NullTokenizer"]
"""The entry's command line of the data source tests, before the data flags each test gives."""


def data_config_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed, with what megatron's ``validate_args`` fills in for the data config."""
    args = parse_oellm_argv(["--seq-length", "16", *argv])
    args.data_parallel_size = 1
    if args.data_path is not None and args.split is None:
        args.split = "969,30,1"
    return args


GPU_ENTRY_RUN = [
    "--oellm-model", "qwen3.5-35b-a3b-tiny", "--oellm-backend", "torch", "--transformer-impl", "local",
    "--micro-batch-size", "4", "--global-batch-size", "8", "--seq-length", "128",
    "--lr", "3e-3", "--min-lr", "3e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "3",
    "--bf16", "--log-interval", "1", "--eval-iters", "0", "--eval-interval", "1000",
    "--no-gradient-accumulation-fusion", "--seed", "1234",
]
"""The entry's command line of the GPU training tests (``test_entry_gpu.py``) before each run's data and checkpoint
flags; the entry's checks on the CPU take the same line (``test_gpu_runs_pass_entry_checks.py``)."""

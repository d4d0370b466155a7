"""Audit 10 of :mod:`megatron.oellm.training.node_packages`: an installed nvidia-resiliency-ext without the local
checkpoint manager megatron-core 0.19.2 imports for ``--non-persistent-ckpt-type local`` is refused as missing (the
per-flag submodules of :data:`NODE_PACKAGE_FLAGS` are test_training_helpers_audit8's), and a refusal's way out names
the package to install (pip's name), not the module."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from megatron.oellm.training.node_packages import check_validated_packages

PACKAGE = "nvidia_resiliency_ext"


@pytest.fixture
def partial_resiliency_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An installed ``nvidia_resiliency_ext`` holding only ``fault_tolerance`` (no ``inprocess``, no
    ``checkpointing``), importable from ``sys.path`` as a real package is."""
    for module in (PACKAGE, f"{PACKAGE}/fault_tolerance"):
        (tmp_path / module).mkdir()
        (tmp_path / module / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
        del sys.modules[name]


def validated(**flags) -> argparse.Namespace:
    """Validated arguments of a run asking for none of the late-imported packages, with ``flags`` set."""
    args = argparse.Namespace(optimizer=random.choice(["adam", "sgd"]), async_save=False,
                              use_persistent_ckpt_worker=False, save=None, async_strategy="nvrx", log_straggler=False,
                              log_energy=False, enable_ft_package=False, inprocess_restart=False,
                              non_persistent_ckpt_type=random.choice([None, "global"]))
    args.__dict__.update(flags)
    return args


def test_a_package_without_the_module_megatron_imports_is_refused(partial_resiliency_package) -> None:
    """``--non-persistent-ckpt-type local`` needs the package's local checkpoint manager and ``--inprocess-restart``
    its ``inprocess`` module: the package alone is not enough, and the refusal says to install nvidia-resiliency-ext;
    ``--enable-ft-package``, whose module it holds, passes."""
    check_validated_packages(validated())
    check_validated_packages(validated(enable_ft_package=True))
    with pytest.raises(ValueError, match=r"^--inprocess-restart needs the nvidia-resiliency-ext package, which is "
                                         r"not installed in this environment: .*; install nvidia-resiliency-ext or "
                                         r"drop --inprocess-restart$"):
        check_validated_packages(validated(inprocess_restart=True))
    with pytest.raises(ValueError, match=r"^--non-persistent-ckpt-type local needs the nvidia-resiliency-ext "
                                         "package"):
        check_validated_packages(validated(non_persistent_ckpt_type="local"))

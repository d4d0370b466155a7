"""The doctor reads the CPU an extension is built for from its ELF header in the file's byte order: POWER's
``e_machine`` 0x15 is ``ppc64le`` in a little-endian file (what ``platform.machine()`` says on such a node) and
``ppc64`` in a big-endian one. Every 0x15 was ``ppc64``, so a ppc64le helper on a ppc64le node was called a build for
another CPU, and one on x86_64 named the wrong architecture."""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

import pytest

from megatron.oellm.doctor.probes import ELF_MACHINES, elf_machine, helpers_cpp_mismatch


def _elf(path: Path, data: int, machine: int) -> Path:
    """A random 64-byte file with an ELF header of byte order ``data`` (1 little, 2 big) and ``machine``."""
    header = bytearray(random.randbytes(64))
    header[:6] = bytes([0x7F, ord("E"), ord("L"), ord("F"), 2, data])
    header[18:20] = machine.to_bytes(2, "little" if data == 1 else "big")
    path.write_bytes(bytes(header))
    return path


@pytest.mark.parametrize(("data", "machine", "name"), [(1, 0x15, "ppc64le"), (2, 0x15, "ppc64"), (1, 0x3E, "x86_64"),
                                                       (1, 0xB7, "aarch64"), (2, 0x16, "s390x")])
def test_the_machine_is_read_in_the_files_byte_order(tmp_path: Path, data: int, machine: int, name: str) -> None:
    assert elf_machine(_elf(tmp_path / f"lib{random.randrange(10**6)}.so", data, machine)) == name


def test_a_ppc64le_helper_loads_on_ppc64le_and_is_named_elsewhere(tmp_path: Path) -> None:
    datasets = tmp_path / "core" / "datasets"
    datasets.mkdir(parents=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    _elf(datasets / f"helpers_cpp{suffix}", 1, 0x15)
    assert helpers_cpp_mismatch(tmp_path / "core", suffix, "ppc64le") is None
    other = random.choice(["x86_64", "aarch64"])
    mismatch = helpers_cpp_mismatch(tmp_path / "core", suffix, other)
    assert mismatch is not None and "built for ppc64le" in mismatch and other in mismatch


def test_a_helper_built_for_this_python_beside_builds_for_others_is_no_mismatch(tmp_path: Path) -> None:
    """megatron-core's ``datasets`` folder may hold helpers built for several Pythons (a source tree built by two
    interpreters): the one built for this interpreter's suffix and CPU loads, so no mismatch is the cause of a failed
    import; only where every helper there is built for another Python is each one named. Fresh random releases and
    CPU."""
    code, machine = random.choice(sorted(ELF_MACHINES.items()))
    this, *others = random.sample(range(8, 16), random.randint(2, 4))
    datasets = tmp_path / "core" / "datasets"
    datasets.mkdir(parents=True)
    for minor in others:
        _elf(datasets / f"helpers_cpp.cpython-3{minor}-{machine}-linux-gnu.so", 1, code)
    suffix = f".cpython-3{this}-{machine}-linux-gnu.so"
    mismatch = helpers_cpp_mismatch(tmp_path / "core", suffix, machine)
    assert mismatch is not None and all(f"CPython 3.{minor} on {machine}" in mismatch for minor in others), mismatch
    _elf(datasets / f"helpers_cpp{suffix}", 1, code)
    assert helpers_cpp_mismatch(tmp_path / "core", suffix, machine) is None

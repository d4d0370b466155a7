"""``oellm doctor`` on NCCL channel variables reads their values as NCCL reads them: as C ``strtoll`` base 0 (hex and
octal are no errors), and an empty value or a count NCCL takes for its own default is no error either."""

import ctypes
import random

import pytest

from megatron.oellm.doctor.nccl import NCCL_CHANNEL_VARIABLES, check_nccl_channels, nccl_integer
from megatron.oellm.doctor.report import EnvironmentReport, Finding

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.strtoll.restype = ctypes.c_longlong
LIBC.strtoll.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]


def _strtoll(text: str) -> int | None:
    """libc's ``strtoll(text, &end, 0)`` as NCCL's ncclLoadParam calls it; None unless it reads the whole text
    without overflow (NCCL ignores a trailing rest, which the doctor keeps calling a typo)."""
    data = text.encode()
    buffer = ctypes.create_string_buffer(data)
    end = ctypes.c_char_p()
    ctypes.set_errno(0)
    value = LIBC.strtoll(buffer, ctypes.byref(end), 0)
    consumed = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buffer)
    if ctypes.get_errno() or consumed != len(data) or not data:
        return None
    return value


def _finding(variable: str, raw: str) -> Finding:
    """The doctor's finding on ``variable`` set to ``raw``."""
    (finding,) = [f for f in check_nccl_channels(EnvironmentReport("3.12.3", False, {}), {variable: raw})
                  if f.name == variable]
    return finding


@pytest.mark.parametrize("variable", NCCL_CHANNEL_VARIABLES)
def test_hex_and_octal_counts_are_read_as_nccl_reads_them(variable: str) -> None:
    """``NCCL_MIN_NCHANNELS=0x10`` was an error ("not a whole number"), and ``010`` was taken as ten, not eight."""
    rng = random.Random(random.random())
    for _ in range(50):
        value = rng.randint(1, 64)
        raw = rng.choice([f"0x{value:x}", f"0X{value:X}", f"0{value:o}"])
        finding = _finding(variable, raw)
        assert finding.severity == ("warning" if value > 4 else "ok"), (raw, finding.message)
        assert f"{variable}={raw} (= {value})" in finding.message


def test_values_nccl_reads_differently_are_refused() -> None:
    """``08`` is no octal number (NCCL would read 0 and ignore the 8), ``0x`` no hex one."""
    for raw in ("08", "0x", "0o10", "1_0"):
        variable = random.choice(NCCL_CHANNEL_VARIABLES)
        assert _finding(variable, raw).severity == "error", (variable, raw)


def test_parse_agrees_with_libc_strtoll_on_random_strings() -> None:
    """Whatever libc's ``strtoll(..., 0)`` reads whole, :func:`nccl_integer` reads the same; nothing else parses."""
    rng = random.Random(random.random())
    alphabet = "0123456789abcdefxX+- 8"
    for _ in range(5000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        assert nccl_integer(raw) == _strtoll(raw.strip()), raw
    assert nccl_integer(str(2**63)) is None and _strtoll(str(2**63)) is None


@pytest.mark.parametrize(("variable", "raw"), [
    ("NCCL_MIN_NCHANNELS", ""),  # NCCL reads an empty variable as unset (its ncclLoadParam skips empty strings)
    ("NCCL_NCHANNELS_PER_NET_PEER", ""),
    ("NCCL_MIN_P2P_NCHANNELS", ""),
    ("NCCL_MIN_NCHANNELS", "0"),  # no minimum: NCCL's own default (ncclMinNchannels starts at 0)
    ("NCCL_MIN_P2P_NCHANNELS", "0"),  # no minimum: the p2p pool has a channel per NCCL channel anyway
    ("NCCL_NCHANNELS_PER_NET_PEER", "-1"),  # leaves the count to NCCL (a default; 2.28.9 ignores values below 1)
])
def test_nccl_channel_values_nccl_reads_as_its_default_are_not_errors(variable, raw):
    """``export NCCL_MIN_NCHANNELS=`` (a job script clearing a cluster default) and ``NCCL_MIN_NCHANNELS=0`` leave
    NCCL at its defaults; the doctor called them errors ("not a positive integer") and exited 1."""
    (finding,) = [f for f in check_nccl_channels(EnvironmentReport("3.12.3", False, {}), {variable: raw})
                  if f.name == variable]
    assert finding.severity == "ok", finding.message


@pytest.mark.parametrize("raw", ["0", "-2", "0x0"])
def test_zero_channels_per_net_peer_stays_an_error(raw):
    """A peer needs a channel: only the minimums may be 0, and only -1 below it leaves the count to NCCL."""
    report = EnvironmentReport("3.12.3", False, {})
    (finding,) = [f for f in check_nccl_channels(report, {"NCCL_NCHANNELS_PER_NET_PEER": raw})
                  if f.name == "NCCL_NCHANNELS_PER_NET_PEER"]
    assert finding.severity == "error" and f"NCCL_NCHANNELS_PER_NET_PEER={raw!r}" in finding.message


@pytest.mark.parametrize("variable", ["NCCL_MIN_NCHANNELS", "NCCL_MIN_P2P_NCHANNELS"])
def test_a_negative_minimum_says_nccl_takes_it_as_no_minimum(variable: str) -> None:
    """NCCL raises a negative ``NCCL_MIN_NCHANNELS`` to 0 (``ncclMinNchannels``) and takes the larger of its own
    p2p count and ``NCCL_MIN_P2P_NCHANNELS``, so a negative minimum is no minimum. The error said only "not a whole
    number of 0 or more", which -3 is not wrong about but which does not say what NCCL does with it; and as it has
    no effect, it is a warning (an error failed jobs that gate on the doctor's exit status). Fresh random
    negatives, in decimal and hexadecimal; a non-number keeps the old words and stays an error."""
    rng = random.Random(random.random())
    for _ in range(10):
        value = rng.randint(1, 2**40)
        raw = rng.choice([f"-{value}", f"-0x{value:x}"])
        finding = _finding(variable, raw)
        assert finding.severity == "warning", raw  # no effect, not a failure: the job runs as with it unset
        assert f"{variable}={raw!r} is a negative minimum, which NCCL takes as no minimum at all (as 0)" \
            in finding.message
    assert "not a whole number of 0 or more" in _finding(variable, "four").message
    assert _finding(variable, "four").severity == "error"


def _strtoll_overflows(text: str) -> bool:
    """Whether libc's ``strtoll(text, NULL, 0)``, as NCCL's ncclLoadParam calls it, sets errno (ERANGE): NCCL then
    keeps the variable's default."""
    ctypes.set_errno(0)
    LIBC.strtoll(text.encode(), None, 0)
    return ctypes.get_errno() != 0


@pytest.mark.parametrize("variable", NCCL_CHANNEL_VARIABLES)
def test_a_count_that_overflows_int64_is_called_an_overflow(variable):
    """``NCCL_MIN_NCHANNELS=99999999999999999999999`` was "not a whole number": it is one, but beyond the int64 NCCL
    reads it into, which makes NCCL ignore it and keep its default. Fresh random values beyond int64, in decimal,
    hexadecimal and octal, of either sign; libc's strtoll agrees that they overflow."""
    rng = random.Random(random.random())
    for _ in range(20):
        value = rng.randint(2**63 + 1, 2**80)
        raw = rng.choice(["", "-", "+"]) + rng.choice([str(value), f"0x{value:x}", f"0{value:o}"])
        assert _strtoll_overflows(raw), raw
        finding = _finding(variable, raw)
        assert finding.severity == "error" and "overflows the signed 64-bit integer" in finding.message, raw
        assert "not a whole number" not in finding.message and "keeps its default" in finding.message
    largest = str(2**63 - 1)
    assert not _strtoll_overflows(largest) and "overflows" not in _finding(variable, largest).message

"""Inputs this user may not read, with real file permissions: an input folder (or a folder above it) it may not enter
or, for ``--hf``, list, and a checkpoint file it may not read, are refused in one line naming them (exit status 2).
Python 3.11's ``Path.is_file`` raised ``PermissionError`` on such a folder (a traceback), and a ``.distcp`` file without
read permission was found only at the unit that needed it and called damaged.

Root reads anything, so as root the conversions run under ``setpriv`` without the capabilities that override file
permissions; where they cannot be dropped the tests are skipped. A read refused after the checks (a file made
unreadable during the conversion) is simulated in-process."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.convert.dist_ckpt import METADATA_FILE
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.mcore_checkpoint import ITERATION_FILE, RELEASE
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, save_tiny_tokenizer, write_hf

CARD = "qwen3-30b-a3b-tiny"
WITHOUT_OVERRIDES = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"]
"""The prefix that runs a command as root without the capabilities that let root past file permissions."""
DRIVER = """
import contextlib, io, json, os, sys
from megatron.oellm.cli import main
probe, cases = sys.argv[1], json.loads(sys.argv[2])
if os.access(probe, os.R_OK):  # the permissions are not enforced on this process
    print("null")
    sys.exit()
results = {}
for name, argv in cases.items():
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            status = main(argv)
        except BaseException as error:
            status = type(error).__name__
    results[name] = [status, stderr.getvalue()]
print(json.dumps(results))
"""
"""Runs ``oellm convert`` for each case in one process (one import of torch) and prints its status and stderr."""
SEARCH_ONLY = 0o300
"""A folder's mode with write and search permission but no read permission: its files open by name, unlisted."""
FOLDER_FIX = "or pass a copy"


def _case(argv: list[str], message: str) -> tuple[list[str], str]:
    """A case: ``oellm convert`` arguments and the one stderr line expected."""
    return argv, message


def _copy(source: Path, destination: Path) -> Path:
    """``source`` (a folder) copied to ``destination``; returns it."""
    shutil.copytree(source, destination)
    return destination


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[object, str, str]]]:
    """Case name -> (exit status, stderr, the one line expected) of conversions of inputs locked by chmod."""
    card = get_card(CARD)
    root = tmp_path_factory.mktemp("permissions")
    hf = write_hf(card, random_hf_tensors(card, seed=random.randrange(2**31)), root / "hf")
    mcore = root / "mcore"
    hf_to_mcore_checkpoint(card, hf, mcore)
    convert = ["convert", "hf-to-mcore", "--model", CARD]
    export = ["convert", "mcore-to-hf", "--model", CARD]
    locks: dict[Path, int] = {}
    cases = {}

    unlisted = _copy(hf, root / "unlisted")
    locks[unlisted] = SEARCH_ONLY
    cases["hf folder it may not list"] = _case(
        [*convert, "--hf", str(unlisted), "--out", str(root / "out")],
        f"--hf {unlisted}: this user may not list that folder (no read permission); make it readable (chmod a+r) "
        f"{FOLDER_FIX}")
    locked = _copy(hf, root / "locked")
    locks[locked] = 0o000
    cases["hf folder it may not enter"] = _case(
        [*convert, "--hf", str(locked), "--out", str(root / "out")],
        f"--hf {locked}: this user may not list or enter that folder (no read or search permission); make it "
        f"readable (chmod a+rx) {FOLDER_FIX}")
    above = root / "above"
    _copy(hf, above / "hf")
    locks[above] = 0o600
    cases["hf under a folder it may not enter"] = _case(
        [*convert, "--hf", str(above / "hf"), "--out", str(root / "out")],
        f"--hf {above / 'hf'}: this user may not enter {above}, a folder above it (no search permission); make it "
        f"searchable (chmod a+x) {FOLDER_FIX}")
    outer = root / "outer"
    _copy(hf, outer / "inner" / "hf")
    locks[outer / "inner"] = 0o600
    locks[outer] = 0o600
    cases["hf under two folders it may not enter"] = _case(
        [*convert, "--hf", str(outer / "inner" / "hf"), "--out", str(root / "out")],
        f"--hf {outer / 'inner' / 'hf'}: this user may not enter {outer}, a folder above it (no search permission); "
        f"make it searchable (chmod a+x) {FOLDER_FIX}")
    run = _copy(mcore, root / "run")
    locks[run / RELEASE] = 0o000
    cases["mcore iteration it may not enter"] = _case(
        [*export, "--mcore", str(run), "--out", str(root / "out")],
        f"{run / RELEASE} (the checkpoint {run / ITERATION_FILE} names): this user may not enter that folder (no "
        f"search permission); make it searchable (chmod a+x) {FOLDER_FIX}")
    stored_card = _copy(mcore, root / "stored_card")
    locks[stored_card] = 0o600
    cases["mcore folder it may not enter, no --model"] = _case(
        ["convert", "mcore-to-hf", "--mcore", str(stored_card), "--out", str(root / "out")],
        f"--mcore {stored_card}: this user may not enter that folder (no search permission); make it searchable "
        f"(chmod a+x) {FOLDER_FIX}")
    unlisted_run = _copy(mcore, root / "unlisted_run")
    (unlisted_run / ITERATION_FILE).write_text(f"{random.randrange(100, 10**6)}\n")  # an iteration not there
    locks[unlisted_run] = SEARCH_ONLY
    cases["mcore folder it may not list, a checkpoint missing"] = _case(
        [*export, "--mcore", str(unlisted_run), "--out", str(root / "out")],
        f"this user may not access {unlisted_run} (Permission denied); give it the permissions needed (chmod), or "
        "pass paths this user may read (and, for --out, write)")
    config = root / "config"
    config.mkdir()
    shutil.copy(hf / "config.json", config)
    locks[config] = 0o000
    cases["hf-config folder it may not enter"] = _case(
        [*export, "--mcore", str(mcore), "--hf-config", str(config), "--out", str(root / "out")],
        f"--hf-config {config}: this user may not enter that folder (no search permission); make it searchable "
        f"(chmod a+x) {FOLDER_FIX}")
    tokenizer = root / "closed" / "tok"
    save_tiny_tokenizer(tokenizer, card.vocab_size, seed=random.randrange(2**31))
    locks[root / "closed"] = 0o000
    cases["tokenizer under a folder it may not enter"] = _case(
        [*export, "--mcore", str(mcore), "--tokenizer", str(tokenizer), "--out", str(root / "out")],
        f"--tokenizer {tokenizer}: this user may not enter {root / 'closed'}, a folder above it (no search "
        f"permission); make it searchable (chmod a+x) {FOLDER_FIX}")
    for name, pick in (("data file", lambda files: random.choice(files)), ("metadata", lambda _: METADATA_FILE)):
        checkpoint = _copy(mcore, root / name.replace(" ", "_"))
        denied = checkpoint / RELEASE / pick(sorted(p.name for p in (checkpoint / RELEASE).glob("*.distcp")))
        locks[denied] = 0o000
        cases[f"{name} it may not read"] = _case(
            [*export, "--mcore", str(checkpoint), "--out", str(root / "out")],
            f"cannot read {denied}: no read permission (e.g. a shared cache or checkpoint written with another "
            "user's umask); make it readable (chmod a+r) or convert a copy")
    modes = {path: path.stat().st_mode for path in locks}
    try:
        for path, mode in locks.items():
            path.chmod(mode)
        yield _run_without_root_overrides(locked, cases)
    finally:
        for path, mode in modes.items():
            path.chmod(mode)


def _run_without_root_overrides(probe: Path, cases: dict[str, tuple[list[str], str]]
                                ) -> dict[str, tuple[object, str, str]]:
    """Each case's (status, stderr, expected line), run as this user (as root, without the capabilities that override
    file permissions); skips where ``probe`` (a folder of mode 000) is still readable there."""
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root reads any file, and setpriv is missing to drop that capability")
        prefix = WITHOUT_OVERRIDES
    done = subprocess.run([*prefix, sys.executable, "-c", DRIVER, str(probe),
                           json.dumps({name: argv for name, (argv, _) in cases.items()})],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and prefix:
        pytest.skip(f"cannot drop root's file-permission overrides here: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    if results is None:
        pytest.skip("file permissions are not enforced on this user (root with its overrides kept)")
    return {name: (*results[name], message) for name, (_, message) in cases.items()}


@pytest.mark.parametrize("case", ["hf folder it may not list", "hf folder it may not enter",
                                  "hf under a folder it may not enter", "hf under two folders it may not enter",
                                  "mcore iteration it may not enter",
                                  "mcore folder it may not enter, no --model",
                                  "mcore folder it may not list, a checkpoint missing", "hf-config folder it may not enter",
                                  "tokenizer under a folder it may not enter", "data file it may not read",
                                  "metadata it may not read"])
def test_an_input_this_user_may_not_read_is_refused_in_one_line(refusals, case: str) -> None:
    status, stderr, message = refusals[case]
    direction = "hf-to-mcore" if case.startswith("hf ") else "mcore-to-hf"
    assert status == 2, stderr[-3000:]
    assert stderr.splitlines()[-1] == f"oellm convert {direction}: error: {message}"
    assert "Traceback" not in stderr and "damaged" not in stderr


@pytest.mark.parametrize("read", ["the common state", "a unit"])
def test_a_read_refused_after_the_checks_is_named_as_a_permission(converted, monkeypatch: pytest.MonkeyPatch,
                                                                  read: str) -> None:
    """A data file that became unreadable after the checks (simulated: its opening is refused as the operating system
    refuses it) is named as a file this user may not read, not as a damaged checkpoint to copy again."""
    card, _, tmp = converted
    files = sorted((tmp / "mcore" / RELEASE).glob("*.distcp"))  # __0_0 holds the common state, written first
    denied = files[0] if read == "the common state" else random.choice(files[1:])
    opened = Path.open

    def refuse_denied(self: Path, *args: object, **kwargs: object) -> object:
        if self == denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse_denied)
    with pytest.raises(ConversionError) as refusal:
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out")
    message = str(refusal.value)
    assert message.startswith(f"cannot read {denied}: no read permission"), message
    assert "damaged" not in message
    assert not (tmp / "out").exists()


def test_a_permission_error_naming_no_file_is_refused_in_its_own_words(tiny_hf, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A ``PermissionError`` without a file name (an operation, not a path, refused) was refused as "this user may
    not access None (None)": the refusal quotes the error's own text then."""
    import megatron.oellm.convert.to_mcore as to_mcore
    from megatron.oellm.cli import main

    card, hf, tmp = tiny_hf
    write_hf(card, hf, tmp / "hf")
    reason = random.choice(["Operation not permitted", "setpriv refused the capability"])

    def refused(*args: object, **kwargs: object) -> None:
        raise PermissionError(reason)

    monkeypatch.setattr(to_mcore, "hf_to_mcore_checkpoint", refused)
    status = main(["convert", "hf-to-mcore", "--model", card.name, "--hf", str(tmp / "hf"), "--out", str(tmp / "out")])
    stderr = capsys.readouterr().err
    assert status == 2
    assert stderr == (f"oellm convert hf-to-mcore: error: this user may not access {reason}; give it the permissions "
                      "needed (chmod), or pass paths this user may read (and, for --out, write)\n")
    assert "None" not in stderr


def test_a_missing_input_or_a_file_is_left_to_the_callers_own_checks(tmp_path: Path) -> None:
    """The folder check refuses only folders this user may not enter or list: a missing path, or a file where a
    folder was expected, is named by the caller's own refusal (not called a folder it may not enter)."""
    from megatron.oellm.convert.errors import check_folder_access

    missing = tmp_path / f"missing-{random.randrange(10**6)}"
    check_folder_access(missing, f"--hf {missing}", lists=random.choice([True, False]))
    file = tmp_path / f"config-{random.randrange(10**6)}.json"
    file.write_text(json.dumps({"seed": random.randrange(1, 10**6)}))
    check_folder_access(file, f"--hf-config {file}", lists=random.choice([True, False]))

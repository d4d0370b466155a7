"""``oellm bench`` refuses what would fail, or mislead, only after GPU work (our side's TransformerConfig
overrides, an unwritable ``--profile`` folder, a sequence longer than the card's positions, an ``--output`` file
that ``--profile`` turns into a folder) with one ``error:`` line before it starts, and names a bad argument even on
a machine without a GPU (CPU: CUDA and the benchmark itself are faked)."""

import random
from pathlib import Path

import pytest
import torch

from megatron.oellm.backends import selection
from megatron.oellm.backends import te_flash_attention as te_flash
from megatron.oellm.bench import harness
from megatron.oellm.cards import get_card
from megatron.oellm.cli import INTERRUPTED_EXIT_STATUS, main

TINY = "qwen3.5-35b-a3b-tiny"


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """An H200 that must not be used: reaching ``run_benchmark`` fails the test."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", lambda config: pytest.fail("the GPU work started"))


class GpuWorkStarted(Exception):
    """Raised where the benchmark's GPU work would start."""


@pytest.fixture
def recording_gpu(monkeypatch: pytest.MonkeyPatch) -> list[harness.BenchConfig]:
    """An H200 whose benchmark only records its configuration and stops where the GPU work would start."""
    configs: list[harness.BenchConfig] = []

    def capture(config: harness.BenchConfig) -> None:
        configs.append(config)
        raise GpuWorkStarted

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    monkeypatch.setattr(harness, "run_benchmark", capture)
    return configs


@pytest.mark.parametrize(("override", "named"), [
    ("moe_token_dispatcher_typo=allgather", "moe_token_dispatcher_typo"),  # not a TransformerConfig field
    ("recompute_granularity='everything'", "everything"),  # a value megatron-core's checks refuse
])
def test_an_override_megatron_refuses_is_an_error_line_before_the_gpu_work(
        override: str, named: str, fake_gpu: None, capsys: pytest.CaptureFixture) -> None:
    """Our TransformerConfig was first built after transformers' model was on the GPU: a misspelt field was a
    TypeError traceback there."""
    assert main(["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--ours-config", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm bench: error: ") and "--ours-config" in err and named in err
    assert len(err.strip().splitlines()) == 1


def test_the_overrides_are_checked_only_for_our_side() -> None:
    with pytest.raises(ValueError, match="--ours-config.*no_such_field"):
        harness.BenchConfig(model=TINY, seq_length=128, ours_overrides={"no_such_field": 1})
    assert harness.BenchConfig(model=TINY, seq_length=128, sides=("hf",), ours_overrides={"no_such_field": 1}).sides == ("hf",)
    harness.BenchConfig(model=TINY, seq_length=128, ours_overrides={"moe_token_dispatcher_type": "allgather"})


def test_a_te_side_without_transformer_engine_is_refused_before_the_gpu_work(
        fake_gpu: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(selection, "transformer_engine_import_error",
                        lambda: "ModuleNotFoundError: No module named 'transformer_engine'")
    assert main(["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--sides", "ours,te"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oellm bench: error: ") and "te side" in err and "drop te from --sides" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("sides", "refused"), [(("ours", "te"), "ours"), (("te",), None), (("hf",), None)])
def test_a_setting_a_backend_lacks_the_kernels_for_names_that_side(sides: tuple[str, ...], refused: str | None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Transformer Engine's cross entropy: the te side runs it, the torch-native one refuses it (before, as a
    traceback from the model build once transformers' model was on the GPU)."""
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)
    monkeypatch.setattr(selection, "te_missing_kernels", lambda **features: {})
    overrides = {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}
    if refused is None:
        assert harness.BenchConfig(model=TINY, seq_length=128, sides=sides, ours_overrides=overrides).sides == sides
        return
    with pytest.raises(ValueError, match=f"the {refused} side cannot run with these settings.*cross_entropy_fusion_impl"):
        harness.BenchConfig(model=TINY, seq_length=128, sides=sides, ours_overrides=overrides)


def test_an_enum_override_is_given_by_name_and_judged_for_the_te_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--ours-config attention_backend=flash`` reached TransformerConfig as the string 'flash', which megatron-core's
    comparisons with ``AttnBackend`` never match: the te side's flash check passed and the report crashed once
    transformers' model was on the GPU. The name is now the member, and flash without a flash-attn TE runs is
    refused for the te side; the torch-native ours side, whose attention reads no attention backend, refuses any but
    auto (session 49), as the training entry does."""
    monkeypatch.setattr(selection, "transformer_engine_import_error", lambda: None)
    monkeypatch.setattr(te_flash, "te_flash_attention_found", lambda: te_flash.FlashAttentionFound())
    monkeypatch.setattr(te_flash, "cuda_capability", lambda: None)
    flash = {**harness.BEST_OURS_SETTINGS, "attention_backend": "flash"}
    with pytest.raises(ValueError, match="the te side cannot run.*attention_backend=flash: Transformer Engine finds"):
        harness.BenchConfig(model=TINY, seq_length=128, sides=("te", "hf"), ours_overrides=flash)
    with pytest.raises(ValueError, match="the ours side cannot run.*--attention-backend flash .*reads no attention"):
        harness.BenchConfig(model=TINY, seq_length=128, sides=("ours",), ours_overrides=flash)
    with pytest.raises(ValueError, match="attention_backend='fastest': choose one of flash, fused, unfused"):
        harness.BenchConfig(model=TINY, seq_length=128, sides=("ours",), ours_overrides={"attention_backend": "fastest"})


@pytest.mark.parametrize("kind", ["file", "below a file", "read-only folder"])
def test_a_profile_folder_that_cannot_be_written_is_refused_before_the_gpu_work(
        kind: str, tmp_path: Path, fake_gpu: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """The tables are written after the first side's sweep; a failure there lost the whole run's figures."""
    (tmp_path / "plain").write_text("a file where a folder should be")
    if kind == "file":
        profile = tmp_path / "plain"
    elif kind == "below a file":
        profile = tmp_path / "plain" / "prof"
    else:
        profile = tmp_path / "ro"
        profile.mkdir()
        monkeypatch.setattr("os.access", lambda path, mode: Path(path) != profile)
    assert main(["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--profile", str(profile)]) == 2
    assert f"oellm bench: error: --profile {profile}" in capsys.readouterr().err


def test_a_writable_profile_folder_is_created_and_the_run_goes_on(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    configs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")

    def capture(config: harness.BenchConfig) -> None:
        configs.append(config)
        raise KeyboardInterrupt  # stop where the GPU work would start

    monkeypatch.setattr(harness, "run_benchmark", capture)
    profile = tmp_path / "new" / "prof"
    argv = ["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--profile", str(profile)]
    assert main(argv) == INTERRUPTED_EXIT_STATUS
    assert profile.is_dir() and configs[0].profile_dir == profile and configs[0].gpu == "h200-sxm"


def test_a_sequence_longer_than_the_cards_positions_is_refused_before_the_gpu_work(
        recording_gpu: list, capsys: pytest.CaptureFixture) -> None:
    """The tiny card holds 1024 positions and the bench's default length is 4096: the bench timed a length that
    megatron's ``validate_args`` (and ``oellm`` training) refuse, with nothing said (RoPE takes any position)."""
    limit = get_card(TINY).max_position_embeddings
    with pytest.raises(ValueError, match=f"--seq-length {limit + 1} exceeds {TINY}'s max_position_embeddings {limit}"):
        harness.BenchConfig(model=TINY, seq_length=limit + 1)
    assert harness.BenchConfig(model=TINY, seq_length=limit).seq_length == limit
    assert main(["bench", "--model", TINY, "--mbs", "1"]) == 2  # the default --seq-length 4096
    err = capsys.readouterr().err
    assert err.startswith("oellm bench: error: ") and "--seq-length 4096" in err and str(limit) in err
    assert len(err.strip().splitlines()) == 1 and not recording_gpu


@pytest.mark.parametrize("layout", ["same path", "output above the profile folder"])
def test_an_output_that_the_profile_folder_would_be_is_refused_before_the_gpu_work(
        layout: str, tmp_path: Path, recording_gpu: list, capsys: pytest.CaptureFixture) -> None:
    """``--output`` was checked before ``--profile`` created its folder: ``--output X --profile X`` passed both
    checks, and at the end of the run writing the report to the folder X raised ``IsADirectoryError`` before the
    table was printed, losing every figure of the run. Refused before any folder is made."""
    output = tmp_path / "bench"
    profile = output if layout == "same path" else output / "prof"
    status = main(["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--output", str(output),
                   "--profile", str(profile)])
    assert status == 2 and not recording_gpu
    assert (f"oellm bench: error: --output {output} is where --profile {profile} puts its folder; give another "
            "file name") in capsys.readouterr().err
    assert not output.exists()


def test_a_report_file_inside_the_profile_folder_is_accepted(tmp_path: Path, recording_gpu: list) -> None:
    profile = tmp_path / "bench"
    with pytest.raises(GpuWorkStarted):
        main(["bench", "--model", TINY, "--seq-length", "128", "--mbs", "1", "--output", str(profile / "r.json"),
              "--profile", str(profile)])
    assert profile.is_dir() and recording_gpu[0].profile_dir == profile


@pytest.mark.parametrize(("argv", "named"), [(["--warmup", "0"], "--warmup"), (["--seq-length", "1"], "--seq-length"),
                                             (["--model", "qwen3-30b-a3b-proxy-2L"], "qwen3.5-35b-a3b flavour"),
                                             (["--ours-config", "no_such_field=1"], "no_such_field")])
def test_a_bad_argument_is_named_without_a_gpu(argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    """Checked before CUDA is looked for: on a login node the refusal named the missing GPU, and the bad argument
    surfaced only once a GPU node had been allocated."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    try:
        status = main(["bench", "--mbs", "1", *argv])
    except SystemExit as usage_error:  # a count below its minimum is argparse's usage error
        status = usage_error.code
    assert status == 2
    err = capsys.readouterr().err
    assert named in err and "needs a CUDA GPU" not in err


def test_a_micro_batch_size_of_zero_is_refused_by_the_config() -> None:
    """``BenchConfig`` is the check for callers that do not go through the command line (whose ``--mbs`` parser refuses
    0 too): a size 0 would time empty batches and report 0 tokens/s beside the real sizes."""
    sizes = (0, *sorted(random.sample([1, 2, 4, 8], 2)))
    with pytest.raises(ValueError, match=r"micro-batch sizes must be positive"):
        harness.BenchConfig(model=TINY, seq_length=128, mbs=sizes, sides=("hf",))


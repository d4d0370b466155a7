"""An ``--hf`` folder whose weights are not there is named for what it holds: Git LFS pointers in place of the
safetensors (a ``git clone`` without git-lfs) were called a header too large with the advice to download them again,
which a git clone repeats; and a folder without any weight file was told to convert ``.bin`` weights it lacks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from megatron.oellm.cards import get_card
from megatron.oellm.cli import main
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import random_hf_tensors, write_hf

CARDS = ["qwen3.5-35b-a3b-tiny", "qwen3-30b-a3b-tiny"]


def _lfs_pointer(path: Path) -> None:
    """Replace ``path`` by the Git LFS pointer a clone without git-lfs leaves for it."""
    size = path.stat().st_size
    path.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{random.getrandbits(256):064x}\n"
                    f"size {size}\n")


def _error_line(capsys: pytest.CaptureFixture, card_name: str, hf: Path, out: Path) -> str:
    """The one line ``oellm convert hf-to-mcore`` prints on stderr for ``--hf hf``; asserts it exits 2."""
    capsys.readouterr()
    assert main(["convert", "hf-to-mcore", "--model", card_name, "--hf", str(hf), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith("oellm convert hf-to-mcore: error: ") and captured.out == "", captured
    return line


@pytest.mark.parametrize("sharded", [True, False])
def test_git_lfs_pointers_are_named_with_the_way_to_fetch_the_weights(sharded: bool, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    card_name = random.choice(CARDS)
    card = get_card(card_name)
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), tmp_path / "hf",
             max_shard_bytes=random.randint(50_000, 200_000) if sharded else 2**40)
    shards = sorted((tmp_path / "hf").glob("*.safetensors"))
    assert (len(shards) > 1) is sharded
    pointers = random.sample(shards, random.randint(1, len(shards)))  # some, or all, as a clone leaves them
    for shard in pointers:
        _lfs_pointer(shard)
    line = _error_line(capsys, card_name, tmp_path / "hf", tmp_path / "out")
    named = [shard for shard in pointers if f"error: {shard} is a Git LFS pointer file, not the weights" in line]
    assert len(named) == 1, line
    assert "`git lfs pull` in the clone" in line and "`hf download" in line, line
    assert "header too large" not in line and "re-download" not in line, line
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_no_pointer_keeps_the_advice_to_download_it_again(tmp_path: Path) -> None:
    """A truncated shard, or one of other text, is still refused as incomplete."""
    card = get_card(random.choice(CARDS))
    write_hf(card, random_hf_tensors(card, seed=random.randrange(10**6)), tmp_path / "hf")
    shard = random.choice(sorted((tmp_path / "hf").glob("*.safetensors")))
    data = shard.read_bytes()
    shard.write_bytes(random.choice([data[:random.randint(0, 7)], data[:random.randint(8, len(data) - 1)],
                                     b"version https://git-lfs.github.com/spec/v"]))  # truncated, or no pointer
    with pytest.raises(ConversionError, match=rf"^cannot read {shard}: .*; is the file complete \(re-download it\)\?$"):
        hf_to_mcore_checkpoint(card, tmp_path / "hf", tmp_path / "out")


@pytest.mark.parametrize("contents", [[], ["config.json", "README.md"], ["training_args.bin"]])
def test_a_folder_without_weight_files_says_so_and_not_to_convert_bin_files(contents: list[str], tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    for name in contents:
        (hf / name).write_bytes(random.randbytes(random.randint(0, 64)) if name != "config.json" else b"{}")
    line = _error_line(capsys, random.choice(CARDS), hf, tmp_path / "out")
    assert line.endswith(f"error: no *.safetensors in {hf}; it holds no weight files (an incomplete download, or not "
                         "the model's folder): pass --hf the folder with config.json and model*.safetensors"), line
    assert ".bin" not in line


def test_pytorch_bin_weights_are_named_with_the_advice_to_convert_them(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    count = random.randint(1, 4)
    names = (["pytorch_model.bin"] if count == 1 else
             [f"pytorch_model-{i:05d}-of-{count:05d}.bin" for i in range(1, count + 1)])
    for name in [*names, "training_args.bin"]:
        (hf / name).write_bytes(random.randbytes(random.randint(0, 64)))
    line = _error_line(capsys, random.choice(CARDS), hf, tmp_path / "out")
    assert f"error: no *.safetensors in {hf}; it holds PyTorch .bin weights ({names[0]}" in line, line
    assert "convert them to safetensors with transformers first" in line and "training_args" not in line, line


@pytest.mark.parametrize("name", ["consolidated.00.pth", "model.pt", "model.ckpt", "tf_model.h5", "flax_model.msgpack",
                                  "model-q8_0.gguf"])
def test_weights_of_another_format_are_named_as_such(name: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    """Weights the converter does not read (PyTorch pickles other than pytorch_model*.bin, TensorFlow, Flax, GGUF) were
    called "no weight files (an incomplete download ...)": the refusal names them as another format."""
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_bytes(b"{}")
    (hf / name).write_bytes(random.randbytes(random.randint(1, 64)))
    line = _error_line(capsys, random.choice(CARDS), hf, tmp_path / "out")
    assert f"error: no *.safetensors in {hf}; it holds weights in another format ({name}), which this converter " \
           "does not read" in line, line
    assert "no weight files" not in line, line

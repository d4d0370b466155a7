"""Test helpers for checkpoint conversion: random HF tensors for a card, a bitwise comparison, a tiny tokenizer."""

from __future__ import annotations

import json
import os
import random
import signal
import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from torch import Tensor

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import to_hf, to_mcore
from megatron.oellm.convert.family import expected_shapes, family_module
from megatron.oellm.convert.safetensors_io import DEFAULT_MAX_SHARD_BYTES, ShardedSafetensorsWriter, layout_of

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def random_hf_tensors(card: ModelCard, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> dict[str, Tensor]:
    """Fresh random tensors under every HF name of ``card`` (per-expert layout).

    The GDN gated-norm weights (plain ``w * x`` in HF, shifted by -1 for megatron) are drawn around 1 like trained
    ones, so the shift is exactly invertible; everything else is standard normal.
    """
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in expected_shapes(card)[0].items():
        values = torch.randn(shape, generator=generator)
        if name.endswith("linear_attn.norm.weight"):
            values = (1 + 0.1 * values).clamp(0.5, 1.99)
        tensors[name] = values.to(dtype)
    return tensors


def same_bits(expected: Tensor, actual: Tensor) -> bool:
    """True if both tensors have the same dtype, shape and bytes (-0.0 and NaN payloads included). Written here, not
    taken from the converter's own ``bitwise_equal``: the check of its output must not be the code under test."""
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return False
    return torch.equal(*(t.detach().contiguous().reshape(-1).view(torch.uint8) for t in (expected, actual)))


def assert_bitwise_equal(expected: dict[str, Tensor], actual: dict[str, Tensor]) -> None:
    """Same names, and every tensor identical bit for bit (dtype and shape included)."""
    assert sorted(actual) == sorted(expected)
    different = [name for name in expected if not same_bits(expected[name], actual[name])]
    assert not different, f"tensors differ: {different[:5]}"


def fuse_experts(card: ModelCard, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """The same tensors with experts in transformers' in-memory layout (``gate_up_proj`` / ``down_proj``)."""
    out = {name: t for name, t in tensors.items() if ".mlp.experts." not in name}
    for layer in range(card.num_layers):
        p = f"model.layers.{layer}.mlp.experts."
        out[f"{p}gate_up_proj"] = torch.stack([torch.cat([tensors[f"{p}{e}.gate_proj.weight"],
                                                          tensors[f"{p}{e}.up_proj.weight"]])
                                               for e in range(card.num_experts)])
        out[f"{p}down_proj"] = torch.stack([tensors[f"{p}{e}.down_proj.weight"] for e in range(card.num_experts)])
    return out


def write_safetensors(directory: Path, tensors: dict[str, Tensor], max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
                      ) -> list[Path]:
    """``tensors`` as an HF safetensors checkpoint in ``directory`` (shards of ``max_shard_bytes``, with an index when
    more than one); returns the files."""
    writer = ShardedSafetensorsWriter(directory, layout_of(tensors), max_shard_bytes)
    writer.add(tensors)
    return writer.close()


def write_hf(card: ModelCard, tensors: dict[str, Tensor], directory: Path, max_shard_bytes: int = 150_000) -> Path:
    """An HF checkpoint directory: sharded safetensors with index plus the card's config.json."""
    write_safetensors(directory, tensors, max_shard_bytes)
    family_module(card).hf_config_from_card(card).save_pretrained(directory)
    return directory


def edit_json(path: Path, **fields: object) -> None:
    """Set ``fields`` at the top level of the JSON object in ``path``; a field given None is removed."""
    data = json.loads(path.read_text())
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data, indent=2))


def signal_at_layer_one(monkeypatch: pytest.MonkeyPatch, unit_function: str, signum: int) -> None:
    """Make ``unit_function`` (``to_mcore.hf_to_mcore_unit`` or ``to_hf.mcore_to_hf_unit``) send ``signum`` to this
    process when the conversion reaches unit 1 (the first decoder layer), half-way through the output."""
    module = to_mcore if unit_function == "hf_to_mcore_unit" else to_hf
    convert = getattr(module, unit_function)

    def signalled(card: ModelCard, unit: object, tensors: object) -> object:
        if unit == 1:
            os.kill(os.getpid(), signum)
        return convert(card, unit, tensors)

    monkeypatch.setattr(module, unit_function, signalled)


@contextmanager
def signal_handler(signum: int, handler: Callable | int) -> Iterator[None]:
    """``handler`` for ``signum`` while inside (the conversion's own must replace it and put it back)."""
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def raised_while_writing(code: int, path: str | None, kind: type[RuntimeError] = RuntimeError,
                         message: str = "[enforce fail at inline_container.cc] unexpected pos") -> RuntimeError:
    """The ``kind`` error a writer raises (as torch's does) while it handles an ``OSError`` of errno ``code`` on
    ``path`` (None: naming no file, as a failed ``write()`` raises it): the form
    :func:`megatron.oellm.convert.output.storage_error_behind` looks behind."""
    try:
        try:
            raise OSError(code, os.strerror(code), path)
        except OSError:
            raise kind(message) from None
    except RuntimeError as error:
        return error


def save_tiny_tokenizer(directory: Path, vocab_size: int, seed: int,
                        chat_template: str | dict[str, str] | None = None) -> PreTrainedTokenizerBase:
    """A byte-level BPE tokenizer of exactly ``vocab_size`` tokens (ids 0 to ``vocab_size - 1``, the last an added
    special token), trained on fresh random text and saved with transformers' ``save_pretrained`` into
    ``directory`` (no download); returns it. ``chat_template`` (one, or named ones with a ``default``) is saved too."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    text = ["".join(rng.choices(string.ascii_letters + string.digits + " .,", k=400)) for _ in range(100)]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(text, trainers.BpeTrainer(vocab_size=vocab_size - 1, show_progress=False,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert backend.get_vocab_size() == vocab_size - 1, "random text too short for the merges asked for"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")
    assert len(tokenizer) == vocab_size
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(directory)
    return tokenizer

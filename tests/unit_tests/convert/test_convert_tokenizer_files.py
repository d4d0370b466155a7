"""``mcore-to-hf --tokenizer DIR``: the export holds DIR's Hugging Face tokenizer files (those only, byte for byte),
so ``AutoTokenizer.from_pretrained`` loads it; with ``--overwrite`` a previous export's tokenizer files are replaced
(the per-checkpoint evaluation loop), while without ``--tokenizer`` they stay foreign and refused. DIR is checked
before any conversion work: a tokenizer folder, whose token ids fit the model's vocabulary."""

from __future__ import annotations

import json
import os
import random
import signal
import string
from pathlib import Path

import pytest

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert import to_hf
from megatron.oellm.convert.errors import ConversionError, ConversionInterrupted
from megatron.oellm.convert.safetensors_io import SafetensorsSource
from megatron.oellm.convert.to_hf import mcore_to_hf_checkpoint
from megatron.oellm.convert.to_mcore import hf_to_mcore_checkpoint
from tests.unit_tests.convert.convert_helpers import (
    assert_bitwise_equal,
    random_hf_tensors,
    save_tiny_tokenizer,
    signal_at_layer_one,
    write_hf,
)

_TEMPLATES = {"default": "{% for m in messages %}{{ m['content'] }}{% endfor %}", "tool_use": "{{ tools }}"}


def _files(directory: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``directory``."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _tokenizer_with_decoys(directory: Path, vocab_size: int) -> dict[str, bytes]:
    """A tiny tokenizer (random vocabulary, chat templates) saved in ``directory`` beside a decoy HF model's files;
    returns the tokenizer's own files (relative path -> bytes)."""
    save_tiny_tokenizer(directory, vocab_size, seed=random.randrange(2**31), chat_template=_TEMPLATES)
    tokenizer = _files(directory)
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": vocab_size}))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))
    (directory / "model.safetensors").write_bytes(random.randbytes(64))
    (directory / "README.md").write_text("a model card\n")
    return tokenizer


def _hidden_siblings(directory: Path) -> list[str]:
    """Staging or replaced-output folders a conversion left beside ``directory``."""
    return [p.name for p in directory.parent.iterdir() if p.name.startswith(".")]


def test_the_export_holds_the_tokenizer_files_byte_for_byte_and_nothing_else(converted) -> None:
    card, _, tmp = converted
    tokenizer = _tokenizer_with_decoys(tmp / "tok", card.vocab_size - random.randrange(0, 200))
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "plain")
    summary = mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tmp / "tok")
    plain, out = _files(tmp / "plain"), _files(tmp / "out")
    assert sorted(tokenizer) == sorted(["tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                        "additional_chat_templates/tool_use.jinja"])
    assert out == {**plain, **tokenizer}  # the export's own config and weights, the tokenizer's files as they are
    assert summary.notes[1] == (f"copied 4 tokenizer files from --tokenizer {tmp / 'tok'}: tokenizer_config.json, "
                                "tokenizer.json, chat_template.jinja, additional_chat_templates/tool_use.jinja")


def test_auto_tokenizer_loads_the_export_and_encodes_as_the_source(converted) -> None:
    from transformers import AutoTokenizer

    card, _, tmp = converted
    source = save_tiny_tokenizer(tmp / "tok", card.vocab_size, seed=random.randrange(2**31))
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tmp / "tok")
    exported = AutoTokenizer.from_pretrained(tmp / "out")
    text = "".join(random.choices(string.printable + "äöüßéñ中文", k=300))
    ids = source(text)["input_ids"]
    assert len(set(ids)) > 10
    assert exported(text)["input_ids"] == ids
    assert exported.decode(ids) == source.decode(ids) == text
    assert len(exported) == len(source) == card.vocab_size


def _second_checkpoint(card: ModelCard, tmp: Path) -> dict:
    """Fresh random weights written to ``tmp/hf2`` and converted to ``tmp/mcore2``; returns the tensors."""
    tensors = random_hf_tensors(card, seed=random.randrange(2**31))
    write_hf(card, tensors, tmp / "hf2")
    hf_to_mcore_checkpoint(card, tmp / "hf2", tmp / "mcore2")
    return tensors


def test_the_evaluation_loop_exports_each_checkpoint_over_the_last_with_its_tokenizer(converted) -> None:
    """Export, then export the next checkpoint over it with --overwrite and --tokenizer: the weights are the new
    checkpoint's and the tokenizer files those of the new --tokenizer (a file only the previous one had is gone)."""
    card, _, tmp = converted
    _tokenizer_with_decoys(tmp / "tok1", card.vocab_size)
    second = save_tiny_tokenizer(tmp / "tok2", card.vocab_size - 50, seed=random.randrange(2**31))
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tmp / "tok1")
    weights = _second_checkpoint(card, tmp)
    mcore_to_hf_checkpoint(card, tmp / "mcore2", tmp / "out", overwrite=True, tokenizer_dir=tmp / "tok2")
    mcore_to_hf_checkpoint(card, tmp / "mcore2", tmp / "plain")
    assert _files(tmp / "out") == {**_files(tmp / "plain"), **_files(tmp / "tok2")}
    assert_bitwise_equal(weights, dict(SafetensorsSource(tmp / "out")))
    assert len(second) == card.vocab_size - 50
    assert not _hidden_siblings(tmp / "out")


def test_without_tokenizer_a_previous_exports_tokenizer_files_stay_foreign(converted) -> None:
    card, _, tmp = converted
    save_tiny_tokenizer(tmp / "tok", card.vocab_size, seed=random.randrange(2**31))
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tmp / "tok")
    before = _files(tmp / "out")
    with pytest.raises(ConversionError, match=r"holds tokenizer\.json, tokenizer_config\.json, which this "
                                              r"conversion does not write"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", overwrite=True)
    assert _files(tmp / "out") == before


def test_with_tokenizer_other_files_in_out_are_still_refused(converted) -> None:
    card, _, tmp = converted
    _tokenizer_with_decoys(tmp / "tok", card.vocab_size)
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tmp / "tok")
    (tmp / "out" / "notes.txt").write_text("mine\n")
    (tmp / "out" / "additional_chat_templates" / "draft.txt").write_text("mine too\n")
    before = _files(tmp / "out")
    with pytest.raises(ConversionError, match=r"holds additional_chat_templates/draft\.txt, notes\.txt, which this "
                                              r"conversion does not write"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", overwrite=True, tokenizer_dir=tmp / "tok")
    assert _files(tmp / "out") == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_with_tokenizer_tokenizer_files_without_an_export_beside_them_are_refused(converted, overwrite: bool) -> None:
    """An --out holding a tokenizer and no export's marked weights (the user's own tokenizer folder given as --out)
    is refused, naming its files, and kept: --overwrite --tokenizer replaced it, deleting what the new tokenizer
    lacks, as it replaces a previous export's tokenizer files."""
    card, _, tmp = converted
    save_tiny_tokenizer(tmp / "out", card.vocab_size, seed=random.randrange(2**31), chat_template=_TEMPLATES)
    save_tiny_tokenizer(tmp / "tok", card.vocab_size, seed=random.randrange(2**31))
    before = _files(tmp / "out")
    beside = r" \(no marked model\.safetensors or model\.safetensors\.index\.json beside it\)"
    with pytest.raises(ConversionError, match=rf"holds additional_chat_templates{beside}, chat_template\.jinja{beside}, "
                                              rf"tokenizer\.json{beside}, tokenizer_config\.json{beside}, which this "
                                              "conversion does not write"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", overwrite=overwrite, tokenizer_dir=tmp / "tok")
    assert _files(tmp / "out") == before
    assert not _hidden_siblings(tmp / "out")


def _no_vocabulary(directory: Path) -> None:
    (directory / "tokenizer.json").unlink()


def _no_config(directory: Path) -> None:
    (directory / "tokenizer_config.json").unlink()


def _broken_json(directory: Path) -> None:
    (directory / "tokenizer.json").write_text('{"model": {"vocab": ')


def _no_ids(directory: Path) -> None:
    (directory / "tokenizer.json").write_text('{"model": {"type": "BPE"}, "added_tokens": []}')


@pytest.mark.parametrize(("damage", "message"), [
    (_no_vocabulary, r"--tokenizer {tok} is not a Hugging Face tokenizer folder: it has no tokenizer\.json or "
                     r"tokenizer\.model or vocab\.json \(the files tokenizer\.save_pretrained writes\)$"),
    (_no_config, r"--tokenizer {tok} is not a Hugging Face tokenizer folder: it has no tokenizer_config\.json "),
    (_broken_json, r"cannot read the tokenizer file {tok}/tokenizer\.json: "),
    (_no_ids, r"{tok}/tokenizer\.json is not a tokenizer\.json of the tokenizers library"),
])
def test_a_folder_that_is_no_tokenizer_is_refused_before_any_work(converted, monkeypatch: pytest.MonkeyPatch,
                                                                   damage, message: str) -> None:
    card, _, tmp = converted
    _tokenizer_with_decoys(tmp / "tok", card.vocab_size)
    damage(tmp / "tok")
    _refused_before_any_work(card, tmp, monkeypatch, message.format(tok=tmp / "tok"))


def _refused_before_any_work(card: ModelCard, tmp: Path, monkeypatch: pytest.MonkeyPatch, message: str,
                             tokenizer: Path | None = None) -> None:
    """mcore-to-hf with ``--tokenizer`` (default ``tmp/tok``) raises ``message`` before opening the checkpoint and
    writes nothing."""
    def no_reading(*_: object) -> None:
        raise AssertionError("the checkpoint was opened before the tokenizer was checked")

    monkeypatch.setattr(to_hf, "CheckpointReader", no_reading)
    with pytest.raises(ConversionError, match=message):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tokenizer or tmp / "tok")
    assert not (tmp / "out").exists()
    assert not _hidden_siblings(tmp / "out")


def test_a_missing_folder_or_a_file_is_refused(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    card, _, tmp = converted
    _refused_before_any_work(card, tmp, monkeypatch, f"--tokenizer {tmp / 'tok'} does not exist; pass the folder "
                                                     "of the Hugging Face tokenizer the checkpoint was trained with$")
    save_tiny_tokenizer(tmp / "tok", card.vocab_size, seed=random.randrange(2**31))
    _refused_before_any_work(card, tmp, monkeypatch, f"--tokenizer {tmp / 'tok' / 'tokenizer.json'} is a file; "
                                                     f"pass the folder holding it \\({tmp / 'tok'}\\)$",
                             tmp / "tok" / "tokenizer.json")


def test_a_tokenizer_of_a_larger_vocabulary_is_refused_with_both_numbers(converted,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    card, _, tmp = converted
    size = card.vocab_size + random.randrange(1, 40)
    _tokenizer_with_decoys(tmp / "tok", size)
    _refused_before_any_work(card, tmp, monkeypatch,
                             f"--tokenizer {tmp / 'tok'}: tokenizer.json defines token id {size - 1}, but the model's "
                             f"vocabulary has {card.vocab_size} rows \\(ids 0 to {card.vocab_size - 1}\\): it is "
                             "another model's tokenizer; pass the one the checkpoint was trained with")


def test_an_added_token_past_the_vocabulary_is_refused(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ids of ``added_tokens`` count, not only the model vocabulary's (Qwen's special tokens sit past it)."""
    card, _, tmp = converted
    save_tiny_tokenizer(tmp / "tok", card.vocab_size - 20, seed=random.randrange(2**31))
    path = tmp / "tok" / "tokenizer.json"
    data = json.loads(path.read_text())
    token = card.vocab_size + random.randrange(0, 1000)
    data["added_tokens"].append({**data["added_tokens"][0], "id": token, "content": "<|im_start|>"})
    path.write_text(json.dumps(data))
    _refused_before_any_work(card, tmp, monkeypatch, f"tokenizer.json defines token id {token}, but the model's "
                                                     f"vocabulary has {card.vocab_size} rows")


def test_a_sentencepiece_or_vocab_json_tokenizer_is_copied_without_an_id_check(converted) -> None:
    """Without tokenizer.json there is no id to check: the files are copied as they are (a symlink, as in a Hugging
    Face cache snapshot, as the file it points to)."""
    card, _, tmp = converted
    files = {"tokenizer_config.json": b'{"tokenizer_class": "LlamaTokenizer"}', "tokenizer.model": random.randbytes(300),
             "vocab.json": json.dumps({"a": 0, "b": card.vocab_size * 2}).encode(), "merges.txt": b"#version\na b\n"}
    (tmp / "blobs").mkdir()
    (tmp / "tok").mkdir()
    for name, data in files.items():
        (tmp / "blobs" / name).write_bytes(data)
        (tmp / "tok" / name).symlink_to(tmp / "blobs" / name)
    mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tmp / "tok")
    out = _files(tmp / "out")
    assert {name: out[name] for name in files} == files
    assert not any((tmp / "out" / name).is_symlink() for name in files)


def test_an_interrupted_export_leaves_no_tokenizer_file(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    card, _, tmp = converted
    _tokenizer_with_decoys(tmp / "tok", card.vocab_size)
    signal_at_layer_one(monkeypatch, "mcore_to_hf_unit", signal.SIGTERM)
    with pytest.raises(ConversionInterrupted):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", tokenizer_dir=tmp / "tok")
    assert not (tmp / "out").exists()
    assert not _hidden_siblings(tmp / "out")


def test_tokenizer_inside_out_is_refused_as_an_input(converted) -> None:
    card, _, tmp = converted
    save_tiny_tokenizer(tmp / "out" / "tok", card.vocab_size, seed=random.randrange(2**31))
    with pytest.raises(ConversionError, match=r"would overwrite the input .*tok/tokenizer_config\.json"):
        mcore_to_hf_checkpoint(card, tmp / "mcore", tmp / "out", overwrite=True, tokenizer_dir=tmp / "out" / "tok")


def test_an_unreadable_tokenizer_file_is_refused_naming_it(converted, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user without read permission sees it (os.access: root reads anything, so the permission is simulated)."""
    card, _, tmp = converted
    save_tiny_tokenizer(tmp / "tok", card.vocab_size, seed=random.randrange(2**31), chat_template=_TEMPLATES)
    denied = tmp / "tok" / random.choice(["chat_template.jinja", "tokenizer.json", "tokenizer_config.json"])
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != denied and access(path, mode))
    _refused_before_any_work(card, tmp, monkeypatch, f"--tokenizer {tmp / 'tok'}: this user may not read "
                                                     f"{denied.name}; make them readable \\(chmod u\\+r\\)")


def test_a_tokenizer_far_smaller_than_the_vocabulary_gets_a_warning(tmp_path: Path) -> None:
    """Another vocabulary's tokenizer with fewer tokens than the model has rows (the Qwen tokenizer on an
    OpenEuroLLM checkpoint) passes the id check; it gets a warning naming the share of rows it covers, while a
    vocabulary padded by under 5 % (as models pad theirs) gets none."""
    import warnings

    from megatron.oellm.convert.tokenizer_files import TOKENIZER_COVERAGE, check_tokenizer_dir

    tokens = random.randrange(300, 400)
    save_tiny_tokenizer(tmp_path, tokens, seed=random.randrange(2**31))
    far = int(tokens / TOKENIZER_COVERAGE) + random.randrange(2, 1000)
    with pytest.warns(UserWarning, match=rf"defines ids 0 to {tokens - 1}, \d+ % of the model's {far} vocabulary "
                                         r"rows: check that it is the tokenizer the checkpoint was trained with"):
        check_tokenizer_dir(tmp_path, far)
    padded = tokens + random.randrange(0, int(tokens * (1 / TOKENIZER_COVERAGE - 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "tokenizer.json" in check_tokenizer_dir(tmp_path, padded)


def test_a_tokenizer_one_id_past_the_vocabulary_is_refused(tmp_path: Path) -> None:
    """Ids 0 to N-1 fit N vocabulary rows; id N does not (the embedding has no row N). Fails if the largest id may
    equal the vocabulary size."""
    from megatron.oellm.convert.tokenizer_files import check_tokenizer_dir

    vocab = random.randrange(300, 400)
    save_tiny_tokenizer(tmp_path / "fits", vocab, seed=random.randrange(2**31))
    assert "tokenizer.json" in check_tokenizer_dir(tmp_path / "fits", vocab)
    save_tiny_tokenizer(tmp_path / "over", vocab + 1, seed=random.randrange(2**31))
    with pytest.raises(ConversionError, match=rf"defines token id {vocab}, but the model's vocabulary has {vocab} "
                                              rf"rows \(ids 0 to {vocab - 1}\)"):
        check_tokenizer_dir(tmp_path / "over", vocab)


def test_the_coverage_warning_starts_below_the_share(tmp_path: Path) -> None:
    """N token ids in the most rows of which they still cover the share (N >= share x rows) get no warning; one row
    more does. Fails if the ids are counted one short (the largest id, not the count)."""
    import warnings

    from megatron.oellm.convert.tokenizer_files import TOKENIZER_COVERAGE, check_tokenizer_dir

    tokens = random.randrange(300, 400)
    save_tiny_tokenizer(tmp_path, tokens, seed=random.randrange(2**31))
    rows = next(rows for rows in range(int(tokens / TOKENIZER_COVERAGE) + 2, tokens, -1)
                if tokens >= TOKENIZER_COVERAGE * rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "tokenizer.json" in check_tokenizer_dir(tmp_path, rows)
    with pytest.warns(UserWarning, match=rf"defines ids 0 to {tokens - 1}, \d+ % of the model's {rows + 1} "):
        check_tokenizer_dir(tmp_path, rows + 1)

"""A multimodal ``config.json`` as transformers 5's ``save_pretrained`` of ``Qwen3_5MoeConfig`` writes it: the token
ids at the top level, and ``"bos_token_id": null`` (eos, pad too) in ``text_config``. The export's text config took
``text_config``'s nulls over the top-level ids, so the exported model had no end-of-sequence token."""

from __future__ import annotations

import json
import random
from pathlib import Path

from megatron.oellm.cards import get_card
from megatron.oellm.convert.export_config import export_config_files
from megatron.oellm.convert.family import family_module
from megatron.oellm.convert.hf_config import CONFIG_NAME, text_model_config

QWEN35 = "qwen3.5-35b-a3b-tiny"
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _saved_multimodal_config(directory: Path, ids: dict[str, int]) -> dict:
    """The card's text config under a ``Qwen3_5MoeConfig`` with the token ids ``ids`` at its top level, saved by
    transformers into ``directory``; returns the ``config.json`` it wrote."""
    from transformers import Qwen3_5MoeConfig

    card = get_card(QWEN35)
    text = family_module(card).hf_config_from_card(card).to_dict()
    del text["architectures"]
    Qwen3_5MoeConfig(text_config=text, **ids).save_pretrained(directory)
    return json.loads((directory / CONFIG_NAME).read_text())


def test_top_level_token_ids_win_over_the_nulls_save_pretrained_writes_into_text_config(tmp_path: Path) -> None:
    """The export takes the top-level ids; an id ``text_config`` states itself still wins, and a null stated only
    there stays null."""
    card = get_card(QWEN35)
    ids = dict(zip(TOKEN_IDS, random.sample(range(card.vocab_size), len(TOKEN_IDS)), strict=True))
    saved = _saved_multimodal_config(tmp_path, ids)
    assert {key: saved["text_config"][key] for key in TOKEN_IDS} == dict.fromkeys(TOKEN_IDS)  # the form at issue
    assert {key: saved[key] for key in TOKEN_IDS} == ids
    files, _ = export_config_files(card, {}, tmp_path, tmp_path)
    exported = json.loads(files[CONFIG_NAME])
    assert {key: exported[key] for key in TOKEN_IDS} == ids
    own = random.choice([i for i in range(card.vocab_size) if i not in ids.values()])
    saved["text_config"]["eos_token_id"] = own
    del saved["pad_token_id"]
    exported = json.loads(text_model_config(card, json.dumps(saved)))
    assert [exported[key] for key in TOKEN_IDS] == [ids["bos_token_id"], own, None]

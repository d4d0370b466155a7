"""The HF config files mcore-to-hf writes: from ``--hf-config``, else those hf-to-mcore kept with the checkpoint,
else the card's; each checked against the card, a multimodal one reduced to its language model's."""

from __future__ import annotations

import json
from pathlib import Path

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert.errors import ConversionError
from megatron.oellm.convert.hf_config import (
    CONFIG_FILES,
    CONFIG_NAME,
    check_hf_config,
    parse_json_object,
    read_config_files,
    text_model_config,
)
from megatron.oellm.convert.mcore_checkpoint import HF_CONFIG_KEY


def _stored_config_files(common: dict, directory: Path) -> dict[str, str]:
    """The HF config files hf-to-mcore kept in the checkpoint's common state (file name -> text; empty if none)."""
    files = common.get(HF_CONFIG_KEY)
    if not files:
        return {}
    if not (isinstance(files, dict) and set(files) <= set(CONFIG_FILES)
            and all(isinstance(text, str) for text in files.values())):
        raise ConversionError(f"{directory}: the common state's {HF_CONFIG_KEY!r} is not a map of "
                              f"{' / '.join(CONFIG_FILES)} to their text; the checkpoint is damaged")
    for name, text in files.items():
        parse_json_object(text, f"the {name} stored with {directory}")
    return files


def export_config_files(card: ModelCard, common: dict, directory: Path,
                         hf_config_dir: Path | None) -> tuple[dict[str, str], str]:
    """The HF config files mcore-to-hf writes as they are (file name -> text; without ``config.json`` the card's
    config is written) and a report line saying where they come from: ``hf_config_dir`` if given, else the checkpoint
    ``directory`` (``common`` is its common state). A ``config.json`` must describe ``card``."""
    if hf_config_dir is not None:
        if not hf_config_dir.is_dir():
            raise ConversionError(f"--hf-config {hf_config_dir} is not a directory")
        files = read_config_files(hf_config_dir)
        if CONFIG_NAME not in files:
            raise ConversionError(f"--hf-config {hf_config_dir} has no {CONFIG_NAME}")
        note = f"{' and '.join(files)} from --hf-config {hf_config_dir}"
        resized = _resized_vocab_config(card, files[CONFIG_NAME], str(hf_config_dir / CONFIG_NAME))
        if resized is None:
            return _text_model_only(card, files, note)
        text, stated = resized
        return _text_model_only(card, {**files, CONFIG_NAME: text},
                                f"{note}; its vocab_size {stated} is set to the export's vocabulary of "
                                f"{card.vocab_size} (the run trained another), every other field as given")
    files = _stored_config_files(common, directory)
    if CONFIG_NAME in files:
        check_hf_config(card, files[CONFIG_NAME], f"the {CONFIG_NAME} stored with {directory}")
        return _text_model_only(card, files, f"{' and '.join(files)} as hf-to-mcore kept them with the checkpoint")
    kept = f" ({' and '.join(files)} as kept with the checkpoint)" if files else ""
    return files, (f"{CONFIG_NAME} derived from the card{kept}: the checkpoint holds no HF config.json (e.g. saved "
                   "by training); pass --hf-config DIR of the original model to keep its token ids and settings")


_HF_CONFIG_FIX = "give --hf-config the directory of this checkpoint's own HF model"


def _resized_vocab_config(card: ModelCard, config_text: str, where: str) -> tuple[str, int] | None:
    """Check an ``--hf-config`` ``config.json`` (``config_text``, from ``where``) against ``card``; None when it
    describes the card as it is. One whose only difference is the vocabulary (the original model of a run that
    trained another, e.g. with ``--vocab-size``) is accepted: returned as (its text with ``vocab_size`` set to the
    card's, the ``vocab_size`` it stated). Any other difference is refused naming every contradicted field; without
    this, the refusal's ``--vocab-size`` of the original model and the checkpoint's rows sent the user back and
    forth."""
    config = parse_json_object(config_text, where)
    text = config.get("text_config", config)  # a multimodal config's language model: what the export describes
    stated = text.get("vocab_size") if isinstance(text, dict) else None
    if isinstance(stated, int) and stated != card.vocab_size:
        text["vocab_size"] = card.vocab_size
        resized = json.dumps(config, indent=2) + "\n"
        try:
            check_hf_config(card, resized, where, fix=_HF_CONFIG_FIX)
        except ConversionError:
            pass  # refused below, naming every field (the vocabulary too) the config contradicts
        else:
            return resized, stated
    check_hf_config(card, config_text, where, fix=_HF_CONFIG_FIX)
    return None


def _text_model_only(card: ModelCard, files: dict[str, str], note: str) -> tuple[dict[str, str], str]:
    """``files`` with a multimodal ``config.json`` replaced by its language model's (:func:`text_model_config`),
    and ``note`` saying so."""
    text = text_model_config(card, files[CONFIG_NAME])
    if text is None:
        return files, note
    return ({**files, CONFIG_NAME: text},
            f"{note}; {CONFIG_NAME} is the text model's part of the multimodal config (the export holds the language "
            "model only)")

"""The HF config files mcore-to-hf writes: from ``--hf-config``, else those hf-to-mcore kept with the checkpoint,
else the card's; each checked against the card, a multimodal one reduced to its language model's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from megatron.oellm.cards import ModelCard
from megatron.oellm.convert.errors import ConversionError, check_folder_access
from megatron.oellm.convert.hf_config import (
    CONFIG_FILES,
    CONFIG_NAME,
    PICK_THE_CARD,
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
    ``directory`` (``common`` is its common state). A ``config.json`` must describe ``card``, its vocabulary aside
    (:func:`_fitted_to_the_card`)."""
    if hf_config_dir is not None:
        check_folder_access(hf_config_dir, f"--hf-config {hf_config_dir}")
        if not hf_config_dir.is_dir():
            raise ConversionError(f"--hf-config {hf_config_dir} is not a directory")
        files = read_config_files(hf_config_dir)
        if CONFIG_NAME not in files:
            raise ConversionError(f"--hf-config {hf_config_dir} has no {CONFIG_NAME}")
        source = _ConfigSource(str(hf_config_dir / CONFIG_NAME), f"--hf-config {hf_config_dir}",
                               f"{' and '.join(files)} from --hf-config {hf_config_dir}", _HF_CONFIG_FIX,
                               f"copy {hf_config_dir} and set these fields in the copy to the ids of the run's "
                               "tokenizer (or remove them), then pass --hf-config COPY",
                               "edit them in a copy of --hf-config if they differ")
        return _fitted_to_the_card(card, files, source)
    files = _stored_config_files(common, directory)
    if CONFIG_NAME in files:
        where = f"the {CONFIG_NAME} stored with {directory}"
        source = _ConfigSource(where, f"the HF config stored with {directory}",
                               f"{' and '.join(files)} as hf-to-mcore kept {'it' if len(files) == 1 else 'them'} "
                               "with the checkpoint",
                               PICK_THE_CARD,
                               "put the original model's config files in a folder, set these fields there to the ids "
                               "of the run's tokenizer (or remove them), and pass --hf-config FOLDER",
                               "pass --hf-config with edited copies of the config files if they differ")
        return _fitted_to_the_card(card, files, source)
    kept = f" ({' and '.join(files)} as kept with the checkpoint)" if files else ""
    return files, (f"{CONFIG_NAME} derived from the card{kept}: the checkpoint holds no HF config.json (e.g. saved "
                   "by training); pass --hf-config DIR of the original model to keep its token ids and settings")


_HF_CONFIG_FIX = "give --hf-config the directory of this checkpoint's own HF model"


@dataclass(frozen=True)
class _ConfigSource:
    """How the messages of an export name the config files it writes: ``--hf-config``'s or those stored with the
    checkpoint."""

    where: str
    """The ``config.json``, as a refusal of its fields names it."""
    named: str
    """The config files, as the refusal of their token ids names them."""
    note: str
    """The report line saying where the files come from."""
    fix: str
    """What a refusal of ``config.json``'s fields tells the user to change (:func:`check_hf_config`'s ``fix``)."""
    ids_fix: str
    """What to do about token ids past the export's vocabulary."""
    ids_check: str
    """What to do about token ids of the original tokenizer that the run's does not share."""


def _fitted_to_the_card(card: ModelCard, files: dict[str, str], source: _ConfigSource) -> tuple[dict[str, str], str]:
    """``files`` (``config.json`` among them) as the export writes them, and the report line on them: checked against
    ``card``, a ``config.json`` of another vocabulary (:func:`_resized_vocab_config`) set to the card's and its token
    ids checked against it (:func:`_original_token_ids_note`), a multimodal one reduced to its language model's. One
    function for ``--hf-config`` and the config stored with the checkpoint: the same file was exported from the one
    and refused from the other, with a ``--vocab-size`` the checkpoint then refused in turn."""
    resized = _resized_vocab_config(card, files[CONFIG_NAME], source.where, source.fix)
    if resized is None:
        return _text_model_only(card, files, source.note)
    text, stated = resized
    files, note = _text_model_only(card, {**files, CONFIG_NAME: text},
                                   f"{source.note}; its vocab_size {stated} is set to the export's vocabulary of "
                                   f"{card.vocab_size} (the run trained another), every other field as given")
    return files, note + _original_token_ids_note(files, card.vocab_size, source)


def _resized_vocab_config(card: ModelCard, config_text: str, where: str, fix: str) -> tuple[str, int] | None:
    """Check a ``config.json`` (``config_text``, from ``where``) against ``card``; None when it describes the card as
    it is. One whose only difference is the vocabulary (the original model of a run that trained another, e.g. with
    ``--vocab-size``) is accepted: returned as (its text with ``vocab_size`` set to the card's, the ``vocab_size`` it
    stated). Any other difference is refused naming every contradicted field, ending with ``fix``; without this,
    the refusal's ``--vocab-size`` of the original model and the checkpoint's rows sent the user back and forth."""
    config = parse_json_object(config_text, where)
    text = config.get("text_config", config)  # a multimodal config's language model: what the export describes
    stated = text.get("vocab_size") if isinstance(text, dict) else None
    if isinstance(stated, int) and stated != card.vocab_size:
        text["vocab_size"] = card.vocab_size
        resized = json.dumps(config, indent=2) + "\n"
        try:
            check_hf_config(card, resized, where, fix="")  # only whether it passes: no remedy looked up
        except ConversionError:
            pass  # refused below, naming every field (the vocabulary too) the config contradicts
        else:
            return resized, stated
    check_hf_config(card, config_text, where, fix=fix)
    return None


def _token_ids(files: dict[str, str]) -> dict[str, list[tuple[str, object]]]:
    """File name -> (field, value) of every ``*_token_id`` the config files state, at their top level and in a
    ``text_config``; a value is an id or a list of ids."""
    found: dict[str, list[tuple[str, object]]] = {}
    for name, text in files.items():
        config = parse_json_object(text, name)
        nested = config.get("text_config")
        for part in (config, nested if isinstance(nested, dict) else {}):
            found.setdefault(name, []).extend((key, value) for key, value in part.items()
                                              if key.endswith("_token_id") and value is not None)
    return {name: fields for name, fields in found.items() if fields}


def _ids_past(value: object, vocab_size: int) -> bool:
    """Whether ``value`` (an id or a list of ids) holds an integer id at or past ``vocab_size``."""
    ids = value if isinstance(value, list) else [value]
    return any(isinstance(i, int) and not isinstance(i, bool) and i >= vocab_size for i in ids)


def _original_token_ids_note(files: dict[str, str], vocab_size: int, source: _ConfigSource) -> str:
    """The note's part on the token ids of config files written with another vocabulary (``vocab_size``): they are
    the original tokenizer's, which the run's usually is not. An id past the vocabulary is refused, naming each and
    its file, before anything is written: transformers refuses to load such an export (``Padding_idx must be within
    num_embeddings``), and an eos past it would never end a generation."""
    stated = _token_ids(files)
    past = [f"{name} {key} {value}" for name, fields in stated.items() for key, value in fields
            if _ids_past(value, vocab_size)]
    if past:
        raise ConversionError(
            f"{source.named} states token ids past the export's vocabulary of {vocab_size} (ids 0 to "
            f"{vocab_size - 1}): {'; '.join(past)}. They are the original model's tokenizer's, and the run trained "
            f"another vocabulary; {source.ids_fix}")
    if not stated:
        return ""
    listed = "; ".join(f"{name} {', '.join(f'{key} {value}' for key, value in fields)}"
                       for name, fields in stated.items())
    return (f"; its token ids ({listed}) are the original tokenizer's: a run with another vocabulary usually has "
            f"another tokenizer, so check them against the run's and {source.ids_check}")


def _text_model_only(card: ModelCard, files: dict[str, str], note: str) -> tuple[dict[str, str], str]:
    """``files`` with a multimodal ``config.json`` replaced by its language model's (:func:`text_model_config`),
    and ``note`` saying so."""
    text = text_model_config(card, files[CONFIG_NAME])
    if text is None:
        return files, note
    return ({**files, CONFIG_NAME: text},
            f"{note}; {CONFIG_NAME} is the text model's part of the multimodal config (the export holds the language "
            "model only)")

"""The Hugging Face tokenizer files ``mcore-to-hf --tokenizer DIR`` copies into the export.

An export holding its tokenizer is what ``AutoTokenizer.from_pretrained``, lm-eval and vLLM load as it is. Only the
files a tokenizer is saved as (:data:`TOKENIZER_FILES`, and the named chat templates in :data:`CHAT_TEMPLATE_DIR`)
are copied, byte for byte: a tokenizer folder is often a whole HF model, whose ``config.json`` and weights must not
replace the export's. The folder is checked first: it must hold ``tokenizer_config.json`` and a vocabulary
(:data:`VOCABULARY_FILES`), and the largest token id its ``tokenizer.json`` defines (model vocabulary and added
tokens) must be below the model's vocabulary size (a tokenizer far smaller than it gets a warning), since a tokenizer
of another vocabulary loads and runs without an error and only shows in the evaluation's scores.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from megatron.oellm.convert.errors import ConversionError, ConversionWarning, check_folder_access
from megatron.oellm.convert.output import writing_output

TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_JSON = "tokenizer.json"
VOCABULARY_FILES = (TOKENIZER_JSON, "tokenizer.model", "vocab.json")
"""A tokenizer's vocabulary, one of which a tokenizer folder must hold: the ``tokenizers`` library's serialised
tokenizer, a sentencepiece (or tiktoken) model, or a byte-level BPE vocabulary (with ``merges.txt``)."""
TOKENIZER_FILES = (TOKENIZER_CONFIG, *VOCABULARY_FILES, "merges.txt", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json")
"""The files transformers 5 saves a tokenizer as and reads it from (besides :data:`CHAT_TEMPLATE_DIR`)."""
CHAT_TEMPLATE_DIR = "additional_chat_templates"
"""The folder of a tokenizer's named chat templates, one ``NAME.jinja`` each (the default one is
``chat_template.jinja``)."""
CHAT_TEMPLATE_SUFFIX = ".jinja"


def tokenizer_file_names(directory: Path) -> list[str]:
    """The tokenizer files in ``directory``, as paths relative to it: those of :data:`TOKENIZER_FILES` it holds, then
    the ``.jinja`` files of its :data:`CHAT_TEMPLATE_DIR`."""
    names = [name for name in TOKENIZER_FILES if (directory / name).is_file()]
    templates = directory / CHAT_TEMPLATE_DIR
    if templates.is_dir():
        names += sorted(f"{CHAT_TEMPLATE_DIR}/{path.name}" for path in templates.iterdir()
                        if path.name.endswith(CHAT_TEMPLATE_SUFFIX) and path.is_file())
    return names


def check_tokenizer_dir(directory: Path, vocab_size: int) -> list[str]:
    """The tokenizer files of ``directory`` (:func:`tokenizer_file_names`) after checking that it is a tokenizer
    folder whose token ids fit a model of ``vocab_size`` rows; raise naming the folder and the fix otherwise."""
    where = f"--tokenizer {directory}"
    check_folder_access(directory, where)
    if not directory.exists():
        raise ConversionError(f"{where} does not exist; pass the folder of the Hugging Face tokenizer the checkpoint "
                              "was trained with")
    if not directory.is_dir():
        raise ConversionError(f"{where} is a file; pass the folder holding it ({directory.parent})")
    try:
        names = tokenizer_file_names(directory)
    except OSError as error:
        raise ConversionError(f"cannot read {where}: {error}") from error
    missing = [] if TOKENIZER_CONFIG in names else [TOKENIZER_CONFIG]
    if not any(name in names for name in VOCABULARY_FILES):
        missing.append(" or ".join(VOCABULARY_FILES))
    if missing:
        raise ConversionError(f"{where} is not a Hugging Face tokenizer folder: it has no {' and no '.join(missing)} "
                              "(the files tokenizer.save_pretrained writes)")
    unreadable = [name for name in names if not os.access(directory / name, os.R_OK)]
    if unreadable:
        raise ConversionError(f"{where}: this user may not read {', '.join(unreadable)}; make them readable "
                              "(chmod u+r) or copy the tokenizer elsewhere")
    if TOKENIZER_JSON in names:
        _check_token_ids(directory / TOKENIZER_JSON, vocab_size)
    return names


TOKENIZER_COVERAGE = 0.95
"""The least share of the model's vocabulary rows a tokenizer's ids are expected to cover: models pad their
vocabulary by well under 5 % (Qwen3: 151,669 tokens in 151,936 rows), so a tokenizer far smaller is likely another
vocabulary's (the Qwen tokenizer on a 262,144-row OpenEuroLLM checkpoint covers 58 %)."""


def _check_token_ids(path: Path, vocab_size: int) -> None:
    """Raise unless every token id ``path`` (a ``tokenizer.json``) defines is below ``vocab_size``; warn when its
    ids cover less than :data:`TOKENIZER_COVERAGE` of the rows (a smaller vocabulary loads and runs, and shows only in
    the scores; but it cannot be told for sure from a far padded vocabulary, so it is not refused)."""
    largest = largest_token_id(path)
    if largest + 1 < TOKENIZER_COVERAGE * vocab_size:
        warnings.warn(f"--tokenizer {path.parent}: {TOKENIZER_JSON} defines ids 0 to {largest}, "
                      f"{100 * (largest + 1) / vocab_size:.0f} % of the model's {vocab_size} vocabulary rows: check "
                      "that it is the tokenizer the checkpoint was trained with (another vocabulary's evaluates "
                      "without an error)", ConversionWarning, stacklevel=2)
    if largest >= vocab_size:
        raise ConversionError(f"--tokenizer {path.parent}: {TOKENIZER_JSON} defines token id {largest}, but the model's "
                              f"vocabulary has {vocab_size} rows (ids 0 to {vocab_size - 1}): it is another model's "
                              "tokenizer; pass the one the checkpoint was trained with (or --vocab-size N for a run "
                              "trained with --vocab-size N)")


def largest_token_id(path: Path) -> int:
    """The largest token id the ``tokenizer.json`` at ``path`` defines, in its model's vocabulary (a token -> id map
    for BPE / WordPiece / WordLevel, a list of ``[piece, score]`` for Unigram, whose ids are the positions) or among
    its added tokens."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise ConversionError(f"cannot read the tokenizer file {path}: {error}") from error
    ids = _token_ids(data)
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ConversionError(f"{path} is not a tokenizer.json of the tokenizers library (no model vocabulary or "
                              "added tokens with non-negative integer ids)")
    return max(ids)


def _token_ids(data: object) -> list[object]:
    """The token ids a parsed ``tokenizer.json`` defines, unchecked: its model vocabulary's, then its added tokens'
    (an entry that is not a token object counts as the id None)."""
    if not isinstance(data, dict):
        return []
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids: list[object] = (list(vocab.values()) if isinstance(vocab, dict)
                         else list(range(len(vocab))) if isinstance(vocab, list) else [])
    added = data.get("added_tokens")
    if isinstance(added, list):
        ids += [token.get("id") if isinstance(token, dict) else None for token in added]
    return ids


def copy_tokenizer_files(directory: Path, names: list[str], destination: Path) -> None:
    """Copy the files ``names`` (relative paths) of ``directory`` into ``destination`` byte for byte (a symlink, as
    in a Hugging Face cache snapshot, is copied as the file it points to). Each file is read whole (a tokenizer's
    files are megabytes), then written within :func:`writing_output`, so that a refused write is reported as one of
    the output, naming the file: ``shutil.copyfile`` named a failure of its ``sendfile`` by the tokenizer's file and
    one of a ``write`` or ``close`` (a stale NFS handle) by none, which ended the conversion in a traceback."""
    for name in names:
        data = _tokenizer_bytes(directory, name)
        target = destination / name
        with writing_output(target):
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(data)


def _tokenizer_bytes(directory: Path, name: str) -> bytes:
    """The bytes of the tokenizer file ``name`` of ``directory``; a read the system refuses (the folder was checked
    before the conversion, but a network file system may fail since) is a :class:`ConversionError` naming it."""
    try:
        return (directory / name).read_bytes()
    except OSError as error:
        raise ConversionError(f"cannot read the tokenizer file {directory / name} of --tokenizer: {error}; the "
                              "partial output was removed, --out is as it was: check the tokenizer folder or pass a "
                              "copy of it") from error


def foreign_in_tokenizer_entry(entry: Path) -> list[str]:
    """What the ``--out`` entry ``entry`` holds that is not a tokenizer file (see :data:`output.Foreign`): nothing
    for a file of :data:`TOKENIZER_FILES`; for a :data:`CHAT_TEMPLATE_DIR` folder, what in it is not a ``.jinja``
    file (``--overwrite`` replaces the folder); else the entry itself."""
    if entry.name in TOKENIZER_FILES and entry.is_file():
        return []
    if entry.name == CHAT_TEMPLATE_DIR and entry.is_dir() and not entry.is_symlink():
        return [f"{CHAT_TEMPLATE_DIR}/{path.name}" for path in sorted(entry.iterdir())
                if not (path.name.endswith(CHAT_TEMPLATE_SUFFIX) and path.is_file())]
    return [entry.name]

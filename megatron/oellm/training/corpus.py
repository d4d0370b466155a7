"""A small real-text corpus built offline into megatron's indexed format (``.bin``/``.idx``), one document per file.

The text is what every Python installation carries (the standard library's own sources under ``sys.prefix``),
optionally plus files the caller names, so a corpus can be built on a machine without internet. Files are read in
sorted order and tokenized with :class:`ByteTokenizer`; each document ends with the end-of-document token, and the
index records document boundaries, so megatron's ``GPTDataset`` sees real documents. The result is deterministic
for a given set of input files.
"""

from __future__ import annotations

import json
import os
import sysconfig
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy

from megatron.oellm.signal_handlers import held
from megatron.oellm.training.index_cache import INDEX_CACHE_FILES, default_index_cache
from megatron.oellm.training.tokenizer import BYTE_TOKENIZER_FLAGS, ByteTokenizer


@dataclass(frozen=True)
class CorpusSummary:
    """What :func:`build_corpus` wrote; also saved as ``<prefix>.json`` beside the ``.bin``/``.idx`` files."""

    prefix: str
    """Path prefix of the indexed dataset (pass it to ``--data-path``)."""
    documents: int
    """Number of documents (input files that were not empty)."""
    tokens: int
    """Tokens written, end-of-document tokens included."""
    tokenizer: str
    """Tokenizer of the token ids."""
    megatron_flags: list[str]
    """Tokenizer flags to train on this corpus with."""


def stdlib_sources(limit_bytes: int) -> list[Path]:
    """The standard library's ``.py`` files under this interpreter's prefix, sorted, up to ``limit_bytes`` in all.

    Installed packages (``site-packages``) and test suites (``test``, ``tests``) are left out; only the directories
    below the standard library's root count, so an installation under, say, ``/home/me/tests/`` still has sources.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    chosen, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if {"site-packages", "test", "tests"} & set(path.relative_to(root).parts):
            continue
        size = path.stat().st_size
        if total + size > limit_bytes:
            break
        chosen.append(path)
        total += size
    return chosen


def build_corpus(files: Iterable[Path], prefix: str | Path) -> CorpusSummary:
    """Tokenize each file of ``files`` as one document into ``<prefix>.bin``/``.idx`` and write ``<prefix>.json``.

    Files are taken in the given order; empty files (and files that are not UTF-8) are skipped. The files are
    written under a temporary name and renamed once complete, so a build that stops part-way with an exception (an
    unreadable file, Ctrl-C, a signal the caller's handler turns into one) leaves any previous corpus at ``prefix``
    whole instead of a new partial ``.bin`` beside an old ``.idx``; so does a build without a document
    (``ValueError``): training on an empty corpus fails only after the job starts. SIGTERM, SIGHUP and SIGINT are
    held while the three files are renamed (:func:`~megatron.oellm.signal_handlers.held`), so none leaves a new
    ``.bin`` beside the earlier ``.idx``.
    Before the new files are put in place, megatron-core's index caches in their default directory
    (:func:`~megatron.oellm.training.index_cache.default_index_cache`) are deleted (:func:`_drop_index_caches`).
    """
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    partial = prefix.parent / f".{prefix.name}.partial-{os.getpid()}"
    try:
        documents, tokens = _write_indexed(files, partial)
        if documents == 0:
            raise ValueError(f"no document for the corpus at {prefix}: every input file is empty or not UTF-8 text "
                             "(an earlier corpus there is left as it was)")
        summary = CorpusSummary(prefix=str(prefix), documents=documents, tokens=tokens, tokenizer="oellm-byte",
                                megatron_flags=BYTE_TOKENIZER_FLAGS)
        Path(f"{partial}.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
        _drop_index_caches(prefix)
        with held():
            for suffix in CORPUS_SUFFIXES:
                os.replace(f"{partial}{suffix}", f"{prefix}{suffix}")
    finally:
        for suffix in CORPUS_SUFFIXES:
            Path(f"{partial}{suffix}").unlink(missing_ok=True)
    return summary


def _drop_index_caches(prefix: Path) -> None:
    """Delete the GPTDataset index caches megatron-core keeps for dataset ``prefix`` when no ``--data-cache-path`` is
    given. Their key is the prefix and the run's settings, not the corpus's contents: after a rebuild megatron-core
    would take an earlier corpus's document and sample indices for the new one (an ``IndexError`` mid-run on a corpus
    with fewer documents, else samples cut at the old documents' lengths). Caches under a ``--data-cache-path`` are
    not found here; the training entry warns about them
    (:func:`~megatron.oellm.training.index_cache.stale_cache_warnings`)."""
    cache = default_index_cache(str(prefix))
    try:
        names = os.listdir(cache)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if "-GPTDataset-" in name and name.endswith(INDEX_CACHE_FILES):
            (cache / name).unlink(missing_ok=True)


CORPUS_SUFFIXES = (".bin", ".idx", ".json")
"""Files of one corpus, in the order they are put in place (the summary last: it says the build completed)."""


def _write_indexed(files: Iterable[Path], prefix: Path) -> tuple[int, int]:
    """Write the documents of ``files`` (see :func:`build_corpus`) to ``<prefix>.bin``/``.idx``; (documents, tokens)."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    tokenizer = ByteTokenizer()
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=numpy.uint16)
    documents = tokens = 0
    try:
        for path in files:
            try:
                text = Path(path).read_bytes().decode("utf-8")  # read_text would turn "\r\n" and "\r" into "\n"
            except UnicodeDecodeError:
                continue
            if not text:
                continue
            ids = tokenizer.encode(text) + [tokenizer.eod]
            builder.add_item(torch.tensor(ids, dtype=torch.int64))
            builder.end_document()
            documents += 1
            tokens += len(ids)
    finally:
        builder.finalize(f"{prefix}.idx")  # also closes the .bin file, on failure too
    return documents, tokens

"""Audit 10 of :mod:`megatron.oellm.training.corpus`: what a build reports is where the corpus is (the prefix
``tools/build_corpus.py`` prints for ``--data-path``, in the returned summary and in ``<prefix>.json``), with the
tokenizer it was built with."""

from __future__ import annotations

import json
import random
from pathlib import Path

from megatron.oellm.training.corpus import build_corpus
from megatron.oellm.training.tokenizer import BYTE_TOKENIZER_FLAGS


def test_the_summary_names_the_prefix_the_corpus_is_read_from(tmp_path: Path) -> None:
    """The summary's prefix (printed as ``--data-path``) is the requested one, not the temporary name the files
    were written under, in the returned summary and in the ``.json`` beside the files; megatron reads the documents
    there, and nothing else is left in the directory."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    rng = random.Random(random.random())
    files = []
    for number in range(rng.randrange(2, 6)):
        files.append(tmp_path / "docs" / f"doc{number}.txt")
        files[-1].parent.mkdir(exist_ok=True)
        files[-1].write_text("".join(rng.choice("abc é\n") for _ in range(rng.randrange(1, 100))), encoding="utf-8")
    prefix = tmp_path / "corpus" / f"text{rng.randrange(10**6)}"
    summary = build_corpus(files, prefix)
    written = json.loads(Path(f"{prefix}.json").read_text())
    assert summary.prefix == written["prefix"] == str(prefix)
    assert len(IndexedDataset(summary.prefix)) == summary.documents == written["documents"] == len(files)
    assert written["tokenizer"] == "oellm-byte" and written["megatron_flags"] == list(BYTE_TOKENIZER_FLAGS)
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"{prefix.name}{suffix}"
                                                                      for suffix in (".bin", ".idx", ".json")]


def test_a_file_named_like_the_prefix_does_not_stop_the_build(tmp_path: Path) -> None:
    """megatron-core keeps index caches under a directory named like the prefix; where a file of that name sits
    beside the corpus (the source text ``corpus`` of ``corpus.bin``, say) there is no cache to drop, and the build
    goes on, leaving that file as it was."""
    rng = random.Random(random.random())
    prefix = tmp_path / f"text{rng.randrange(10**6)}"
    content = "".join(rng.choice("xyz é\n") for _ in range(rng.randrange(5, 200)))
    prefix.write_text(content, encoding="utf-8")
    summary = build_corpus([prefix], prefix)
    assert summary.documents == 1 and prefix.read_text(encoding="utf-8") == content

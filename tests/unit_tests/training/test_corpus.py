"""The offline corpus builder: documents read back intact through megatron's IndexedDataset, and a build never leaves
a ``.bin``/``.idx`` pair that megatron's reader would trust but that does not hold the documents of one complete
build."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from megatron.oellm.training.corpus import build_corpus, stdlib_sources
from megatron.oellm.training.tokenizer import ByteTokenizer


def test_documents_read_back_intact_with_boundaries(tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    rng = random.Random(random.random())
    texts = ["".join(rng.choice("abc é中\n") for _ in range(rng.randrange(1, 300))) for _ in range(7)]
    files = []
    for i, text in enumerate(texts):
        path = tmp_path / f"doc{i}.txt"
        path.write_text(text, encoding="utf-8")
        files.append(path)
    (tmp_path / "empty.txt").write_text("")
    summary = build_corpus([*files, tmp_path / "empty.txt"], tmp_path / "out" / "corpus")

    dataset = IndexedDataset(str(tmp_path / "out" / "corpus"))
    assert summary.documents == len(texts) == len(dataset)
    assert list(dataset.document_indices) == list(range(len(texts) + 1))
    tokenizer = ByteTokenizer()
    for i, text in enumerate(texts):
        ids = dataset[i].tolist()
        assert ids[-1] == tokenizer.eod and tokenizer.eod not in ids[:-1]
        assert bytes(ids[:-1]).decode("utf-8") == text
    assert summary.tokens == sum(len(t.encode("utf-8")) + 1 for t in texts)
    written = json.loads((tmp_path / "out" / "corpus.json").read_text())
    assert written["documents"] == len(texts) and "--tokenizer-type" in written["megatron_flags"]


def test_line_endings_reach_the_corpus_byte_for_byte(tmp_path):
    """A document's CR LF and lone CR line endings are its bytes: reading it as text with newline translation (what
    ``Path.read_text`` does) would train on LF where the file has CR LF or CR."""
    rng = random.Random(random.random())
    texts = ["".join(rng.choice(["a", "é", " ", "\r\n", "\r", "\n", "中"]) for _ in range(rng.randrange(20, 200)))
             + "\r\n" for _ in range(rng.randrange(2, 6))]
    files = []
    for number, text in enumerate(texts):
        files.append(tmp_path / f"doc{number}.txt")
        files[-1].write_bytes(text.encode("utf-8"))
    summary = build_corpus(files, tmp_path / "corpus")
    assert _read_back(tmp_path / "corpus") == texts
    assert summary.tokens == sum(len(text.encode("utf-8")) + 1 for text in texts)  # each document's bytes + EOD


def test_stdlib_sources_are_sorted_deterministic_and_bounded():
    first, second = stdlib_sources(300_000), stdlib_sources(300_000)
    assert first == second == sorted(first) and first
    assert sum(p.stat().st_size for p in first) <= 300_000


def test_stdlib_sources_of_an_installation_inside_a_tests_directory(tmp_path, monkeypatch):
    """Only directories below the standard library's root are skipped: under /.../tests/ every file was."""
    from megatron.oellm.training import corpus

    root = tmp_path / "tests" / "lib" / "python3"
    for name in ("json/decoder.py", "os.py", "test/test_os.py", "site-packages/pkg/mod.py", "unittest/tests/t.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x = 1\n")
    paths = {"stdlib": str(root)}
    monkeypatch.setattr(corpus.sysconfig, "get_paths", lambda: paths)
    assert stdlib_sources(10_000) == [root / "json" / "decoder.py", root / "os.py"]


def _documents(directory: Path, count: int, rng: random.Random) -> tuple[list[Path], list[str]]:
    """``count`` random text files under ``directory``; their paths and texts."""
    directory.mkdir(parents=True, exist_ok=True)
    texts = ["".join(rng.choice("xyz é\n中") for _ in range(rng.randrange(1, 400))) for _ in range(count)]
    paths = []
    for number, text in enumerate(texts):
        path = directory / f"doc{number}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths, texts


def _read_back(prefix: Path) -> list[str]:
    """The documents of the corpus at ``prefix`` as megatron-core's ``IndexedDataset`` reads them, EOD dropped."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(prefix))
    return [bytes(dataset[number].tolist()[:-1]).decode("utf-8") for number in range(len(dataset))]


def test_an_interrupted_rebuild_leaves_the_previous_corpus_intact(tmp_path: Path) -> None:
    """The builder wrote ``<prefix>.bin`` in place: a rebuild stopped part-way (an unreadable file, Ctrl-C) left the
    new, partial ``.bin`` beside the previous build's ``.idx``, and megatron read documents that were neither."""
    rng = random.Random(random.random())
    old_files, old_texts = _documents(tmp_path / "old", rng.randrange(3, 9), rng)
    prefix = tmp_path / "corpus" / "text"
    build_corpus(old_files, prefix)
    new_files, _ = _documents(tmp_path / "new", rng.randrange(2, 6), rng)
    broken = tmp_path / "a-directory"
    broken.mkdir()
    with pytest.raises(OSError):
        build_corpus([*new_files, broken], prefix)
    assert _read_back(prefix) == old_texts
    assert sorted(path.name for path in prefix.parent.iterdir()) == ["text.bin", "text.idx", "text.json"]


def test_a_first_build_that_fails_leaves_no_corpus(tmp_path: Path) -> None:
    rng = random.Random(random.random())
    files, _ = _documents(tmp_path / "docs", rng.randrange(1, 5), rng)
    broken = tmp_path / "a-directory"
    broken.mkdir()
    prefix = tmp_path / "corpus" / "text"
    with pytest.raises(OSError):
        build_corpus([*files, broken], prefix)
    assert list(prefix.parent.iterdir()) == []


def test_a_rebuild_replaces_the_corpus(tmp_path: Path) -> None:
    rng = random.Random(random.random())
    prefix = tmp_path / "corpus" / "text"
    build_corpus(_documents(tmp_path / "old", rng.randrange(3, 9), rng)[0], prefix)
    new_files, new_texts = _documents(tmp_path / "new", rng.randrange(1, 6), rng)
    summary = build_corpus(new_files, prefix)
    assert _read_back(prefix) == new_texts and summary.documents == len(new_texts)


def test_a_build_without_a_document_leaves_the_earlier_corpus(tmp_path):
    """The library call put an empty corpus in place of the one at the prefix when no input had text."""
    rng = random.Random(random.random())
    prefix = tmp_path / "corpus" / "text"
    build_corpus(_documents(tmp_path / "old", rng.randrange(3, 9), rng)[0], prefix)
    before = {suffix: Path(f"{prefix}{suffix}").read_bytes() for suffix in (".bin", ".idx", ".json")}
    empty, binary = tmp_path / "empty.txt", tmp_path / "binary.txt"
    empty.write_text("")
    binary.write_bytes(bytes([0xff, 0xfe, rng.randrange(0x80, 0xc0)]))
    with pytest.raises(ValueError, match="no document for the corpus"):
        build_corpus([empty, binary], prefix)
    assert {suffix: Path(f"{prefix}{suffix}").read_bytes() for suffix in before} == before
    assert sorted(p.name for p in prefix.parent.iterdir()) == ["text.bin", "text.idx", "text.json"]


def test_a_rebuild_makes_megatron_read_the_new_corpus_through_fresh_indices(tmp_path: Path) -> None:
    """megatron-core reuses a GPTDataset index cache in the dataset's default cache directory by a key that ignores
    the corpus's contents: after a rebuild at the same prefix it must read the same samples as with an empty cache
    directory (its indices built for the new documents), not the old corpus's document and sample indices."""
    from tests.unit_tests.gpt_dataset_samples import gpt_train_samples

    rng = random.Random(random.random())
    prefix = tmp_path / "corpus" / "text"
    build_corpus(_documents(tmp_path / "old", rng.randrange(30, 50), rng)[0], prefix)
    samples, sequence = rng.randrange(10, 20), 16
    gpt_train_samples(prefix, samples, sequence)  # megatron-core writes its index cache beside the corpus
    build_corpus(_documents(tmp_path / "new", rng.randrange(30, 50), rng)[0], prefix)
    fresh = gpt_train_samples(prefix, samples, sequence, str(tmp_path / "fresh-cache"))
    assert gpt_train_samples(prefix, samples, sequence) == fresh

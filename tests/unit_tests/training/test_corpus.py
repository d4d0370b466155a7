"""The offline corpus builder: documents read back intact through megatron's IndexedDataset."""

import json
import random

from megatron.oellm.training.corpus import build_corpus, stdlib_sources
from megatron.oellm.training.tokenizer import ByteTokenizer


def test_documents_read_back_intact_with_boundaries(tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    rng = random.Random()
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

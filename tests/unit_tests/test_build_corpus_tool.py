"""``tools/build_corpus.py``: input that would give an empty or no corpus is refused with a message naming the flag
(a non-finite ``--max-mb`` too, instead of a traceback), before a training job would find out, and a corpus already at
the prefix is left as it was (a build without documents used to replace it with an empty one); a valid call still
writes the corpus."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit_tests.build_corpus_helpers import SUFFIXES, run_tool
from tests.unit_tests.gpt_dataset_samples import gpt_train_samples


def test_a_missing_extra_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / f"missing-{random.randint(0, 10**6)}.txt"
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0.01", "--extra", str(missing))
    assert done.returncode == 2 and "--extra" in done.stderr and str(missing) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("max_mb", ["0", "-1"])
def test_no_source_at_all_is_refused(tmp_path: Path, max_mb: str) -> None:
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", max_mb)
    assert done.returncode == 2 and "--max-mb" in done.stderr, done.stderr
    assert not (tmp_path / "corpus").exists()


def test_extra_files_without_text_give_an_error_not_an_empty_corpus(tmp_path: Path) -> None:
    empty, binary = tmp_path / "empty.txt", tmp_path / "binary.dat"
    empty.write_text("")
    binary.write_bytes(b"\xff\xfe" + random.randbytes(64))
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0", "--extra", str(empty), str(binary))
    assert done.returncode == 1 and "no document" in done.stderr, done.stdout + done.stderr


def test_an_extra_text_file_is_one_document(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    words = " ".join(random.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(random.randint(50, 200)))
    text.write_text(words)
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0", "--extra", str(text))
    assert done.returncode == 0, done.stderr
    assert f"1 documents, {len(words.encode()) + 1} tokens" in done.stdout
    # the entry's flags, and the recipe form (a recipe has --tokenizer-model, not --tokenizer-type / --vocab-size)
    prefix = tmp_path / "corpus" / "text"
    assert f"train with: --data-path {prefix} --tokenizer-type" in done.stdout
    assert done.stdout.splitlines()[-1] == (f"or a recipe: bash examples/oellm/<recipe>.sh --local --data-path {prefix} "
                                            "--tokenizer-model byte")


def test_a_build_without_documents_keeps_the_earlier_corpus(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    text.write_text(" ".join(random.choice(["alpha", "beta", "gamma"]) for _ in range(random.randint(20, 200))))
    prefix = tmp_path / "corpus" / "text"
    built = run_tool(prefix, "--max-mb", "0", "--extra", str(text))
    assert built.returncode == 0, built.stderr
    earlier = {suffix: Path(f"{prefix}{suffix}").read_bytes() for suffix in SUFFIXES}
    empty, binary = tmp_path / "empty.txt", tmp_path / "binary.dat"
    empty.write_text("")
    binary.write_bytes(b"\xff\xfe" + random.randbytes(random.randint(16, 256)))
    failed = run_tool(prefix, "--max-mb", "0", "--overwrite", "--extra", str(empty), str(binary))
    assert failed.returncode == 1 and "no document" in failed.stderr, failed.stdout + failed.stderr
    assert {suffix: Path(f"{prefix}{suffix}").read_bytes() for suffix in SUFFIXES} == earlier
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"text{suffix}" for suffix in SUFFIXES]


def test_a_build_without_documents_writes_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", "0", "--extra", str(empty))
    assert done.returncode == 1 and "no document" in done.stderr, done.stderr
    assert not (tmp_path / "corpus").exists()


@pytest.mark.parametrize("max_mb", ["nan", "inf", "-inf"])
def test_a_non_finite_max_mb_is_refused(tmp_path: Path, max_mb: str) -> None:
    done = run_tool(tmp_path / "corpus" / "text", "--max-mb", max_mb)
    assert done.returncode == 2 and "--max-mb" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "corpus").exists()


def random_documents(directory: Path, count: int, rng: random.Random) -> list[Path]:
    """``count`` files of random text under ``directory``: non-ASCII, blank lines, CRLF and lone CR line ends."""
    directory.mkdir(parents=True, exist_ok=True)
    pieces = ["a", "z", " ", "\t", "\n", "\n\n", "\r\n", "\r", "é", "中", "🙂", "\u2028", "\ufeff"]
    paths = []
    for number in range(count):
        path = directory / f"doc{number:03d}.txt"
        chosen = [rng.choice(pieces) for _ in range(rng.randint(1, 400))]
        chosen.insert(rng.randint(0, len(chosen)), rng.choice(["\r", "\r\n"]))
        path.write_bytes("".join(chosen).encode("utf-8"))
        paths.append(path)
    return paths


def test_the_corpus_holds_each_files_bytes_as_megatron_reads_it(tmp_path: Path) -> None:
    """Files were read in text mode, which turns "\r\n" and "\r" into "\n": the corpus did not hold the files' bytes
    (and the token count was not their size). megatron-core's IndexedDataset now reads back each file's exact bytes
    and one end-of-document token, empty files skipped."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    rng = random.Random(random.random())
    files = random_documents(tmp_path / "docs", rng.randint(2, 8), rng)
    (tmp_path / "docs" / "empty.txt").write_bytes(b"")
    prefix = tmp_path / "corpus" / "text"
    done = run_tool(prefix, "--max-mb", "0", "--extra", *map(str, files), str(tmp_path / "docs" / "empty.txt"))
    assert done.returncode == 0, done.stderr
    dataset = IndexedDataset(str(prefix))
    assert [dataset[number].tolist() for number in range(len(dataset))] == [[*path.read_bytes(), 256] for path in files]
    tokens = sum(path.stat().st_size + 1 for path in files)
    assert f"{len(files)} documents, {tokens} tokens" in done.stdout


@pytest.mark.parametrize("existing", [".bin", ".idx", ".json"])
def test_files_at_the_prefix_are_replaced_only_with_overwrite(tmp_path: Path, existing: str) -> None:
    """A second build at a prefix silently replaced the corpus there (or a file of the user's named like one)."""
    rng = random.Random(random.random())
    prefix = tmp_path / "corpus" / "text"
    prefix.parent.mkdir()
    content = random.randbytes(rng.randint(1, 256))
    Path(f"{prefix}{existing}").write_bytes(content)
    [text] = random_documents(tmp_path / "docs", 1, rng)
    refused = run_tool(prefix, "--max-mb", "0", "--extra", str(text))
    assert refused.returncode == 2 and "--overwrite" in refused.stderr, refused.stdout + refused.stderr
    assert f"{prefix}{existing}" in refused.stderr and "Traceback" not in refused.stderr
    assert Path(f"{prefix}{existing}").read_bytes() == content
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"text{existing}"]
    replaced = run_tool(prefix, "--max-mb", "0", "--extra", str(text), "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"text{suffix}" for suffix in SUFFIXES]


def test_a_rebuild_drops_megatrons_index_cache_of_the_earlier_corpus(tmp_path: Path) -> None:
    """megatron-core keys its index cache (PREFIX/cache/GPTDataset_indices) on the prefix and the run's settings, not
    on the corpus: after a rebuild a run took the earlier corpus's document and sample indices, an IndexError on a
    corpus with fewer documents. A run on the rebuilt corpus now reads the samples a first run on it would."""
    rng = random.Random(random.random())
    prefix = tmp_path / "corpus" / "text"
    old = random_documents(tmp_path / "old", rng.randint(30, 60), rng)
    assert run_tool(prefix, "--max-mb", "0", "--extra", *map(str, old)).returncode == 0
    samples = rng.randint(8, 24)
    gpt_train_samples(prefix, samples, 32)
    assert any((prefix / "cache" / "GPTDataset_indices").iterdir())
    new = random_documents(tmp_path / "new", rng.randint(2, 6), rng)
    rebuilt = run_tool(prefix, "--max-mb", "0", "--overwrite", "--extra", *map(str, new))
    assert rebuilt.returncode == 0, rebuilt.stderr
    after_rebuild = gpt_train_samples(prefix, samples, 32)
    fresh = tmp_path / "fresh" / "text"
    assert run_tool(fresh, "--max-mb", "0", "--extra", *map(str, new)).returncode == 0
    assert after_rebuild == gpt_train_samples(fresh, samples, 32)


def test_an_output_that_cannot_be_written_is_one_error_line(tmp_path: Path) -> None:
    """An --output-prefix below a file (or an unwritable place) was a FileExistsError/PermissionError traceback."""
    blocker = tmp_path / f"a-file-{random.randint(0, 10**6)}"
    blocker.write_bytes(random.randbytes(16))
    [text] = random_documents(tmp_path / "docs", 1, random.Random(random.random()))
    done = run_tool(blocker / "corpus" / "text", "--max-mb", "0", "--extra", str(text))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"error: no corpus written at {blocker}" in done.stderr and "Not a directory" in done.stderr

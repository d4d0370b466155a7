"""Build a small real-text training corpus offline: ``python tools/build_corpus.py --output-prefix runs/corpus/text``.

Reads the Python standard library's sources (and any ``--extra`` files), one document per file, byte-tokenized,
into megatron's indexed format; prints the ``--data-path`` and tokenizer flags to train on it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from megatron.oellm.training.corpus import build_corpus, stdlib_sources


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, build the corpus, print where it is and how to train on it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-prefix", required=True, help="path prefix of the .bin/.idx/.json files")
    parser.add_argument("--max-mb", type=float, default=16.0, help="standard-library text to take, in MB")
    parser.add_argument("--extra", nargs="*", default=[], type=Path, help="more text files, one document each")
    args = parser.parse_args(argv)
    files = stdlib_sources(int(args.max_mb * 1e6)) + sorted(args.extra)
    summary = build_corpus(files, args.output_prefix)
    print(f"{summary.documents} documents, {summary.tokens} tokens -> {summary.prefix}.bin/.idx")
    print("train with: --data-path", summary.prefix, " ".join(summary.megatron_flags))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

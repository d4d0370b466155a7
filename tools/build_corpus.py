"""Build a small real-text training corpus offline: ``python tools/build_corpus.py --output-prefix runs/corpus/text``.

Reads the Python standard library's sources (and any ``--extra`` files), one document per file, byte-tokenized,
into megatron's indexed format; prints the ``--data-path`` and tokenizer flags to train on it (the training entry's
and a recipe's). SIGTERM, SIGHUP or SIGINT (Ctrl-C) stops it with one ``error: interrupted by SIG...`` line and status
128 + the signal: during the build its partial files are removed and a corpus already at the prefix is left as it
was; a signal while the finished files are renamed into place takes effect once they are (the line then says the new
corpus is in place).
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from megatron.oellm.signal_handlers import StopSignal, raising_on_stop
from megatron.oellm.training.corpus import CORPUS_SUFFIXES, build_corpus, stdlib_sources


def has_text(path: Path) -> bool:
    """Whether ``path`` would be a document of the corpus: non-empty UTF-8 text (``build_corpus`` skips the rest)."""
    try:
        return bool(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return False


def _inodes(prefix: str) -> list[int | None]:
    """The inode of each corpus file at ``prefix`` (None where there is none): a build puts its files in place by
    renaming, which changes them, so they tell whether an interrupted build had finished."""
    inodes: list[int | None] = []
    for suffix in CORPUS_SUFFIXES:
        try:
            inodes.append(os.stat(f"{prefix}{suffix}").st_ino)
        except OSError:
            inodes.append(None)
    return inodes


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, build the corpus, print where it is and how to train on it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-prefix", required=True, help="path prefix of the .bin/.idx/.json files")
    parser.add_argument("--max-mb", type=float, default=16.0, help="standard-library text to take, in MB")
    parser.add_argument("--extra", nargs="*", default=[], type=Path, help="more text files, one document each")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the .bin/.idx/.json files already at the prefix (refused without it)")
    args = parser.parse_args(argv)
    if os.path.basename(args.output_prefix) in ("", ".", ".."):
        # '' wrote hidden ..bin/..idx files here; 'dir/' and 'dir/.' wrote dir.bin beside the folder, not in it
        parser.error(f"--output-prefix {args.output_prefix!r} names no file prefix; give a folder and a name, e.g. "
                     f"{os.path.join(args.output_prefix or 'corpus', 'text')}")
    if not math.isfinite(args.max_mb * 1e6) or args.max_mb < 0:  # 1e303 MB is finite, its bytes are not
        parser.error(f"--max-mb must be a number >= 0 whose byte count (x 1e6) is finite, got {args.max_mb}")
    folders = [str(path) for path in args.extra if path.is_dir()]
    if folders:
        parser.error(f"--extra: a folder, not a text file: {', '.join(folders)}; name the files in it")
    missing = [str(path) for path in args.extra if not path.is_file()]
    if missing:
        parser.error(f"--extra: no such file: {', '.join(missing)}")
    existing = [path for path in (f"{Path(args.output_prefix)}{suffix}" for suffix in CORPUS_SUFFIXES)
                if os.path.lexists(path)]
    taken = [path for path in existing if os.path.isdir(path) and not os.path.islink(path)]
    if taken:  # the build would fail only when renaming its finished files onto them
        parser.error(f"--output-prefix {args.output_prefix}: {', '.join(taken)} is a folder, which --overwrite does "
                     "not replace; remove it or choose another prefix")
    if existing and not args.overwrite:  # a corpus built from other files, or files of the user's own
        parser.error(f"--output-prefix {args.output_prefix}: would replace {', '.join(existing)}; pass --overwrite "
                     "to replace them, or choose another prefix")
    files = stdlib_sources(int(args.max_mb * 1e6)) + sorted(args.extra)
    if not files:
        parser.error(f"--max-mb {args.max_mb} takes no standard-library file and no --extra file was given: "
                     "raise --max-mb or name text files with --extra")
    # checked before the build: build_corpus would put an empty corpus in place of one already at the prefix, and
    # training on it would fail only after the job has started
    before = _inodes(args.output_prefix)
    try:
        with raising_on_stop():  # build_corpus removes its partial files on the way out
            if not any(map(has_text, files)):
                parser.exit(1, f"error: none of the {len(files)} files has UTF-8 text, so the corpus would hold no "
                               f"document ({args.output_prefix} is left as it was); raise --max-mb or name other "
                               "--extra files\n")
            summary = build_corpus(files, args.output_prefix)
    except OSError as error:  # an unreadable input, an output directory that cannot be made or written
        parser.exit(1, f"error: no corpus written at {args.output_prefix}: {error}\n")
    except StopSignal as stop:
        after = _inodes(args.output_prefix)
        if after != before and all(after):
            # the signal was held while the finished files were renamed into place, and taken after
            parser.exit(128 + stop.signum, f"error: interrupted by {stop} once the new corpus was complete at "
                                           f"{args.output_prefix}: it is in place, but its summary was not printed\n")
        parser.exit(128 + stop.signum, f"error: interrupted by {stop}; no partial corpus is left at "
                                       f"{args.output_prefix}, and a corpus already there is as it was\n")
    print(f"{summary.documents} documents, {summary.tokens} tokens -> {summary.prefix}.bin/.idx")
    print("train with: --data-path", summary.prefix, " ".join(summary.megatron_flags))
    print(f"or a recipe: bash examples/oellm/<recipe>.sh --local --data-path {summary.prefix} --tokenizer-model byte")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

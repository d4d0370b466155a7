"""An exception as the one line a refusal prints: several tools quote a library's error (an import that failed), and
some libraries' messages run over many lines (numpy's ImportError names its cause on the last of a dozen)."""

from __future__ import annotations


def one_line(text: object) -> str:
    """``text`` (a message, or an exception quoting a library's) as one line, its words all kept: each line break
    with the white space around it becomes one space, and blank lines go. A refusal is one ``error:`` line, but a
    library's message may run over several (transformers' for a tokenizer folder it cannot load); spacing within a
    line is kept, so a quoted path with two spaces in a row stays the path it names."""
    return " ".join(stripped for line in str(text).splitlines() if (stripped := line.strip()))


def message_or_type(error: BaseException) -> str:
    """``error``'s message with its white space runs as single spaces, or ``<Type> without a message`` where it has
    none: the detail a refusal quotes of a library's ``assert`` or ``ValueError``, many of which carry no message."""
    return " ".join(str(error).split()) or f"{type(error).__name__} without a message"


def one_line_error(error: BaseException) -> str:
    """``error`` as one line: the module that failed to import where the error names it (``ImportError.name``), its
    type and the last non-empty line of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    module = error.name if isinstance(error, ImportError) else None
    cause = type(error).__name__ + (f": {lines[-1]}" if lines else "")
    return (f"importing {module} raised " if module else "") + cause

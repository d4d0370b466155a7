"""File-system questions several start-up checks ask before anything is written. Pure Python."""

from __future__ import annotations

from pathlib import Path


def nearest_existing(path: Path) -> Path:
    """``path`` itself where it exists, else its nearest existing ancestor: what ``mkdir -p`` or ``open`` meets first
    when it creates ``path``, so whether that is a folder and writable decides whether ``path`` can be made. A
    relative ``path`` ends at the current folder at worst, an absolute one at ``/``."""
    return next(candidate for candidate in (path, *path.parents) if candidate.exists())

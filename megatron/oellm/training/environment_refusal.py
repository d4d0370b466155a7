"""The refusal of a start-up check decided by environment variables, not by the command line."""

from __future__ import annotations


class EnvironmentRefusal(ValueError):
    """A start-up check's refusal holding the ``names`` of the environment variables that decided it: the training
    entry off a GPU node says they are that shell's, not the job's, whose script exports its own."""

    def __init__(self, message: str, names: tuple[str, ...]) -> None:
        super().__init__(message)
        self.names = names

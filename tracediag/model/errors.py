"""Errors that carry their exit code and a one-line message for the user."""

from __future__ import annotations

from pathlib import Path


class TracediagError(Exception):
    """Base class: a message the CLI prints as one line, and the exit code it exits with."""

    exit_code = 2

    def one_line(self) -> str:
        """The message as the CLI prints it (no newlines)."""
        return " ".join(str(self).split())


class TraceInputError(TracediagError):
    """An input file or directory is unreadable, truncated, empty, unknown or malformed."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UsageError(TracediagError):
    """Bad command-line usage or configuration."""


def did_you_mean(word: str, choices) -> str:
    """``" (did you mean X?)"`` for the closest choice, or ``""``: for messages about typos."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]}?)" if close else ""

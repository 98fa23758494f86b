"""The one exception base of relay; every error carries data, not only text."""

from __future__ import annotations

from collections.abc import Iterable


class RelayError(Exception):
    """Base of relay's errors; the CLI maps it to exit code 1."""


class SettingsError(RelayError):
    """A settings file that cannot be used: names the file and where in it."""

    def __init__(
        self,
        message: str,
        *,
        file: str,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.path = path
        self.line = line
        self.column = column
        super().__init__(self.location() + ": " + message)

    def location(self) -> str:
        """`file:line:column`, `file: path`, or the file alone."""
        where = self.file
        if self.line is not None:
            where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        if self.path:
            where += f": {self.path}"
        return where


class InputError(RelayError):
    """Input relay was given that it cannot use (an event, a message), with where it was wrong."""

    def __init__(self, message: str, *, source: str = "stdin", path: str | None = None) -> None:
        self.message = message
        self.source = source
        self.path = path
        super().__init__(f"{source}: {message}")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'X'?)` for the known name closest to a mistyped one (a wrong case
    counts as close); "" when none is close."""
    import difflib

    candidates = list(known)
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.7)
    if not close:
        close = [known_name for known_name in candidates if known_name.lower() == name.lower()]
    return f" (did you mean {close[0]!r}?)" if close else ""

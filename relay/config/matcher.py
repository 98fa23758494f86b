"""Claude Code's matcher rules: match-all, a list of exact names, or a regular expression.

One implementation for validating settings and for planning, so the two never disagree.
"""

from __future__ import annotations

import re

_NAME_LIST = re.compile(r"[A-Za-z0-9_\- ,|]*")


class Matcher:
    """A Claude Code matcher: match-all, a list of exact names, or a regex searched in the target."""

    __slots__ = ("names", "pattern", "text")

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.names: frozenset[str] | None = None
        self.pattern: re.Pattern[str] | None = None
        if text is None or text.strip() in ("", "*"):
            return
        if _NAME_LIST.fullmatch(text):
            self.names = frozenset(name.strip() for name in re.split(r"[|,]", text) if name.strip())
        else:
            self.pattern = re.compile(text)

    @property
    def matches_all(self) -> bool:
        """True when the matcher accepts every target."""
        return self.names is None and self.pattern is None

    def __call__(self, target: object) -> bool:
        if self.names is None and self.pattern is None:
            return True
        if not isinstance(target, str):
            return False
        if self.names is not None:
            return target in self.names
        assert self.pattern is not None
        return self.pattern.search(target) is not None

    def explain(self, target: object) -> str:
        """Why this matcher did or did not match `target`, in words."""
        if self.matches_all:
            return (
                "matcher matches everything"
                if self.text is None
                else f"matcher {self.text!r} matches everything"
            )
        verdict = "matches" if self(target) else "does not match"
        kind = "names" if self.names is not None else "regex"
        return f"{kind} {self.text!r} {verdict} {target!r}"


def matcher_problem(text: str) -> str | None:
    """Why a matcher cannot be used, or None when it is fine."""
    try:
        Matcher(text)
    except re.error as exc:
        return f"invalid regular expression {text!r}: {exc}"
    return None

"""What a `@namespace:` accepts, from the `directives` section of every settings file.

Settings files of every scope may set a namespace's `from` and `confirm`; the strictest
wins (the sources all of them allow, and a confirmation any of them asks for), so a
project file can make a namespace safer but never open it wider. See
spec/directives.md §10.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.config.discovery import SettingsSet
from relay.config.model import SOURCES


@dataclass(frozen=True)
class NamespacePolicy:
    """The sources a namespace accepts and the directives the human confirms."""

    sources: frozenset[str] = frozenset(SOURCES)
    confirm_all: bool = False
    confirm_targets: frozenset[str] = frozenset()
    declared_in: tuple[str, ...] = ()
    """The files that set a policy for it (for messages)."""

    def accepts(self, source: str) -> bool:
        return source in self.sources

    def needs_confirmation(self, target: str) -> bool:
        return self.confirm_all or target in self.confirm_targets


def namespace_policy(settings: SettingsSet, namespace: str) -> NamespacePolicy:
    """The combined policy of `namespace` over every settings file."""
    sources = set(SOURCES)
    confirm_all = False
    targets: set[str] = set()
    files: list[str] = []
    for loaded in settings.files:
        policy = loaded.settings.directives.get(namespace)
        if policy is None:
            continue
        files.append(loaded.file)
        if policy.from_ is not None:
            sources &= set(policy.from_)
        if policy.confirm is True:
            confirm_all = True
        elif isinstance(policy.confirm, list):
            targets.update(policy.confirm)
    return NamespacePolicy(frozenset(sources), confirm_all, frozenset(targets), tuple(files))

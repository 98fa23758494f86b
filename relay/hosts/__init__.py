"""The agents relay is installed into: one module per host, each exposing a `HOST`.

claude (Claude Code), gemini (Gemini CLI), codex (OpenAI Codex CLI). The host modules are
imported on first use (`host(name)`), so a call pays only for its own host.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.hosts.model import Host

HOST_NAMES: tuple[str, ...] = ("claude", "gemini", "codex")


def host(name: str) -> Host:
    """The host called `name` (one of HOST_NAMES)."""
    if name not in HOST_NAMES:
        raise KeyError(name)
    found: Host = importlib.import_module(f"relay.hosts.{name}").HOST
    return found

"""Handlers the real-TUI tests register, to see which directives relay ran."""

from __future__ import annotations

import json
import shlex
from pathlib import Path


def deploy_handler(settings: Path, handled: Path) -> None:
    """A `deploy` namespace in `settings` whose handler appends each PatternMatch event to
    `handled` as one line in one write (two handlers at once never interleave) and
    answers `deployed`."""
    record = shlex.quote(str(handled))
    answer = f"event=$(cat); printf '%s\\n' \"$event\" >> {record}; echo deployed"
    settings.write_text(json.dumps({"patterns": {"deploy": {"command": answer}}}))


def deployed(handled: Path) -> list[tuple[str, str]]:
    """(target, message) of each deploy the handler ran, in order."""
    if not handled.exists():
        return []
    calls = [json.loads(line) for line in handled.read_text().splitlines()]
    return [(call["target"], call["message"]) for call in calls]

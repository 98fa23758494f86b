"""The project a store's memories are saved under for a folder: its identity's key
(relay.services.project), with the memories saved under its old path keys moved over the
first time (spec/memory.md, "Which project")."""

from __future__ import annotations

import os
import re

from relay.services.memory.model import MemoryService, MemoryStoreError
from relay.services.project import ProjectIdentity, project_identity


def memory_project(service: MemoryService, root: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """The key memories of the project at `root` are stored under in `service`, and what
    the user should be told (memories moved to it from an old path key, with how many; a
    `.relay/project-name` ignored). Memories move once: a later call finds
    nothing to move after the first time (one indexed read)."""
    identity = project_identity(root)
    notices = [identity.note] if identity.note else []
    return identity.key, notices + _move_old(service, identity)


def _move_old(service: MemoryService, identity: ProjectIdentity) -> list[str]:
    # Only the embedded store can move memories (a command backend keeps its keys).
    move = getattr(service, "move_project", None)
    if move is None:
        return []
    try:
        moved: dict[str, int] = move(identity.legacy, identity.key)
    except MemoryStoreError as exc:
        return [f"memory: the memories of {identity.root} were not moved to its project ({exc})"]
    where = (
        f"{short_key(identity.key)}, shared by every clone of its repository"
        if identity.travels
        else f"{identity.key}: {identity.why}"
    )
    return [
        f"memory: moved {count} {'memory' if count == 1 else 'memories'} saved in {path} "
        f"to this project ({where})"
        for path, count in sorted(moved.items())
    ]


def short_key(key: str) -> str:
    """A key as the user is shown it: `git:` and the commit's first 12 digits, then the rest."""
    found = re.match(r"git:([0-9a-f]+)(.*)\Z", key, re.DOTALL)
    return key if found is None else f"git:{found[1][:12]}{found[2]}"

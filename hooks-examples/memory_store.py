#!/usr/bin/env python3
"""memory_store.py: a memory backend for relay, storing memories in a JSON Lines file.

Protocol: spec/memory-backend.md. relay runs this script once per operation, writes one
JSON request to its stdin ({"op": "add" | "search" | "get" | "delete" | "list" |
"export" | "import", ...}) and reads one JSON response from its stdout ({"ok": true, ...}
or {"ok": false, "error": "..."}).

Storage: one memory per line in $MEMORY_STORE_FILE, default ./.relay/memories.jsonl
(relative to the directory relay runs in); created on the first add or import. Ids are 8
hex characters; dates ISO 8601 UTC with milliseconds and Z. Writes hold an exclusive
lock on a `.lock` file beside the store and replace the file atomically, so concurrent
agents do not lose each other's memories. Search scores by word overlap, ignoring case:
the share of the query's words found in a memory's content and tags. Standard library
only; POSIX (fcntl).

Plug it in, in relay's settings:

    "memory": {"backend": "command", "command": "python3 hooks-examples/memory_store.py"}

or by hand from Python: CommandMemory(["python3", "hooks-examples/memory_store.py"]).
Try it:

    echo '{"op": "add", "content": "Use uv, not pip", "tags": ["tooling"], "agent": null, "project": null}' | python3 hooks-examples/memory_store.py
    echo '{"op": "search", "query": "pip", "project": null, "limit": 5}' | python3 hooks-examples/memory_store.py
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

FIELDS = ("id", "content", "tags", "agent", "project", "created_at")
WORD = re.compile(r"\w+")


class RequestError(Exception):
    """A request this backend cannot serve: answered with {"ok": false}."""


def store_path() -> str:
    return os.environ.get("MEMORY_STORE_FILE") or os.path.join(".relay", "memories.jsonl")


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold an exclusive lock beside the store while reading and rewriting it."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def load(path: str) -> list[dict[str, Any]]:
    """Every memory in file order (oldest added first); [] when there is no store yet."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.readlines()
    except FileNotFoundError:
        return []
    memories = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            memories.append(checked(json.loads(line)))
        except (ValueError, RequestError) as error:
            raise RequestError(f"{path}:{number}: not a memory: {error}") from None
    return memories


def save(path: str, memories: list[dict[str, Any]]) -> None:
    """Replace the store atomically: a crash leaves the old file or the new one."""
    directory = os.path.dirname(path) or "."
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".memories-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            for memory in memories:
                file.write(json.dumps(memory, ensure_ascii=False) + "\n")
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def checked(memory: Any) -> dict[str, Any]:
    """A memory with exactly relay's fields, or RequestError."""
    if not isinstance(memory, dict):
        raise RequestError("a memory must be an object")
    for field in ("id", "content", "created_at"):
        if not isinstance(memory.get(field), str):
            raise RequestError(f"memory field {field!r} must be a string")
    tags = memory.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise RequestError("memory field 'tags' must be a list of strings")
    for field in ("agent", "project"):
        if memory.get(field) is not None and not isinstance(memory[field], str):
            raise RequestError(f"memory field {field!r} must be a string or null")
    return {field: memory.get(field, [] if field == "tags" else None) for field in FIELDS}


def now() -> str:
    """The current time, ISO 8601 UTC with milliseconds and Z."""
    # timezone.utc, not datetime.UTC: the example should run on the user's python3 < 3.11 too.
    moment = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def in_scope(memory: dict[str, Any], project: str | None) -> bool:
    """A project sees its own memories and the global ones; None sees the global ones."""
    return memory["project"] is None or memory["project"] == project


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def newest_first(memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Reversed file order first, so memories added in the same millisecond stay newest first.
    return sorted(reversed(memories), key=lambda memory: memory["created_at"], reverse=True)


def limit_of(request: dict[str, Any], default: int) -> int:
    limit = request.get("limit", default)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise RequestError("'limit' must be a non-negative integer")
    return limit


def text_field(request: dict[str, Any], name: str) -> str:
    value = request.get(name)
    if not isinstance(value, str):
        raise RequestError(f"{name!r} must be a string")
    return value


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The response to one request."""
    path = store_path()
    op = request.get("op")
    if op == "add":
        with locked(path):
            memories = load(path)
            taken = {memory["id"] for memory in memories}
            memory_id = secrets.token_hex(4)
            while memory_id in taken:
                memory_id = secrets.token_hex(4)
            memory = checked({**request, "id": memory_id, "created_at": now()})
            save(path, [*memories, memory])
        return {"memory": memory}
    if op == "search":
        query = words(text_field(request, "query"))
        limit = limit_of(request, 10)
        hits = []
        for memory in newest_first(load(path)):
            if not query or not in_scope(memory, request.get("project")):
                continue
            found = query & (words(memory["content"]) | words(" ".join(memory["tags"])))
            if found:
                hits.append({"memory": memory, "score": round(len(found) / len(query), 4)})
        hits.sort(key=lambda hit: hit["score"], reverse=True)  # stable: ties stay newest first
        return {"hits": hits[:limit]}
    if op == "get":
        memory_id = text_field(request, "id")
        found = [memory for memory in load(path) if memory["id"] == memory_id]
        return {"memory": found[0] if found else None}
    if op == "delete":
        memory_id = text_field(request, "id")
        with locked(path):
            memories = load(path)
            kept = [memory for memory in memories if memory["id"] != memory_id]
            if len(kept) != len(memories):
                save(path, kept)
        return {"deleted": len(kept) != len(memories)}
    if op == "list":
        limit = limit_of(request, 50)
        scoped = [memory for memory in load(path) if in_scope(memory, request.get("project"))]
        return {"memories": newest_first(scoped)[:limit]}
    if op == "export":
        return {"memories": sorted(load(path), key=lambda memory: memory["created_at"])}
    if op == "import":
        given = request.get("memories")
        if not isinstance(given, list):
            raise RequestError("'memories' must be a list")
        # By id: a later copy of the same id replaces an earlier one, as in the store.
        incoming = {memory["id"]: memory for memory in map(checked, given)}
        with locked(path):
            memories = [memory for memory in load(path) if memory["id"] not in incoming]
            save(path, [*memories, *incoming.values()])
        return {"count": len(incoming)}
    raise RequestError(f"unknown op {op!r}")


def main() -> int:
    try:
        try:
            request = json.loads(sys.stdin.buffer.read())
        except ValueError as error:  # bad JSON or bad UTF-8
            raise RequestError(f"the request is not JSON: {error}") from None
        if not isinstance(request, dict):
            raise RequestError("the request must be a JSON object")
        response = {"ok": True, **answer(request)}
    except (RequestError, OSError) as error:
        response = {"ok": False, "error": str(error)}
    json.dump(response, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

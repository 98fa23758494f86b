"""A memory backend that is an external program, in any language (spec/memory-backend.md).

Each operation runs the program once: one JSON request object on its stdin, one JSON
response object on its stdout. Synchronous on purpose: MemoryService is synchronous and
callers in async code run it on a worker thread, so `subprocess` is enough here; the hook
runner's asyncio machinery (relay/engine/runner.py) is for many hooks at once.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Literal, TypeVar

import msgspec

from relay.engine.command import prepare_launch
from relay.services.memory.model import (
    ImportCounts,
    Memory,
    MemoryHit,
    MemoryStoreError,
    SavedMemory,
)

_STDERR_LINES = 5  # how much of the backend's stderr an error quotes
_STDERR_LINE_CHARS = 300


# Requests: the op name is the tag, so each encodes as {"op": "add", ...}.
class _Request(msgspec.Struct, kw_only=True, tag_field="op"):
    pass


class _Add(_Request, tag="add", omit_defaults=True):
    content: str
    tags: list[str]
    agent: str | None
    project: str | None
    team: str | None = None
    """Only when the memory is a team's (left out otherwise, as before teams existed)."""


class _Search(_Request, tag="search"):
    query: str
    project: str | None
    limit: int


class _Get(_Request, tag="get"):
    id: str


class _Delete(_Request, tag="delete"):
    id: str


class _List(_Request, tag="list"):
    project: str | None
    limit: int


class _Export(_Request, tag="export"):
    pass


class _Import(_Request, tag="import"):
    memories: list[Memory]


# Responses: unknown fields are ignored, so a backend may add its own.
class _Status(msgspec.Struct, kw_only=True):
    ok: bool
    error: str | None = None


class _AddReply(msgspec.Struct, kw_only=True):
    memory: Memory
    existing: bool = False  # a backend that finds an identical memory says so


class _GetReply(msgspec.Struct, kw_only=True):
    memory: Memory | None  # required, null for an unknown id


class _SearchReply(msgspec.Struct, kw_only=True):
    hits: list[MemoryHit]


class _DeleteReply(msgspec.Struct, kw_only=True):
    deleted: bool


class _MemoriesReply(msgspec.Struct, kw_only=True):
    memories: list[Memory]


class _ImportReply(msgspec.Struct, kw_only=True):
    count: int
    # Optional: a backend that says what it did with each memory (spec/memory-backend.md).
    added: int | None = None
    present: int | None = None
    updated: int | None = None


_Reply = TypeVar("_Reply", bound=msgspec.Struct)
_Op = Literal["add", "search", "get", "delete", "list", "export", "import"]

_encoder = msgspec.json.Encoder()


class CommandMemory:
    """MemoryService backed by an external program speaking JSON on stdin and stdout."""

    def __init__(
        self,
        command: str | Sequence[str],
        *,
        timeout: float = 10.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not (command.strip() if isinstance(command, str) else command):
            raise MemoryStoreError("the command is empty", store="command memory backend")
        if isinstance(command, str):
            # The same rules as a hook's command string: split directly when plain, else `sh -c`.
            self.argv: tuple[str, ...] = prepare_launch(command, None, {}).argv
            self.name = command
        else:
            self.argv = tuple(command)
            self.name = shlex.join(self.argv)
        self.timeout = timeout
        self.env = dict(env) if env is not None else None

    def add(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
    ) -> Memory:
        """Save a memory (project None: global) and return it: the new one, or the one
        the backend already held with the same content (see `save`)."""
        return self.save(content, tags=tags, agent=agent, project=project).memory

    def save(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
        team: str | None = None,
    ) -> SavedMemory:
        """Save a memory; `existing` is true when the backend answered that it already
        held one with the same content (finding it is the backend's business)."""
        request = _Add(content=content, tags=list(tags), agent=agent, project=project, team=team)
        reply = self._call("add", request, _AddReply)
        return SavedMemory(memory=reply.memory, existing=reply.existing)

    def search(
        self, query: str, *, project: str | None = None, limit: int = 10, explain: bool = False
    ) -> list[MemoryHit]:
        """Memories of `project` and global ones matching `query`, best first; [] when none.
        A command backend does not explain its ranking: `explain` is not passed on."""
        request = _Search(query=query, project=project, limit=limit)
        return self._call("search", request, _SearchReply).hits

    def get(self, memory_id: str) -> Memory | None:
        """The memory with this id, or None."""
        return self._call("get", _Get(id=memory_id), _GetReply).memory

    def delete(self, memory_id: str) -> bool:
        """Forget a memory; False when there was none with this id."""
        return self._call("delete", _Delete(id=memory_id), _DeleteReply).deleted

    def list(self, *, project: str | None = None, limit: int = 50) -> list[Memory]:
        """Memories of `project` and global ones, newest first."""
        return self._call("list", _List(project=project, limit=limit), _MemoriesReply).memories

    def export(self) -> Iterator[Memory]:
        """Every memory, oldest first."""
        return iter(self._call("export", _Export(), _MemoriesReply).memories)

    def import_memories(self, memories: Iterable[Memory]) -> ImportCounts:
        """Store memories as given (ids, tags, dates kept) and say what happened to each.

        A backend that answers with `added`, `present` and `updated` is taken at its word.
        For one that answers only `count`, relay has read the store first (`export`, one
        more run of the backend) and counts by id: an id not there was added, one there
        with the same fields was present, one with other fields was updated (the backend
        replaces it, spec/memory-backend.md)."""
        given = list(memories)
        if not given:
            return ImportCounts()
        before = {memory.id: memory for memory in self.export()}
        reply = self._call("import", _Import(memories=given), _ImportReply)
        if reply.added is not None and reply.present is not None:
            return ImportCounts(
                added=reply.added, present=reply.present, updated=reply.updated or 0
            )
        added = present = updated = 0
        for memory in given:
            known = before.get(memory.id)
            if known is None:
                added += 1
                before[memory.id] = memory  # a repeat of this id in the input replaces it
            elif known == memory:
                present += 1
            else:
                updated += 1
                before[memory.id] = memory
        return ImportCounts(added=added, present=present, updated=updated)

    def _call(self, op: _Op, request: _Request, reply_type: type[_Reply]) -> _Reply:
        """Run the backend for one request and decode its answer, or raise MemoryStoreError."""
        stdout, stderr = self._run(op, _encoder.encode(request))
        if not stdout.strip():
            raise self._error(op, "printed nothing on stdout", stderr)
        try:
            status = msgspec.json.decode(stdout, type=_Status)
        except msgspec.DecodeError as error:
            raise self._error(op, f"invalid response: {error}", stderr) from None
        if not status.ok:
            raise self._error(op, f"backend error: {status.error or 'no reason given'}", stderr)
        try:
            return msgspec.json.decode(stdout, type=reply_type)
        except msgspec.DecodeError as error:
            raise self._error(op, f"invalid response: {error}", stderr) from None

    def _run(self, op: _Op, request: bytes) -> tuple[bytes, bytes]:
        """The backend's stdout and stderr after a clean exit; MemoryStoreError for any failure."""
        env = {**os.environ, **self.env} if self.env is not None else None
        try:
            process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own group, so a timeout kills its children too
            )
        except OSError as error:
            reason = error.strerror or str(error)
            raise self._error(op, f"cannot run {self.argv[0]!r}: {reason}", b"") from None
        with process:
            try:
                stdout, stderr = process.communicate(request, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                _, stderr = process.communicate()
                raise self._error(op, f"timed out after {self.timeout:g} s", stderr) from None
            except BaseException:
                _kill_group(process)  # Ctrl-C or another failure: leave no orphan
                raise
        code = process.returncode
        if code < 0:
            raise self._error(op, f"killed by signal {_signal_name(-code)}", stderr)
        if code != 0:
            reason = f"exited with code {code}"
            if not stderr.strip():
                # A backend may report its failure on stdout only; quote it then.
                with contextlib.suppress(msgspec.DecodeError):
                    status = msgspec.json.decode(stdout, type=_Status)
                    if status.error:
                        reason += f": {status.error}"
            raise self._error(op, reason, stderr)
        return stdout, stderr

    def _error(self, op: _Op, what: str, stderr: bytes) -> MemoryStoreError:
        """A MemoryStoreError naming the command, the operation, what went wrong and stderr's first lines."""
        message = f"{op}: {what}"
        lines = stderr.decode(errors="replace").strip().splitlines()
        if lines:
            shown = [line[:_STDERR_LINE_CHARS] for line in lines[:_STDERR_LINES]]
            if len(lines) > _STDERR_LINES:
                shown.append(f"… ({len(lines) - _STDERR_LINES} more lines)")
            message += "\nstderr:\n  " + "\n  ".join(shown)
        return MemoryStoreError(message, store=self.name)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the backend's process group, unless it has already been reaped."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def _signal_name(number: int) -> str:
    """`SIGKILL` for 9; the number when it has no name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)

"""What `relay watch` follows: the team (relay.fleet.roster), the messages that flow, and
the hook calls that deny or fail, read again and again; what changed since the last
read comes out as happenings (spec/fleet.md, "relay watch")."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import anyio.to_thread
import msgspec

from relay.engine.hooklog import HookLog, LoggedEvent
from relay.errors import RelayError
from relay.fleet.board import SqliteBoard
from relay.fleet.model import StatusBoard
from relay.fleet.roster import TeamMember, shown_state, team_members
from relay.services.messaging.messenger import Messenger
from relay.services.messaging.model import Agent
from relay.timestamps import utc_millis

HappeningKind = Literal["state", "message", "deny", "error", "problem"]
AGENTS_SECONDS = 2.0
"""The mailbox's names (humans, agents not live) are read again this often; the board's
statuses at every look."""
BOARD_SECONDS = 1.0
"""The board is read at least this often even when nobody wrote it: an agent whose
heartbeat ran out or whose process died reads as lost without a write."""
LOG_SECONDS = 0.5
"""Messages and the hook log are read this often."""
LOG_BATCH = 100
"""Hook log events read per look (a burst of more shows the newest)."""
MESSAGE_BATCH = 100


class Happening(msgspec.Struct, kw_only=True, frozen=True):
    """One thing that happened in the team, as a line of the watch."""

    time: str
    kind: HappeningKind
    text: str


def state_changes(
    before: Mapping[str, TeamMember], after: list[TeamMember], now: str
) -> list[Happening]:
    """Who joined, changed state or tool, in `after` against `before` (by name)."""
    found = []
    for member in after:
        old = before.get(member.name)
        state = shown_state(member)
        if old is None:
            found.append(Happening(time=now, kind="state", text=f"{member.name} {state}"))
            continue
        if shown_state(old) != state:
            found.append(
                Happening(
                    time=now, kind="state", text=f"{member.name} {shown_state(old)} → {state}"
                )
            )
        tool = member.live.tool if member.live is not None else None
        old_tool = old.live.tool if old.live is not None else None
        if tool != old_tool and tool is not None:
            found.append(Happening(time=now, kind="state", text=f"{member.name} in tool {tool}"))
    return found


def hook_happening(event: LoggedEvent) -> Happening | None:
    """A logged event as a happening: a deny, or a hook that failed; None for others."""
    who = event.input.get("agent_name") or ""
    tool = event.input.get("tool_name") or ""
    what = " ".join(part for part in (event.event, str(tool)) if part)
    by = f" ({who})" if who else ""
    failed = [call for call in event.hook_calls if call.failed]
    if failed:
        call = failed[0]
        why = call.error or (
            "timed out"
            if call.timed_out
            else f"signal {call.signal}"
            if call.signal
            else f"exit {call.exit_code}"
        )
        return Happening(
            time=event.time, kind="error", text=f"hook {call.hook} failed on {what}{by}: {why}"
        )
    if event.decision in ("deny", "block"):
        deciders = [call.hook for call in event.hook_calls if call.decision in ("deny", "block")]
        hooks = f" by {', '.join(deciders)}" if deciders else ""
        return Happening(time=event.time, kind="deny", text=f"denied {what}{hooks}{by}")
    return None


class TeamFeed:
    """The team of `messenger` as it changes (see the module docstring)."""

    def __init__(
        self,
        messenger: Messenger,
        board: StatusBoard,
        *,
        hook_log: Path | None = None,
        project: Path | None = None,
    ) -> None:
        self.messenger = messenger
        self.team = messenger.team
        self._board = board
        self._log = HookLog(hook_log) if hook_log is not None else None
        self._project = str(project) if project is not None else None
        self._agents: list[Agent] = []
        self._agents_read = -AGENTS_SECONDS
        self._board_read = -BOARD_SECONDS
        self._board_version: int | None = None
        self._logs_read = -LOG_SECONDS
        self._last_message: str | None = None
        self._last_event: int | None = None
        self.members: dict[str, TeamMember] = {}
        self._problems: dict[str, str] = {}

    async def look(self) -> list[Happening]:
        """Read the team again; what happened since the last look (the first: every member)."""
        now = time.monotonic()
        found: list[Happening] = []
        if now - self._agents_read >= AGENTS_SECONDS:
            self._agents_read = now
            try:
                self._agents = await self.messenger.agents()
            except RelayError as exc:
                found += self._problem("mailbox", f"the mailbox cannot be read: {exc}")
        if not (await self._board_changed() or now - self._board_read >= BOARD_SECONDS or found):
            return await self._logs(now)
        self._board_read = now
        try:
            statuses = await self._board.statuses(self.team)
        except RelayError as exc:
            statuses = []
            found += self._problem("board", f"live state unavailable: {exc}")
        members = team_members(self.team, self._agents, statuses)
        found += state_changes(self.members, members, utc_millis())
        self.members = {member.name: member for member in members}
        return found + await self._logs(now)

    async def _logs(self, now: float) -> list[Happening]:
        """New messages and hook problems, every LOG_SECONDS."""
        if now - self._logs_read < LOG_SECONDS:
            return []
        self._logs_read = now
        return [*await self._new_messages(), *await self._new_hook_events()]

    async def _board_changed(self) -> bool:
        """Whether the board may hold news: this machine's board says when another process
        wrote it (a cheap poll); any other board is read at every look."""
        if not isinstance(self._board, SqliteBoard):
            return True
        try:
            version = self._board.data_version()
        except RelayError:
            return True  # read it, and say why it fails
        changed, self._board_version = version != self._board_version, version
        return changed

    def _problem(self, source: str, text: str) -> list[Happening]:
        """A source that failed: said once until it fails differently."""
        if self._problems.get(source) == text:
            return []
        self._problems[source] = text
        return [Happening(time=utc_millis(), kind="problem", text=text)]

    async def _new_messages(self) -> list[Happening]:
        mailbox = self.messenger.mailbox
        try:
            history = await anyio.to_thread.run_sync(
                lambda: mailbox.history(team=self.team, limit=MESSAGE_BATCH)
            )
        except RelayError as exc:
            return self._problem("messages", f"messages cannot be read: {exc}")
        first = self._last_message is None
        fresh = [m for m in history if self._last_message is None or m.id > self._last_message]
        if history:
            self._last_message = max(self._last_message or "", history[-1].id)
        elif first:
            self._last_message = ""
        if first:
            return []  # the watch shows what flows from now on
        return [
            Happening(
                time=message.created_at,
                kind="message",
                text=f"{message.sender} → {message.recipient}: {' '.join(message.body.split())}",
            )
            for message in fresh
        ]

    async def _new_hook_events(self) -> list[Happening]:
        log = self._log
        if log is None:
            return []
        try:
            events = await anyio.to_thread.run_sync(lambda: log.events(limit=LOG_BATCH))
        except RelayError as exc:
            return self._problem("hook log", f"the hook log cannot be read: {exc}")
        first = self._last_event is None
        last = self._last_event or 0
        if events:
            self._last_event = max(last, events[0].id)
        elif first:
            self._last_event = 0
        if first:
            return []
        found = []
        for event in reversed(events):  # oldest first
            if event.id <= last or not self._ours(event):
                continue
            happening = hook_happening(event)
            if happening is not None:
                found.append(happening)
        return found

    def _ours(self, event: LoggedEvent) -> bool:
        """Whether a logged event is the team's: one of its agents, or in its project."""
        if event.input.get("agent_name") in self.members:
            return True
        cwd = event.input.get("cwd")
        if self._project is None or not isinstance(cwd, str):
            return False
        return cwd == self._project or cwd.startswith(self._project.rstrip("/") + "/")

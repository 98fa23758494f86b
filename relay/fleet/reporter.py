"""A `relay run` session's live status, published to the status board as it changes
(spec/fleet.md, "Live state").

The session only tells the reporter what happens (the agent started, printed, went idle,
a host hook said it is in a tool or waits for the human, the human typed, it ended); the
reporter keeps the `AgentStatus` and publishes it from a task of its own: a change of
state at once, a new last line at most LINE_SECONDS apart, and a heartbeat every
HEARTBEAT_SECONDS. The session never waits on the board: a board that fails (a full disk,
a locked file, a server away) costs one notice, and publishing goes on trying at the next
heartbeat; the final status waits for it at most FINAL_SECONDS.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec

from relay.config.model import MessagingConfig
from relay.engine.processes import process_start_ticks
from relay.fleet.boards import machine_label, open_board
from relay.fleet.model import (
    HEARTBEAT_SECONDS,
    LAST_LINE_LIMIT,
    AgentState,
    AgentStatus,
    HostKind,
    StatusBoard,
)
from relay.protocol.display import visible
from relay.session.hostnotes import HostNote
from relay.timestamps import utc_millis

LINE_SECONDS = 0.25
"""A new last line is published at most this often (a change of state goes at once)."""
FINAL_SECONDS = 2.0
"""The session's final status (exited, stopped) waits for the board at most this long."""
HOST_KINDS: dict[str, HostKind] = {"claude": "claude", "gemini": "gemini", "codex": "codex"}
NOT_WAITING_KINDS = frozenset({"auth_success"})
"""Notification types that do not mean the agent waits for the human."""


def host_kind(command: list[str]) -> HostKind:
    """The host an agent command runs, by its program's name ("other" for any program)."""
    return HOST_KINDS.get(os.path.basename(command[0]) if command else "", "other")


def one_line(text: str) -> str:
    """`text` as a status's last line: visible, on one line, at most LAST_LINE_LIMIT characters."""
    flat = visible(" ".join(text.split()))
    return flat if len(flat) <= LAST_LINE_LIMIT else flat[: LAST_LINE_LIMIT - 1] + "…"


SUPERVISED_VARIABLE = "RELAY_SUPERVISED"
"""Set by `relay up`'s supervisor for the runs it starts (their statuses say `supervised`)."""
RESTARTS_VARIABLE = "RELAY_RESTARTS"
"""How many times the supervisor started the agent again before this run."""


def _count(text: str | None) -> int:
    return int(text) if text is not None and text.isdigit() and len(text) < 10 else 0


class SessionReporter:
    """One session's status and the task that publishes it (see the module docstring)."""

    def __init__(
        self,
        *,
        config: MessagingConfig,
        team: str,
        name: str,
        session_id: str,
        command: list[str],
        project: Path | None,
        idle_seconds: float,
        tell: Callable[[str], None],
        last_line: Callable[[], str | None],
        traffic: Callable[[], tuple[int, int]] | None = None,
        board_path: Path | None = None,
    ) -> None:
        now = utc_millis()
        pid = os.getpid()
        self.status = AgentStatus(
            team=team,
            name=name,
            state="starting",
            since=now,
            heartbeat=now,
            machine=machine_label(),
            host_kind=host_kind(command),
            pid=pid,
            started_ticks=process_start_ticks(pid),
            project=str(project) if project is not None else None,
            command=list(command),
            started=now,
            session_id=session_id,
            supervised=os.environ.get(SUPERVISED_VARIABLE) is not None,
            restarts=_count(os.environ.get(RESTARTS_VARIABLE)),
        )
        self._config = config
        self._board_path = board_path
        self._idle_seconds = idle_seconds
        self._tell = tell
        self._last_line = last_line
        self._traffic = traffic
        self._running = False
        self._idle = False
        self._host_waiting = False
        self._asking = 0
        """Questions the session asks the human right now (directive confirmations)."""
        self._tool_at = 0.0
        """When a host hook last said a tool started or ended (time.monotonic)."""
        self._output_seen = False
        self._recount = True
        self._final = False
        self._wake = anyio.Event()
        self._urgent_event = anyio.Event()
        self._done = anyio.Event()
        self._published = -LINE_SECONDS
        self._problem_told = False
        self._urgent = True  # `starting`, as soon as the board is open
        self._wake.set()
        self._urgent_event.set()

    # -- what happens (called by the session; cheap, never waits) -------------------------

    def running(self) -> None:
        """The session is set up and its agent runs (SessionStart is done)."""
        self._running = True
        self._refresh()

    def output(self) -> None:
        """The agent printed (called for every chunk: a flag and a wake-up at most)."""
        self._output_seen = True
        if self._idle:
            self._idle = False
            self._refresh()
        if not self._wake.is_set():
            self._wake.set()

    def input(self) -> None:
        """The human typed into the agent: whatever it asked them is being answered."""
        if self._host_waiting:
            self._host_waiting = False
            self._refresh()

    def idle(self) -> None:
        """The session's Idle fired (quiet for its idle threshold)."""
        if time.monotonic() - self._tool_at < self._idle_seconds:
            return  # a tool started or ended within the threshold: still working
        self._idle = True
        self._refresh()

    def asking(self, asking: bool) -> None:
        """The session asks the human a question (a directive's confirmation), or is answered."""
        self._asking += 1 if asking else -1
        self._refresh()

    def note(self, note: HostNote) -> None:
        """A host hook's event (relay.session.hostnotes)."""
        if note.event == "Notification":
            if note.kind not in NOT_WAITING_KINDS:
                self._host_waiting = True
        else:
            self._host_waiting = False
            self._idle = False
            if note.event in ("BeforeTool", "AfterTool"):
                self._tool_at = time.monotonic()
            tool = note.tool or None if note.event == "BeforeTool" else None
            if tool != self.status.tool:
                self.status.tool = tool
                self._urgent = True
        self._refresh()

    def message(self) -> None:
        """A message came in or went out: count them again at the next publish."""
        self._recount = True
        self._urgent = True
        self._wake.set()
        self._urgent_event.set()

    # -- publishing -----------------------------------------------------------------------

    def _state(self) -> AgentState:
        if not self._running:
            return "starting"
        if self._asking > 0 or self._host_waiting:
            return "waiting"
        return "idle" if self._idle else "working"

    def _refresh(self) -> None:
        state = self._state()
        if state != self.status.state:
            self.status.state = state
            self.status.since = utc_millis()
            self._urgent = True
        if self._urgent:
            self._wake.set()
            self._urgent_event.set()

    async def run(self) -> None:
        """Publish until `finish`: open the board, then each change, line and heartbeat."""
        try:
            async with open_board(
                self._config,
                self.status.team,
                name=self.status.name,
                on_problem=self._tell_once,
                path=self._board_path,
            ) as board:
                await self._publish_loop(board)
        except Exception as exc:  # a board that cannot be opened never stops the session
            self._problem(exc)
        finally:
            self._done.set()

    async def finish(self, exit_code: int | None, *, stopped: bool) -> None:
        """The session ended (`stopped`: asked to, by `relay stop` or `relay down`): publish
        that and its exit code (-N for signal N), waiting at most FINAL_SECONDS."""
        self.status.state = "stopped" if stopped else "exited"
        self.status.since = utc_millis()
        self.status.exit_code = exit_code
        self.status.tool = None
        self._final = self._urgent = self._recount = True
        self._wake.set()
        self._urgent_event.set()
        with anyio.move_on_after(FINAL_SECONDS):
            await self._done.wait()

    async def _publish_loop(self, board: StatusBoard) -> None:
        while True:
            heartbeat = False
            with anyio.move_on_after(HEARTBEAT_SECONDS) as timer:
                await self._wake.wait()
            if timer.cancelled_caught:
                heartbeat = True
            self._wake = anyio.Event()
            if not (self._urgent or heartbeat):  # a new last line: not too often
                delay = self._published + LINE_SECONDS - anyio.current_time()
                if delay > 0:
                    with anyio.move_on_after(delay):
                        await self._urgent_event.wait()
            final = self._final
            self._urgent = False
            self._urgent_event = anyio.Event()
            await self._publish(board, recount=heartbeat or self._recount)
            if final:
                return

    async def _publish(self, board: StatusBoard, *, recount: bool) -> None:
        status = self.status
        if self._output_seen:
            self._output_seen = False
            line = self._last_line()
            if line:
                status.last_line = one_line(line)
        if recount and self._traffic is not None:
            self._recount = False
            try:
                status.messages_in, status.messages_out = await anyio.to_thread.run_sync(
                    self._traffic, abandon_on_cancel=True
                )
            except Exception:  # a busy or broken mailbox: the counts wait for the next beat
                self._recount = True
        status.heartbeat = utc_millis()
        try:
            # A copy: the session goes on changing its status while the board writes it.
            await board.publish(msgspec.structs.replace(status))
        except Exception as exc:
            self._problem(exc)
        self._published = anyio.current_time()

    def _problem(self, exc: Exception) -> None:
        """Said once: the board failed; the session goes on (and publishing tries again)."""
        self._tell_once(str(exc))

    def _tell_once(self, problem: str) -> None:
        if self._problem_told:
            return
        self._problem_told = True
        self._tell(
            f"live state not published ({problem}): `relay agents` and `relay watch` will not "
            "show this session as it is; the session goes on"
        )

"""`relay run`: an agent CLI in a PTY, its lifecycle events, its directives, safe injection.

One Session wraps one agent process. The agent's output goes to the user's terminal
unaltered (TTY mode) or line by line to stdout (headless mode), and is also fed to the
directive scanner, to Output hooks (only when some are registered) and to the injector,
which types text back into the agent only when that is safe.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import re
import signal
import stat
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from relay.config.discovery import SETTINGS_VARIABLE, section_of, settings_from_environment
from relay.config.loader import BUILTIN_NAMESPACES, suggest_name
from relay.config.model import SessionConfig
from relay.config.paths import find_project_root
from relay.config.policy import namespace_policy
from relay.engine.processes import process_start_ticks
from relay.engine.system import HookSystem
from relay.engine.telemetry import debug, debug_enabled
from relay.protocol.codec import utc_timestamp
from relay.protocol.display import visible
from relay.protocol.output import AggregatedResult
from relay.services.memory.backends import memory_config, open_memory
from relay.services.memory.model import MemoryService, MemoryStoreError
from relay.services.memory.namespace import (
    BUILTIN_NAME,
    END_PROMPT,
    MemoryDirectives,
    start_summary,
)
from relay.services.memory.projects import memory_project
from relay.services.memory.sharing import TeamMemoryError, TeamSharing, team_sharing
from relay.services.messaging.messenger import Messenger, messaging_config
from relay.services.messaging.model import (
    Message,
    MessagingError,
    NameTakenError,
    check_name,
    default_agent_name,
    team_for,
)
from relay.services.messaging.namespace import BUILTIN_NAME as RELAY_BUILTIN_NAME
from relay.services.messaging.namespace import MessagingDirectives
from relay.session import sessions
from relay.session.confirm import Confirmer
from relay.session.directives import (
    PREFIX_CHARS,
    Directive,
    DirectiveScanner,
    LineSplitter,
    unescape,
)
from relay.session.echo import EchoFilter
from relay.session.escapes import acted_on
from relay.session.hostnotes import STATUS_SOCKET_VARIABLE, NoteListener
from relay.session.inbox import SessionInbox
from relay.session.injector import PASTE_END, PASTE_START, Admit, Injector, Outcome, busy_hint
from relay.session.leftovers import end_leftovers
from relay.session.lines import RecentOutput, clean_block
from relay.session.pty import AgentExitedError, AgentPty
from relay.session.screen import SETTLE_SECONDS, ScreenReader, draws_screen
from relay.session.terminal import Notices, passthrough, raw_terminal, terminal_size
from relay.session.transcript import Transcript
from relay.session.voices import voice_for

if TYPE_CHECKING:
    from relay.fleet.reporter import SessionReporter

WAITING_TITLE = "relay: an answer for the agent waits until you finish your line"
TITLE_PUSH, TITLE_POP = "\x1b[22;0t", "\x1b[23;0t"
PRESENCE_QUIET_SECONDS = 2.0
"""Seconds without output after which the agent's presence is idle (`relay agents`)."""
RECENT_LINES = 200
TRANSCRIPT_RATE = 1_000_000
"""Bytes of output a second the transcript records on average (see _transcript_admits)."""
TRANSCRIPT_BURST = 4_000_000
"""Bytes of output the transcript records at once after a quiet spell."""
TRANSCRIPT_FLUSH_SECONDS = 0.2
OUTPUT_BATCH_SECONDS = 0.05
INJECTED_LINES_KEPT = 2000
INJECTED_LINES_SECONDS = 600.0
# A directive's text from its `@`, after the prefix characters a directive line may have.
_DIRECTIVE_START = re.compile(f"[ \t\u00a0{re.escape(PREFIX_CHARS)}]*(@[a-z][a-z0-9_-]*:.*)")


class SessionContext:
    """What Python handlers get: who the session is, recent output, and a way to inject."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.agent_name: str = session.name
        self.session_id: str = session.session_id
        self.working_dir: Path = session.cwd
        self.task: str | None = session.task
        """What the session is for (`relay run --task`), if it was given."""
        self.env: Mapping[str, str] = session.env
        self.memory: MemoryService | None = session.memory
        """The memory service (None when the user replaced `@memory:` with a handler of their own)."""

    def inject(self, text: str) -> None:
        """Queue text to be typed into the agent when it is ready."""
        self._session.inject(text)

    async def send(self, to: str, body: str, *, thread: str | None = None) -> Message:
        """Send a message from this agent to `to` (a name, or "*" for the team); MessagingError if it cannot be."""
        messenger = self._session.messenger
        if messenger is None:
            raise MessagingError("messaging is not running in this session")
        message, _ = await messenger.send(self._session.name, to, body, thread)
        return message

    @property
    def recent_output(self) -> list[str]:
        """The agent's last output lines, ANSI stripped, oldest first."""
        return list(self._session.recent)


class Session:
    """One wrapped agent: run() starts it, fires the lifecycle events, and returns its exit code."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        hooks: HookSystem,
        name: str | None = None,
        headless: bool | None = None,
        idle_seconds: float | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        stdin_fd: int = 0,
        stdout_fd: int = 1,
        style: str | None = None,
        inject: bool | None = None,
        task: str | None = None,
        prompt: str | None = None,
        team: str | None = None,
    ) -> None:
        if not command:
            raise ValueError("no agent command given")
        self.command = list(command)
        self.task = task or None
        """What the session is for (`relay run --task`): SessionStart's `task`."""
        self.prompt = prompt or None
        """Typed into the agent as its first prompt, after the start context (`relay run
        --prompt`; `relay up` gives an agent's task)."""
        self.hooks = hooks
        # The name other agents write after @relay: (a default name is made safe for it).
        # Without --name: the command's name and a digest of the project, which no agent of
        # another project has (spec/messaging.md, "Names").
        self.cwd = (cwd or Path.cwd()).resolve()
        self.name = (
            check_name(name)
            if name is not None
            else default_agent_name(self.command[0], find_project_root(self.cwd) or self.cwd)
        )
        self.session_id = uuid.uuid4().hex
        self.stdin_fd, self.stdout_fd = stdin_fd, stdout_fd
        self.headless = headless if headless is not None else not os.isatty(stdin_fd)
        config = _session_config(hooks)
        self.idle_seconds = idle_seconds if idle_seconds is not None else config.idleSeconds
        self.quiet_ms = config.injectQuietMs
        self.end_grace = config.endGraceSeconds
        self.voice = voice_for(self.command, style or config.style)
        self.inject_enabled = inject if inject is not None else config.inject
        self.transcript_enabled = config.transcript
        # The transcript's share of the output: a token bucket (see _transcript_admits).
        self._transcript_budget = float(TRANSCRIPT_BURST)
        self._transcript_refilled = time.monotonic()
        self._unrecorded = (0, 0)  # bytes and lines of output left out of the transcript
        self.env = {
            **(env if env is not None else os.environ),
            "RELAY_SESSION_ID": self.session_id,
            "RELAY_AGENT_NAME": self.name,
        }
        extra = [*settings_from_environment(), *hooks.extra_settings]
        if extra:  # hooks the agent runs itself (`relay hooks run`) see the same settings
            self.env[SETTINGS_VARIABLE] = os.pathsep.join(str(path.resolve()) for path in extra)
        # The last output lines as the agent printed them: cleaned only when asked for.
        self._recent_output = RecentOutput(RECENT_LINES)
        self.memory: MemoryService | None = None
        self.memory_config = memory_config(hooks.settings)
        self._sharing: TeamSharing | None = None
        self._memory_project: str | None = None
        """Where team memories are shared (memory.transport "nats"), or None."""
        self._team_memory_problem: str | None = None
        self.messaging_config = messaging_config(hooks.settings)
        # --team, else messaging.team, else the repository's; in the agent's environment
        # and the hooks relay runs for it too, so a `relay send`, a hook and the MCP server
        # all use the same team.
        self.team = check_name(
            team_for(hooks.project_dir, self.messaging_config.team, team), what="team name"
        )
        self.env["RELAY_TEAM"] = self.team
        hooks.add_environment({"RELAY_TEAM": self.team})  # the session's own hooks too
        self.messenger: Messenger | None = None
        self.inbox: SessionInbox | None = None
        self._inbox_later: SessionInbox | None = None
        """An inbox whose registration failed at the start: tried again while the agent runs."""
        self._injected: collections.OrderedDict[str, float] = collections.OrderedDict()
        self.context = SessionContext(self)
        self.exit_code: int | None = None
        self._scanner = DirectiveScanner(voice=self.voice)
        self._echo = EchoFilter()
        self._screen: ScreenReader | None = None  # once the agent draws a full screen
        self._screen_drawn = anyio.Event()
        self._hooked_seen = False
        self._unhandled: set[str] = set()
        self._refused_seen = 0
        # Its questions wait for the human's key: shown as lines even over a full screen.
        self._confirmer = Confirmer(self._ask_user, available=not self.headless)
        self._notices = Notices(self._write_stderr, titles=not self.headless and _is_tty(2))
        self._lines = LineSplitter()
        self._agent: AgentPty | None = None
        self._injector: Injector | None = None
        self._early_injects: list[str] = []
        self._directives: MemoryObjectSendStream[Directive] | None = None
        self._output_lines: list[str] = []
        self._output_hooked = False
        self._last_output = time.monotonic()
        self._idle_fired = False
        self._stop_requested: anyio.Event | None = None
        self._stop_reason = "stop"
        self._stopping = False
        self._transcript: Transcript | None = None
        self._session_record: sessions.SessionRecord | None = None
        self._session_record_path: Path | None = None
        self._reporter: SessionReporter | None = None
        """Publishes the session's live status (relay.fleet.reporter), once its name is its own."""
        self._exit_status: int | None = None
        """How the agent ended: its exit code, or -N for signal N."""

    # -- public -----------------------------------------------------------------------

    def inject(self, text: str, *, key: str | None = None, admit: Admit | None = None) -> bool:
        """Queue text for the agent (typed in when it is ready, and once `admit()` says
        so: see Injector); False if `key` was queued before, or typing into the agent is
        off (`session.inject`)."""
        if not self.inject_enabled:
            self._record("not-typed", text)
            return False
        if self._injector is None and admit is not None:
            return False  # (the inbox starts after the injector: never the case)
        self._remember_injected(text)
        if self._injector is None:
            self._early_injects.append(text)
            return True
        return self._injector.submit(text, key=key, admit=admit)

    def _withdraw_injection(self, key: str) -> None:
        """Take back a queued text before it is typed (a message the mailbox did not hand
        to this session after all)."""
        if self._injector is not None:
            self._injector.withdraw(key)

    def _remember_injected(self, text: str) -> None:
        """Lines of injected text that look like directives: their echo is never read as one."""
        now = time.monotonic()
        # Line by line: an echo of the text typed as one line starts with its first line.
        for line in text.splitlines():
            found = _DIRECTIVE_START.match(line)
            if found:
                self._injected[found.group(1).strip()] = now
                self._injected.move_to_end(found.group(1).strip())
        while len(self._injected) > INJECTED_LINES_KEPT:
            self._injected.popitem(last=False)

    def _was_injected(self, line: str) -> bool:
        """Whether a directive line is the echo of injected text (it starts with a line relay typed
        in during the last 10 minutes; the terminal may add to it, `^[[201~` after a paste)."""
        found = _DIRECTIVE_START.match(line)
        if not found:
            return False
        text, oldest = found.group(1).strip(), time.monotonic() - INJECTED_LINES_SECONDS
        return any(
            text.startswith(injected) and when >= oldest
            for injected, when in self._injected.items()
        )

    def request_stop(self, reason: str = "stop") -> None:
        """End the session as `relay stop` does: SessionEnd first, then EOF, TERM, KILL."""
        self._stop_reason = reason
        if self._stop_requested is not None:
            self._stop_requested.set()

    async def run(self) -> int:
        """Run the agent to its end; return its exit code."""
        self.hooks.initialize()
        record = sessions.SessionRecord(
            name=self.name,
            pid=os.getpid(),
            started_ticks=process_start_ticks(os.getpid()),
            command=self.command,
            cwd=str(self.cwd),
            started=utc_timestamp(),
            session_id=self.session_id,
            team=self.team,
        )
        self._session_record = record
        try:
            record_path: Path | None = sessions.register(record)
        except OSError as exc:
            # A full disk or an unwritable state folder must not keep the agent from running.
            record_path = None
            self._tell_user(
                f"the session record cannot be written ({exc.strerror or exc}): "
                "`relay sessions` and `relay stop` will not see this session"
            )
        if self.transcript_enabled:
            self._transcript = Transcript(
                sessions.sessions_dir() / f"{self.name}.transcript.jsonl",
                on_problem=self._tell_user,
            )
        self._session_record_path = record_path
        try:
            return await self._run()
        finally:
            if self.inbox is not None:
                with anyio.CancelScope(shield=True):
                    await self.inbox.close()
            if self._agent is not None:  # it ran: what it left running ends with it
                with anyio.CancelScope(shield=True):
                    await self._end_leftovers()
            if self._transcript is not None:
                self._note_unrecorded()
                self._transcript.close()
            if record_path is not None:
                sessions.unregister(record_path)
            with contextlib.suppress(OSError):
                sessions.hooked_marker(self.session_id).unlink(missing_ok=True)

    async def _end_leftovers(self) -> None:
        """End the processes the agent started that outlive it (detached helpers, such
        as Codex's app-server), said in the transcript; relay's own services stay, said."""
        ended, kept = await end_leftovers(self.session_id)
        for left in ended:
            self._record("ended", left.describe())
        for left in kept:
            self._record("left-running", left.describe())

    def _show_waiting(self, waiting: bool) -> None:
        """Tell the human, in the terminal's title (never in the middle of their line),
        that a text for the agent waits until they finish or clear the line they are
        typing; the title they had comes back after (xterm's title stack)."""
        if self.headless or not sys.stderr.isatty():
            return
        sequence = (f"{TITLE_PUSH}\x1b]0;{WAITING_TITLE}\x07" if waiting else TITLE_POP).encode()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(sequence.decode())
            sys.stderr.flush()

    def _record_agent(self, pid: int) -> None:
        """The agent's pid in the session record (`relay sessions --json`)."""
        record, path = self._session_record, self._session_record_path
        if record is None or path is None:
            return
        record.agent_pid = pid
        # Said when the record could not be written at all; a pid is not worth more.
        with contextlib.suppress(OSError):
            sessions.rewrite(path, record)

    # -- the session --------------------------------------------------------------------

    async def _run(self) -> int:
        """The session, with its live status published from a task beside it."""
        code, failure = 0, None
        async with anyio.create_task_group() as reporting:
            try:
                code = await self._run_agent(reporting)
            except Exception as exc:
                failure = exc  # raised as it was, not in the task group's ExceptionGroup
            finally:
                if self._reporter is not None:
                    with anyio.CancelScope(shield=True):
                        if self.inbox is not None:  # its last acknowledgements: counted
                            inbox, self.inbox = self.inbox, None
                            await inbox.close()
                        await self._reporter.finish(self._exit_status, stopped=self._stopping)
                reporting.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return code

    def _start_reporting(self, group: anyio.abc.TaskGroup) -> None:
        """Publish the session's status from now on (its name is its own: taken in the
        mailbox, or messaging is off)."""
        from relay.fleet.reporter import SessionReporter  # the fleet layer's, on its side

        assert self.messenger is not None
        mailbox, team = self.messenger.mailbox, self.messenger.team
        self._reporter = SessionReporter(
            config=self.messenger.config,
            team=team,
            name=self.name,
            session_id=self.session_id,
            command=self.command,
            project=self.hooks.project_dir,
            idle_seconds=self.idle_seconds,
            tell=self._tell_user,
            last_line=self._last_line,
            traffic=partial(mailbox.traffic, self.name, team=team),
        )
        group.start_soon(self._reporter.run)

    def _last_line(self) -> str | None:
        """The agent's last non-blank output line, cleaned (for its status)."""
        raws = self._recent_output.lines()[-8:]
        for line in reversed(unescape(clean_block(raws)).split("\n") if raws else []):
            if line.strip():
                return line
        return None

    async def _listen_to_host(self, listener: NoteListener) -> None:
        """What the host's hooks say (a tool, a prompt waiting), into the session's status."""
        async for note in listener.notes():
            if note.markers and self.inbox is not None:
                self.inbox.observe_prompt(note.markers)  # the host saw a message submitted
            if self._reporter is not None:
                self._reporter.note(note)

    def _observe_input(self, data: bytes) -> None:
        """Keys for the agent (the human's, or headless stdin)."""
        assert self._injector is not None
        self._injector.observe_input(data)
        if self._reporter is not None:
            self._reporter.input()

    async def _run_agent(self, reporting: anyio.abc.TaskGroup) -> int:
        self._stop_requested = anyio.Event()
        # Once, to the human only: what of the settings does not run (untrusted or broken
        # project files, unknown keys), and the command that fixes it.
        for line in self.hooks.warnings():
            self._tell_user(line)
        self._start_memory()
        # Before SessionStart's recap, so the recap has what the team saved meanwhile.
        await self._sync_team_memory(at_start=True)
        await self._start_messaging()
        self._start_reporting(reporting)
        started: dict[str, Any] = {"source": "startup"}
        if self.task is not None:
            started["task"] = self.task
        start = await self._fire("SessionStart", started)
        if start.inject:
            self._early_injects.insert(0, start.inject)
        if self.memory is not None and self.memory_config.injectOnStart and self.inject_enabled:
            summary = await self._memory_call(
                start_summary,
                self.memory,
                project=self._project,
                budget=self.memory_config.startBudget,
            )
            if isinstance(summary, str):
                self._early_injects.insert(0, summary)
        if self.prompt is not None:
            self._early_injects.append(self.prompt)
        if self._stop_requested.is_set():  # continue: false from SessionStart: never start
            self._stopping = True
            return 0
        try:
            listener: NoteListener | None = NoteListener()
        except OSError:
            listener = None  # no private folder for it: the status goes without the host's word
        with contextlib.ExitStack() as cleanup:
            if listener is not None:
                cleanup.callback(listener.close)
                self.env[STATUS_SOCKET_VARIABLE] = listener.address
            return await self._run_spawned(listener)

    async def _run_spawned(self, listener: NoteListener | None) -> int:
        rows, cols = terminal_size(self.stdin_fd) if not self.headless else (24, 80)
        agent = self._agent = AgentPty.spawn(
            self.command, env=self.env, cwd=str(self.cwd), rows=rows, cols=cols
        )
        if self._reporter is not None:
            self._reporter.running()
        self._record_agent(agent.pid)
        injector = self._injector = Injector(
            partial(self._type, agent),
            quiet_ms=self.quiet_ms,
            exclusive=agent.exclusive_input,  # keys typed meanwhile land after the Enter
            on_delivered=self._delivered,
            line_mode=agent.line_mode,
            foreground=agent.owns_terminal,
            on_waiting=self._show_waiting,
            screen=self._screen_rows,
            busy=self._agent_busy,
            shows_turns=self.voice.busy is not None,
        )
        if not self.inject_enabled:
            if self._early_injects:
                self._tell_user(
                    "typing into the agent is off (--no-inject, session.inject): "
                    "the start context was not typed in"
                )
        else:
            for text in self._early_injects:
                injector.submit(text)
        self._early_injects.clear()
        # Unbounded: directives are small, and output must never wait on their handlers.
        send, receive = anyio.create_memory_object_stream[Directive](max_buffer_size=math.inf)
        self._directives = send
        dispatched = anyio.Event()
        async with anyio.create_task_group() as group:
            injecting = anyio.CancelScope()
            group.start_soon(self._run_injector, injector, injecting)
            group.start_soon(self._dispatch_directives, receive, dispatched)
            group.start_soon(self._watch_idle)
            group.start_soon(self._flush_transcript)
            group.start_soon(self._watch_screen)
            group.start_soon(self._watch_stop)
            group.start_soon(self._watch_signals)
            if listener is not None:
                group.start_soon(self._listen_to_host, listener)
            if self._sharing is not None:
                group.start_soon(self._sync_team_memory_periodically, self._sharing.sync_seconds)
            if self.inbox is not None:
                # With typing off, mail stays in the mailbox: nothing is claimed.
                group.start_soon(partial(self.inbox.run, receive=self.inject_enabled))
            elif self._inbox_later is not None:
                group.start_soon(self._register_later, self._inbox_later, group)
            self._output_hooked = self._has_hooks("Output")
            if self._output_hooked:  # no Output hooks, no cost (DESIGN: issue 4)
                group.start_soon(self._fire_output_batches)
            if self.headless:
                code = await self._pump_headless(agent, injector)
            else:
                with raw_terminal(self.stdin_fd):
                    code = await passthrough(
                        agent,
                        stdin_fd=self.stdin_fd,
                        stdout_fd=self.stdout_fd,
                        on_output=self._on_output,
                        on_input=self._observe_input,
                        intercept=self._confirmer.intercept,
                    )
                self._notices.release()  # held while the agent owned the screen
            injecting.cancel()  # the agent is gone: nothing more can be typed in
            if self._screen is not None:
                ending = self._screen.settle(final=True)
            else:
                ending = [*self._scanner.feed(self._echo.close()), *self._scanner.close()]
            for directive in ending:
                await send.send(directive)
            self._note_refused()
            self._lines_done()
            await send.aclose()
            # Directives printed just before the exit are still dispatched (their handlers
            # may have side effects the agent asked for), within a bound.
            with anyio.move_on_after(self.end_grace):
                await dispatched.wait()
            group.cancel_scope.cancel()
        self.exit_code = code
        self._exit_status = agent.exit_status
        if not self._stopping:
            await self._fire("SessionEnd", {"reason": "exit"})
        agent.close()
        return code

    def _on_output(self, data: bytes) -> None:
        """Every chunk the agent prints (already shown to the user in TTY mode)."""
        assert self._injector is not None and self._directives is not None
        escapes = acted_on(data)  # one search for the injector and the screen test
        self._injector.observe_output(data, modes=escapes)
        if self.inbox is not None:
            self.inbox.observe_output(data)
        self._last_output = time.monotonic()
        self._idle_fired = False
        if self._reporter is not None:
            self._reporter.output()
        screen = self._screen
        if screen is None and escapes and draws_screen(data):
            assert self._agent is not None
            screen = self._screen = ScreenReader(self.voice, self._scanner, *self._agent.size)
            if not self.headless:  # relay's notices would draw into the agent's screen now
                self._notices.own()
            if debug_enabled():
                debug("the agent draws a full screen: reading its display for directives")
        if screen is not None:
            assert self._agent is not None
            screen.feed(data, self._agent.size)
            self._screen_drawn.set()
        else:
            for directive in self._scanner.feed(self._echo.filter(data)):
                self._directives.send_nowait(directive)
            self._note_refused()
        self._recent_output.add(data)
        if self.headless or self._output_hooked or self._transcript_has_room(len(data)):
            self._keep_lines(self._lines.feed(data))
        else:  # nothing wants these lines (the transcript's share is spent): not split
            self._lines.skip(data)
            self._count_unrecorded(len(data), data.count(b"\n"))

    async def _type(self, agent: AgentPty, data: bytes) -> None:
        """The injector's writes: remembered, so that their echo is not scanned."""
        text = data.replace(PASTE_START, b"").replace(PASTE_END, b"")
        for line in text.split(b"\r"):  # a pasted line break echoes as a new line
            self._echo.typed(line)
        await agent.write(data)

    def _note_refused(self) -> None:
        """Directive-looking lines that were not the agent's own words: said in the debug
        log and the transcript (a file the agent shows may try them on purpose)."""
        refused = self._scanner.refused
        if not refused:
            return
        for line in refused:
            self._record("refused", line)
            if debug_enabled():
                debug(f"not a directive (not where {self.voice.name} speaks): {line!r}")
        refused.clear()

    @property
    def recent(self) -> list[str]:
        """The agent's last output lines (at most RECENT_LINES), cleaned, oldest first."""
        lines = self._recent_output.lines()
        if not lines:
            return []
        return unescape(clean_block(lines)).split("\n")

    def _keep_lines(self, raws: list[bytes]) -> None:
        """Complete output lines, a chunk's worth at a time (per-line work would cap
        passthrough throughput): recent lines, then Output hooks or straight on."""
        if not raws:
            return
        if not (self.headless or self._output_hooked) and not self._transcript_admits(raws):
            return  # nothing wants these lines now
        block = unescape(clean_block(raws))  # unescape works on lines, and so on a block
        if self._output_hooked:  # shown (headless) once Output hooks have seen them
            self._output_lines.extend(block.split("\n"))
        elif self.headless:
            self._show(block.split("\n"), block)
        else:
            self._record("output", block)  # admitted above

    def _show(self, texts: list[str], block: str | None = None) -> None:
        """Finished output lines (`block`: the same, joined by newlines): to the transcript
        and, headless, to stdout."""
        if block is None:
            block = "\n".join(texts)
        if self._transcript_admits(texts):
            self._record("output", block)
        if self.headless:
            os.write(self.stdout_fd, (block + "\n").encode())

    def _transcript_admits(self, lines: list[bytes] | list[str]) -> bool:
        """Whether the transcript records these output lines: on average at most
        TRANSCRIPT_RATE bytes a second, in bursts of up to TRANSCRIPT_BURST. An agent that
        dumps a huge log costs the session the cleaning and writing of a share of it, not
        all of it; what is left out is noted in the transcript where recording resumes."""
        if self._transcript is None:
            return False
        size = sum(map(len, lines)) + len(lines)
        if not self._transcript_has_room(size):
            self._count_unrecorded(size, len(lines))
            return False
        self._transcript_budget -= size
        self._note_unrecorded()
        return True

    def _transcript_has_room(self, size: int) -> bool:
        """Whether the transcript's budget, refilled for the time since, holds `size` bytes."""
        if self._transcript is None:
            return False
        now = time.monotonic()
        budget = self._transcript_budget + (now - self._transcript_refilled) * TRANSCRIPT_RATE
        self._transcript_budget = min(float(TRANSCRIPT_BURST), budget)
        self._transcript_refilled = now
        return size <= self._transcript_budget

    def _count_unrecorded(self, size: int, lines: int) -> None:
        """Output the transcript leaves out, said where recording resumes."""
        if self._transcript is not None:
            skipped_bytes, skipped_lines = self._unrecorded
            self._unrecorded = (skipped_bytes + size, skipped_lines + lines)

    def _note_unrecorded(self) -> None:
        skipped_bytes, skipped_lines = self._unrecorded
        if skipped_lines:
            self._unrecorded = (0, 0)
            self._record(
                "unrecorded",
                f"{skipped_lines} lines ({skipped_bytes / 1e6:.1f} MB) of output came faster "
                f"than the transcript records ({TRANSCRIPT_RATE / 1e6:g} MB/s) and are not in it",
            )

    async def _flush_transcript(self) -> None:
        """Write the transcript's pending entries a few times a second, off the output path."""
        while self._transcript is not None:
            await anyio.sleep(TRANSCRIPT_FLUSH_SECONDS)
            self._transcript.flush()

    def _lines_done(self) -> None:
        self._recent_output.end()
        self._keep_lines(self._lines.close())

    async def _pump_headless(self, agent: AgentPty, injector: Injector) -> int:
        """Headless: agent output to stdout line by line (unescaped); our stdin to the agent."""

        async def forward_stdin() -> None:
            if self.stdin_fd < 0:
                return
            pollable = _pollable(self.stdin_fd)
            while True:
                if pollable:
                    # Waited for in the event loop, never in a thread: a supervisor's pipe
                    # that stays open must not keep relay alive once the agent has gone.
                    await anyio.wait_readable(self.stdin_fd)
                    data = _read_some(self.stdin_fd)
                else:
                    # A regular file or /dev/null, which epoll refuses to watch; reading
                    # them never waits, so a thread is enough.
                    data = await anyio.to_thread.run_sync(_read_some, self.stdin_fd)
                if not data:
                    return
                self._observe_input(data)
                await agent.write(data)

        output_done = anyio.Event()

        async def pump_output() -> None:
            while data := await agent.read():
                self._on_output(data)
            output_done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(forward_stdin)
            group.start_soon(pump_output)
            code = await agent.wait()
            # The session ends with the agent, as in TTY mode: a helper it started detached
            # may hold its terminal open (ended with the session's leftovers), so its last
            # output is taken for a moment, not until the terminal closes.
            with anyio.move_on_after(EXIT_DRAIN_SECONDS):
                await output_done.wait()
            group.cancel_scope.cancel()
        return code

    async def _run_injector(self, injector: Injector, scope: anyio.CancelScope) -> None:
        # The agent may end while text is being typed: the session is ending then anyway.
        with scope, contextlib.suppress(AgentExitedError):
            await injector.run()

    async def _dispatch_directives(
        self, directives: MemoryObjectReceiveStream[Directive], done: anyio.Event
    ) -> None:
        """Each directive once, in stream order, through PatternMatch (DESIGN §8)."""
        try:
            await self._dispatch(directives)
        finally:
            done.set()

    async def _dispatch(self, directives: MemoryObjectReceiveStream[Directive]) -> None:
        async with directives:
            async for directive in directives:
                if self._was_injected(directive.line):
                    # Loop guard: relay typed this line in; its echo is not the agent's directive.
                    if debug_enabled():
                        debug(f"ignored a directive relay injected itself: {directive.line!r}")
                    continue
                if self._hooked():
                    # The agent's host has relay as its hooks: its directives come from the
                    # assistant's own text at Stop, not from the screen (run once only).
                    self._record("left-to-hooks", directive.line)
                    if debug_enabled():
                        debug(f"left to the host's hooks: {directive.line!r}")
                    continue
                if not await self._allowed(directive, "terminal"):
                    continue
                payload = {
                    "namespace": directive.namespace,
                    "target": directive.target,
                    "message": directive.message,
                    "line": directive.line,
                    "source": "terminal",
                }
                result = await self._fire("PatternMatch", payload)
                if not result.hooks:
                    self._tell_unhandled(directive.namespace, result.untrusted)
                elif self._reporter is not None and directive.namespace == "relay":
                    self._reporter.message()  # a message sent: counted again

    def _tell_unhandled(self, namespace: str, untrusted: list[str]) -> None:
        """Tell the human, once per namespace, that the agent used one nothing handles (a
        typo such as `@memroy:`, or a handler not trusted yet); the agent is not told:
        to it the line stays ordinary text."""
        if namespace in self._unhandled:
            return
        self._unhandled.add(namespace)
        if untrusted:
            self._tell_user(
                f"@{namespace}: not run: its handler ({', '.join(untrusted)}) is a project "
                f"hook not trusted yet; review it and run `relay trust` in {self.hooks.project_dir}"
            )
            return
        known = sorted({*BUILTIN_NAMESPACES, *self._handled_namespaces()})
        guess = suggest_name(namespace, known)
        hint = f" (did you mean @{guess}:?)" if guess else ""
        self._tell_user(
            f"the agent wrote @{namespace}: but nothing handles that namespace{hint}; "
            f"handled: {', '.join('@' + name + ':' for name in known)}"
        )

    def _handled_namespaces(self) -> list[str]:
        return [
            name
            for hook in self.hooks.registry.for_event("PatternMatch")
            for name in hook.matcher.names or ()
        ]

    def _hooked(self) -> bool:
        """Whether the wrapped host runs relay as its hooks in this session (its hook calls
        leave a marker carrying this session's id; see relay.hosts.channel)."""
        if not self._hooked_seen:
            self._hooked_seen = sessions.hooked_marker(self.session_id).exists()
        return self._hooked_seen

    async def _allowed(self, directive: Directive, source: str) -> bool:
        """The namespace's policy (`directives` in settings): its sources, and the human's
        confirmation where it asks for one."""
        policy = namespace_policy(self.hooks.settings, directive.namespace)
        shown = f"@{directive.namespace}:{directive.target} {directive.message}".rstrip()
        if not policy.accepts(source):
            allowed = ", ".join(sorted(policy.sources)) or "no source"
            self._tell_user(
                f"ignored {shown!r}: @{directive.namespace}: accepts directives from "
                f"{allowed}, not the {source} (directives.{directive.namespace}.from)"
            )
            return False
        if not policy.needs_confirmation(directive.target):
            return True
        if not self._confirmer.available:
            self._tell_user(
                f"ignored {shown!r}: it needs your confirmation "
                f"(directives.{directive.namespace}.confirm) and there is no terminal to ask"
            )
            return False
        if self._reporter is not None:
            self._reporter.asking(True)
        try:
            confirmed = await self._confirmer.ask(f"the agent asks: {shown[:300]!r}; run it?")
        finally:
            if self._reporter is not None:
                self._reporter.asking(False)
        if confirmed:
            return True
        self._tell_user(f"not run: {shown[:300]!r}")
        return False

    async def _fire_output_batches(self) -> None:
        try:
            while True:
                await anyio.sleep(OUTPUT_BATCH_SECONDS)
                # Shielded (bounded by the hooks' timeout): a batch taken for its hooks and
                # cancelled half-way by the session's end would never be shown.
                with anyio.CancelScope(shield=True):
                    await self._flush_output()
        finally:
            with anyio.CancelScope(shield=True):
                await self._flush_output()

    async def _flush_output(self) -> None:
        """Fire Output for the lines so far; show them unless a hook suppressed them."""
        if not self._output_lines:
            return
        lines, self._output_lines = self._output_lines, []
        result = await self._fire("Output", {"text": "\n".join(lines), "stream": "stdout"})
        if not result.suppressOutput:
            self._show(lines)

    async def _watch_idle(self) -> None:
        while True:
            await anyio.sleep(min(PRESENCE_QUIET_SECONDS / 2, self.idle_seconds / 4))
            quiet = time.monotonic() - self._last_output
            if quiet >= PRESENCE_QUIET_SECONDS and self.inbox is not None:
                # At its prompt, as far as anyone can tell: `relay agents` says idle now,
                # not only once Idle fires (idleSeconds, 30 s by default).
                self.inbox.observe_idle()
            if quiet >= self.idle_seconds and not self._idle_fired:
                self._idle_fired = True  # once per quiet period
                if self.inbox is not None:
                    self.inbox.observe_idle()
                if self._reporter is not None:
                    self._reporter.idle()
                await self._fire("Idle", {"idle_seconds": round(quiet, 1)})

    async def _watch_screen(self) -> None:
        """A full-screen agent's rows are read once it has drawn nothing for SETTLE_SECONDS
        (relay.session.screen: it may still say that it is answering; then at the next)."""
        while True:
            await self._screen_drawn.wait()
            quiet = time.monotonic() - self._last_output
            if quiet < SETTLE_SECONDS:
                await anyio.sleep(SETTLE_SECONDS - quiet)
                continue
            self._screen_drawn = anyio.Event()
            assert self._screen is not None and self._directives is not None
            for directive in self._screen.settle():
                self._directives.send_nowait(directive)
            self._note_refused()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
            async for _ in received:
                self.request_stop("stop")

    async def _watch_stop(self) -> None:
        assert self._stop_requested is not None
        await self._stop_requested.wait()
        await self._end(self._stop_reason)

    async def _end(self, reason: str) -> None:
        """SessionEnd's inject first, then wait for quiet, then EOF, SIGTERM, SIGKILL."""
        if self._stopping:
            return
        self._stopping = True
        end = await self._fire("SessionEnd", {"reason": reason})
        agent, injector = self._agent, self._injector
        if agent is None or injector is None:
            return
        parting = [end.inject] if end.inject else []
        if reason == "stop" and self.memory is not None and self.memory_config.promptOnEnd:
            parting.append(END_PROMPT)
        if parting and self.inject_enabled:
            injector.submit("\n".join(parting))
            with anyio.move_on_after(self.end_grace):
                await injector.drained()
        deadline = time.monotonic() + self.end_grace
        while (
            time.monotonic() < deadline
            and time.monotonic() - self._last_output < self.quiet_ms / 1000
        ):
            await anyio.sleep(0.05)
        await agent.terminate(eof_first=True)

    # -- events ---------------------------------------------------------------------------

    async def _fire(self, event: str, fields: dict[str, Any]) -> AggregatedResult:
        payload = {
            "session_id": self.session_id,
            "cwd": str(self.cwd),
            "agent_name": self.name,
            **fields,
        }
        result = await self.hooks.fire(event, payload)
        if result.inject and event not in ("SessionStart", "SessionEnd", "MessageReceived"):
            self.inject(result.inject)
        if result.systemMessage:
            self._tell_user(result.systemMessage)
        for error in result.errors:
            self._tell_user(f"hook {error.hook} failed: {error.message}")
        if not result.continue_ and not self._stopping:
            self._tell_user(
                f"stopping the session: {result.stopReason or 'a hook said continue: false'}"
            )
            self.request_stop("stop")
        return result

    def _screen_rows(self) -> list[str] | None:
        return self._screen.screen() if self._screen is not None else None

    def _agent_busy(self) -> bool:
        """Whether the agent says it is answering: the turn state it announced last, or
        its interrupt hint on the screen."""
        screen = self._screen
        return screen is not None and (
            screen.working or busy_hint(screen.screen(), self.voice.busy)
        )

    def _delivered(self, text: str, key: str | None, outcome: Outcome) -> None:
        """The injector typed a text in (Enter written; `outcome`: see Injector)."""
        self._record("inject", text)
        if outcome == "left" and key is None:
            self._tell_user(f"left in the agent's input box, not submitted: {text[:200]!r}")
        if self.inbox is not None:
            self.inbox.on_delivered(key, outcome)
            if self._reporter is not None:
                self._reporter.message()  # its acknowledgement follows: counted again

    # -- messaging ------------------------------------------------------------------------

    async def _start_messaging(self) -> None:
        """The agent's mailbox (it must not be taken by a live agent) and the built-in `@relay:`."""
        messenger = None
        for hook in self.hooks.registry.hooks:
            if hook.name == RELAY_BUILTIN_NAME and isinstance(hook.handler, MessagingDirectives):
                messenger = hook.handler.messenger  # registered by an earlier session
        self.messenger = messenger or Messenger(
            self.messaging_config, project=self.hooks.project_dir, team=self.team
        )
        inbox = SessionInbox(
            self.messenger,
            name=self.name,
            session_id=self.session_id,
            fire=self._fire,
            submit=lambda text, key, admit: self.inject(text, key=key, admit=admit),
            tell=self._tell_user,
            withdraw=self._withdraw_injection,
        )
        try:
            await inbox.register(cwd=str(self.cwd), receive=self.inject_enabled)
        except NameTakenError:
            raise  # a second live agent of that name: refused before the agent starts
        except MessagingError as exc:
            # A broken mailbox or an unreachable server never stops the session, and a
            # busy one (two sessions starting on a fresh state folder) is tried again.
            self._tell_user(f"messaging unavailable: {exc}; trying again")
            self.messenger.unavailable = str(exc)
            self._inbox_later = inbox
        else:
            self.messenger.unavailable = None
            self.inbox = inbox
        if messenger is not None or self._user_namespace("relay"):
            return
        self.hooks.register(
            "PatternMatch",
            MessagingDirectives(self.messenger),
            matcher="relay",
            name=RELAY_BUILTIN_NAME,
            sequential=True,
        )

    async def _register_later(self, inbox: SessionInbox, group: anyio.abc.TaskGroup) -> None:
        """Register the inbox that failed at the start, trying again (1 s, then up to 30 s
        apart) until it works; then it runs as if registered at the start."""
        assert self.messenger is not None
        delay = 1.0
        while True:
            await anyio.sleep(delay)
            try:
                await inbox.register(cwd=str(self.cwd), receive=self.inject_enabled)
            except NameTakenError as exc:
                self._tell_user(f"messaging off for this session: {exc}")
                return
            except MessagingError as exc:
                self.messenger.unavailable = str(exc)
                delay = min(30.0, delay * 2)
                continue
            break
        self._inbox_later = None
        self.messenger.unavailable = None
        self.inbox = inbox
        self._tell_user("messaging available again: this session receives its mail now")
        group.start_soon(partial(inbox.run, receive=self.inject_enabled))

    # -- memory ---------------------------------------------------------------------------

    @property
    def _project(self) -> str:
        # Memories belong to the project by identity (spec/memory.md "Which project").
        return self._memory_project or str(self.hooks.project_dir)

    def _start_memory(self) -> None:
        """The built-in `@memory:` namespace, unless the user has a `memory` handler of their own."""
        for hook in self.hooks.registry.hooks:
            if hook.name == BUILTIN_NAME and isinstance(hook.handler, MemoryDirectives):
                self.memory = self.context.memory = hook.handler.service  # an earlier session's
                return
        if self._user_namespace("memory"):
            return
        try:
            self._sharing = team_sharing(self.hooks.settings, self.hooks.project_dir, self.team)
        except TeamMemoryError as exc:
            self._tell_user(f"team memory is off: {exc.message}")
        self.memory = self.context.memory = open_memory(self.memory_config, self._sharing)
        self._memory_project, notices = memory_project(self.memory, self.hooks.project_dir)
        for notice in notices:
            self._tell_user(notice)
        handler = MemoryDirectives(
            self.memory,
            project=self._project,
            scope=self.memory_config.scope,
            team=self._sharing.team if self._sharing is not None else None,
        )
        self.hooks.register(
            "PatternMatch", handler, matcher="memory", name=BUILTIN_NAME, sequential=True
        )

    async def _sync_team_memory(self, *, at_start: bool = False) -> None:
        """Apply what the team saved and forgot since the last sync, and publish what waits
        in the outbox (spec/memory-team.md); at the start bounded to START_TIMEOUT, so an
        unreachable server costs a couple of seconds and a one-line notice."""
        sync = getattr(self.memory, "sync", None)
        if self._sharing is None or sync is None:
            return
        from relay.services.memory.team import START_TIMEOUT, SYNC_TIMEOUT

        timeout = START_TIMEOUT if at_start else SYNC_TIMEOUT
        try:
            report = await anyio.to_thread.run_sync(partial(sync, timeout=timeout))
        except (MemoryStoreError, TeamMemoryError) as exc:
            self._tell_user(f"team memory: not synced: {exc}")
            return
        except Exception as exc:  # team memory never stops a session: a notice, not an exit
            self._tell_user(f"team memory: not synced: {type(exc).__name__}: {exc}")
            return
        if report.unreachable is not None:
            if at_start or self._team_memory_problem != report.unreachable:
                self._tell_user(
                    f"team memory: not synced ({report.unreachable}); using this machine's memories"
                )
            self._team_memory_problem = report.unreachable
            return
        self._team_memory_problem = None
        for problem in report.problems[:5]:
            self._tell_user(f"team memory: {problem}")
        if len(report.problems) > 5:
            self._tell_user(f"team memory: {len(report.problems) - 5} more problems")

    async def _sync_team_memory_periodically(self, seconds: float) -> None:
        """A live session picks up the team's memories every `seconds` (memory.syncSeconds)."""
        while True:
            await anyio.sleep(seconds)
            await self._sync_team_memory()

    def _user_namespace(self, namespace: str) -> bool:
        """Whether the user registered a handler of their own for `@namespace:`, which
        replaces the built-in one (DESIGN §8)."""
        return any(
            hook.canonical == "PatternMatch"
            and not hook.matcher.matches_all
            and hook.matcher(namespace)
            for hook in self.hooks.registry.hooks
        )

    async def _memory_call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A memory operation on a worker thread; a store that fails is reported, not raised."""
        try:
            return await anyio.to_thread.run_sync(partial(function, *args, **kwargs))
        except MemoryStoreError as exc:
            self._tell_user(f"memory unavailable: {exc}")
            return f"Memory is unavailable right now ({exc.message}); carry on without it."

    def _has_hooks(self, event: str) -> bool:
        return bool(self.hooks.registry.for_event(event))

    def _tell_user(self, text: str) -> None:
        # stderr, and \r\n: the user's terminal may be in raw mode; while the agent owns
        # the screen, the title, and the line once it has exited (Notices). It may quote a
        # hook's name or answer, a message: made visible (relay.protocol.display).
        self._notices.tell("relay: " + visible(text))
        self._record("system", text)

    def _ask_user(self, text: str) -> None:
        """A question to the human (or its answer): a line on the terminal, whoever owns it."""
        self._write_stderr("relay: " + visible(text).replace("\n", "\r\n") + "\r\n")
        self._record("system", text)

    @staticmethod
    def _write_stderr(text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(text)
            sys.stderr.flush()

    def _record(self, kind: str, text: str) -> None:
        if self._transcript is not None:
            self._transcript.record(kind, text)


def _is_tty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


EXIT_DRAIN_SECONDS = 0.5
"""Headless: how long the agent's last output is taken once it has exited."""


def _pollable(fd: int) -> bool:
    """Whether `fd` can be waited for by the event loop (a pipe, socket or terminal)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""  # closed or unreadable stdin: nothing to forward


def _session_config(hooks: HookSystem) -> SessionConfig:
    """The `session` settings: for each field, the most specific file that sets it."""
    return section_of(hooks.settings, "session", SessionConfig())

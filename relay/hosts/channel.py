"""relay's agent channel inside a host (DESIGN §12; spec/hosts.md, "The agent channel").

When relay is a host's hook layer, the host's own events carry the channel both ways:

- **Mail in.** For an agent relay knows by name (`$RELAY_AGENT_NAME`: `relay run --name`
  sets it, or the user does), waiting messages reach the model without anything typed:
  as additional context at SessionStart, UserPromptSubmit/BeforeAgent and
  PostToolUse/AfterTool, and at Stop/AfterAgent as a block whose reason carries them, so
  the model reads them before it stops. A message is claimed for the session when the
  hook runs and acknowledged only once the answer carrying it has been returned to the
  host (written to the client's socket, or to stdout in process).
- **Directives out.** At Stop/AfterAgent relay reads the assistant's own last message
  (Claude Code and Codex `last_assistant_message`, Gemini CLI `prompt_response`, else the
  last assistant entry of the transcript the host names): never tool input or output. Its
  directives are found as on a plain terminal (column 0, outside fences, not in quotes or
  indented content) and each goes through the namespace policy with source `assistant`,
  then PatternMatch. What the handlers answer goes back in the Stop block's reason.
- **Loop guard.** A Stop block makes the host take another turn. relay blocks at most
  MAX_STOP_BLOCKS times in a row in a session (the count restarts at the next prompt or
  at a Stop it lets through); past that, answers reach the user as a systemMessage and
  mail waits for the next prompt or tool.

All of this is skipped, at the cost of a dictionary lookup, for events that need none of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from relay.config.paths import private_dir, state_dir
from relay.hosts.model import Host
from relay.protocol.codec import EventEnvelope
from relay.protocol.output import AggregatedResult
from relay.session.sessions import holds_session, hooked_marker

if TYPE_CHECKING:
    from relay.engine.system import HookSystem
    from relay.session.directives import Directive

MAIL_EVENTS = frozenset({"SessionStart", "BeforeAgent", "AfterTool"})
"""Canonical events whose additional context carries mail (where the host reads it):
SessionStart, UserPromptSubmit/BeforeAgent, PostToolUse/AfterTool."""
PROMPT_EVENT = "BeforeAgent"
STOP_EVENT = "AfterAgent"
"""Stop in Claude Code and Codex, AfterAgent in Gemini CLI."""
MAIL_PER_EVENT = 10
MAX_STOP_BLOCKS = 3
MAX_DIRECTIVES = 10
"""Directives run from one assistant message; more are refused with a note."""
MAILBOX_SECONDS = 5.0
"""Added to the event's time bound for the mailbox work (SQLite waits at most this)."""
TRANSCRIPT_TAIL = 1 << 20
"""The bytes of a transcript read for the last assistant message."""
_CANDIDATE = re.compile(r"(?m)^[ \t]*(?:[●⏺✦][ \t])?@[a-z][a-z0-9_-]*:")


class _State(msgspec.Struct, kw_only=True):
    """What a host session needs remembered between its events."""

    blocks: int = 0
    """Stop blocks in a row."""
    seen: int = 0
    """How much of the assistant text was already scanned (Gemini's `prompt_response`
    accumulates over the continuations a block causes)."""
    digest: str = ""


def agent_name(env: Mapping[str, str]) -> str | None:
    return env.get("RELAY_AGENT_NAME") or None


class HostTurn:
    """The channel's part in one host event."""

    def __init__(
        self,
        host: Host,
        envelope: EventEnvelope,
        env: Mapping[str, str],
        text: str | None,
        caller: int | None = None,
    ) -> None:
        self.host = host
        self.caller = caller
        self.envelope = envelope
        self.env = env
        self.event = envelope.name
        self.wire = host.wire(self.event)
        self.name = agent_name(env)
        self.text = text
        host_session = str(envelope.event.session_id or "")
        self.session = env.get("RELAY_SESSION_ID") or f"{host.name}:{host_session}"
        """Mail is claimed for this session: `relay run`'s own when the host runs under it,
        so its typing and the hooks never hand the same message twice."""
        digest = hashlib.sha256(f"{host.name}\0{host_session}".encode()).hexdigest()[:24]
        self._state_file = state_dir(env) / "hosts" / f"{host.name}-{digest}.json"
        self.directives: list[Directive] = []
        self._state: _State | None = None

    # -- planning -----------------------------------------------------------------

    def prepare(self, hooks: HookSystem) -> float:
        """Find the directives; the seconds the turn may take at most."""
        self.hooks = hooks
        bound = MAILBOX_SECONDS
        if self.text is None:
            return bound
        state = self.state()
        text = self.text
        accumulates = self.envelope.field("last_assistant_message") is None
        again = self.envelope.field("stop_hook_active") is True
        if accumulates and again and _digest(text[: state.seen]) == state.digest:
            text = text[state.seen :]  # what the last block already answered is not run again
        state.seen, state.digest = len(self.text), _digest(self.text)
        if _CANDIDATE.search(text) is None:
            return bound
        from relay.session.directives import DirectiveScanner

        scanner = DirectiveScanner()
        found = [*scanner.feed(text.encode() + b"\n"), *scanner.close()]
        self.directives = found
        for directive in self.directives[:MAX_DIRECTIVES]:
            planned = hooks.plan("PatternMatch", {"namespace": directive.namespace})
            bound += hooks.time_bound(planned)
        return bound

    def state(self) -> _State:
        if self._state is None:
            self._state = _State()
            with contextlib.suppress(OSError, msgspec.DecodeError):
                self._state = msgspec.json.decode(self._state_file.read_bytes(), type=_State)
        return self._state

    # -- running ------------------------------------------------------------------

    def run(self, result: AggregatedResult) -> Callable[[], None] | None:
        """Deliver mail and run the directives into `result`; what to do once the answer
        has been returned to the host (acknowledge the mail it carries), if anything."""
        import anyio

        return anyio.run(self._run, result)

    async def _run(self, result: AggregatedResult) -> Callable[[], None] | None:
        import anyio

        from relay.mcp.channel import Channel, ChannelError

        try:
            channel = Channel(self.hooks, name=self.name, environ=self.env, session_id=self.session)
        except Exception as exc:  # a bad name, an unusable store: said, never fatal
            _notice(result, f"relay: the agent channel is unavailable: {exc}")
            return None
        mail: list[tuple[str, str]] = []
        handed = False
        try:
            # $RELAY_AGENT_NAME and $RELAY_SESSION_ID are claims: a live agent's name is
            # this call's only when the call comes from inside that agent's session.
            await anyio.to_thread.run_sync(channel.claim_for, self.caller)
            if self.event == "SessionStart":
                try:
                    await channel.enroll()
                except Exception as exc:  # the mailbox: said, and the session goes on
                    _notice(result, f"relay: {channel.name} is not known to its team: {exc}")
            answers = [
                await self._directive(channel, item) for item in self.directives[:MAX_DIRECTIVES]
            ]
            answers += [
                f"@{item.namespace}:{item.target}: not run: more than {MAX_DIRECTIVES} directives "
                "in one message"
                for item in self.directives[MAX_DIRECTIVES:]
            ]
            blocking = self.event == STOP_EVENT
            state = self.state() if blocking or self.event == PROMPT_EVENT else None
            if state is not None and (
                self.event == PROMPT_EVENT or self.envelope.field("stop_hook_active") is not True
            ):
                state.blocks = 0
            may_block = state is not None and blocking and state.blocks < MAX_STOP_BLOCKS
            if channel.name is not None and (not blocking or may_block):
                try:
                    mail = await channel.take_mail(MAIL_PER_EVENT)
                except ChannelError as exc:
                    _notice(result, f"relay: messages for {channel.name} wait: {exc}")
            text = _compose(answers, mail, channel.name)
            if text and blocking and may_block:
                assert state is not None
                state.blocks += 1
                result.decision = "deny"
                result.reason = f"{result.reason}\n\n{text}" if result.reason else text
            elif text and blocking:
                _notice(
                    result,
                    f"relay: not asking {self.host.title} to go on again ({MAX_STOP_BLOCKS} "
                    f"times in a row already); {text}",
                )
            elif mail:
                result.inject = f"{result.inject}\n\n{text}" if result.inject else text
            if state is not None:
                self._save(state)
            if not mail:
                return None
            evidence = f"returned to {self.host.title} in its {self.wire} hook answer"
            handed = True
            return lambda: _acknowledge(channel, mail, evidence)
        finally:
            if not handed:  # else closed once the mail is acknowledged
                if mail:  # taken but never returned to the host: queued again
                    with contextlib.suppress(Exception), anyio.CancelScope(shield=True):
                        await channel.release(mail)
                channel.close()

    async def _directive(self, channel: Any, directive: Directive) -> str:
        from relay.mcp.channel import ChannelError

        shown = f"@{directive.namespace}:{directive.target}"
        try:
            answer = await channel.directive(
                directive.namespace, directive.target, directive.message, source="assistant"
            )
        except ChannelError as exc:
            return f"{shown}: not run: {exc}"
        return f"{shown}: {answer}"

    def _save(self, state: _State) -> None:
        folder = self._state_file.parent
        try:
            private_dir(folder)
            temporary = folder / f".{self._state_file.name}.{os.getpid()}"
            temporary.write_bytes(msgspec.json.encode(state))
            os.replace(temporary, self._state_file)
        except OSError:
            pass  # the guard then counts from zero: at worst MAX_STOP_BLOCKS more turns


def _acknowledge(channel: Any, mail: list[tuple[str, str]], evidence: str) -> None:
    import anyio

    try:
        anyio.run(channel.acknowledge, mail, evidence)
    finally:
        channel.close()


def _compose(answers: list[str], mail: list[tuple[str, str]], name: str | None) -> str:
    parts: list[str] = []
    if answers:
        parts.append("relay ran the directives in your last message:\n" + "\n".join(answers))
    if mail:
        who = f" for {name}" if name else ""
        parts.append(f"relay has new messages{who}:\n" + "\n\n".join(text for _, text in mail))
    return "\n\n".join(parts)


def _notice(result: AggregatedResult, text: str) -> None:
    result.systemMessage = f"{result.systemMessage}\n{text}" if result.systemMessage else text


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- which events need the channel --------------------------------------------------------


def host_turn(
    host: Host, envelope: EventEnvelope, env: Mapping[str, str], caller: int | None = None
) -> HostTurn | None:
    """The channel's part in this event, or None when it has none (the usual case);
    `caller`: the pid of the process that made the call (None: this one)."""
    event = envelope.name
    run_session = env.get("RELAY_SESSION_ID")
    if run_session and event in MAIL_EVENTS:
        _mark_hooked(run_session, env, caller)
    if event == STOP_EVENT:
        text = assistant_text(envelope)
        if text is not None and _CANDIDATE.search(text) is None:
            text = None  # nothing that could be a directive: nothing to remember either
        if text is None and not agent_name(env):
            return None
        return HostTurn(host, envelope, env, text, caller)
    if event in MAIL_EVENTS and host.wire(event) in host.context_events and agent_name(env):
        return HostTurn(host, envelope, env, None, caller)
    return None


def assistant_text(envelope: EventEnvelope) -> str | None:
    """The assistant's own last message at Stop/AfterAgent: the payload's, else the
    transcript's. None when there is none to read."""
    for field in ("last_assistant_message", "prompt_response"):
        value = envelope.field(field)
        sent = envelope.sent is None or field in envelope.sent  # not a typed default
        if isinstance(value, str) and sent:
            return value
    path = envelope.field("transcript_path")
    if isinstance(path, str) and path:
        return transcript_text(Path(path))
    return None


def transcript_text(path: Path) -> str | None:
    """The text of the last assistant message in a Claude Code transcript (JSON lines):
    its text blocks after the last prompt, never its tool calls or their results."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - TRANSCRIPT_TAIL))
            tail = file.read()
    except OSError:
        return None
    texts: list[str] = []
    for line in tail.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if entry.get("type") == "user" and not _tool_results(content):
            texts = []  # a new prompt: what came before is an earlier turn
        elif entry.get("type") == "assistant" and isinstance(content, list):
            texts.extend(
                block["text"]
                for block in content
                if isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            )
    return "\n".join(texts) if texts else None


def _tool_results(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _mark_hooked(session_id: str, env: Mapping[str, str], caller: int | None) -> None:
    """Tell the `relay run` session that the host's hooks read it (it then leaves the
    directives on its screen to them), once, and only for a call from inside that session:
    a marker forged for another session would silence its directives."""
    marker = hooked_marker(session_id, env)
    if marker.exists() or not holds_session(session_id, caller):
        return
    try:
        private_dir(marker.parent)
        marker.touch()
    except OSError:
        # relay run cannot tell that the hooks read this session: it then also dispatches
        # the directives it reads on the screen (an unwritable state folder; the hook's own
        # answer is unaffected, and a marker written at a later event ends it).
        pass

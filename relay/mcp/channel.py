"""What relay's MCP tools do, without MCP: the agent channel as calls (DESIGN §12).

Every tool that acts is a directive with source `tool`: `memory_save(content)` is
`@memory:save content`, `send_message(to, body)` is `@relay:to body`, `deploy(target,
message)` is `@deploy:target message`. Each goes through the namespace's policy
(`directives` in settings), then PatternMatch: the same handlers, trust and hook log as a
directive printed in a terminal. The built-in `@memory:` and `@relay:` handlers are
registered here as a session registers them, unless the user has their own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import anyio.to_thread

from relay.config.model import Source
from relay.config.policy import namespace_policy
from relay.engine.system import HookSystem
from relay.protocol.output import AggregatedResult
from relay.services.memory.backends import memory_config, open_memory
from relay.services.memory.model import MemoryService, MemoryStoreError
from relay.services.memory.namespace import BUILTIN_NAME as MEMORY_BUILTIN
from relay.services.memory.namespace import MemoryDirectives
from relay.services.memory.projects import memory_project
from relay.services.memory.sharing import TeamMemoryError, TeamSharing, team_sharing
from relay.services.messaging.messenger import Messenger, messaging_config
from relay.services.messaging.model import (
    Agent,
    MessagingError,
    NameTakenError,
    check_name,
    new_message,
)
from relay.services.messaging.namespace import BUILTIN_NAME as RELAY_BUILTIN
from relay.services.messaging.namespace import MessagingDirectives, delivery_text

BUILTIN_NAMESPACES = ("memory", "relay")
INBOX_LIMIT = 20
ACK_EVIDENCE = "returned by relay mcp check_inbox"
MAX_TEXT = 100_000
"""Longest text a tool takes (a message body, a memory): a bigger one is refused."""
MAX_WORD = 200
"""Longest one-word argument (a namespace tool's target, a memory id): as a thread id."""
MAX_TAGS = 64
"""Tags one memory_save takes at most (as a team memory keeps), each at most MAX_NAME."""
MAX_NAME = 64
"""Longest agent name (`relay send`'s check: 1 to 64 characters)."""
ARGUMENT_LIMITS: dict[str, int] = {
    "to": MAX_NAME,
    "thread": MAX_WORD,
    "target": MAX_WORD,
    "id": MAX_WORD,
    "body": MAX_TEXT,
    "message": MAX_TEXT,
    "content": MAX_TEXT,
    "query": MAX_TEXT,
}
"""The characters each tool argument may have: checked before any hook runs or any event
is logged (the mailbox's own checks then apply to a message, as for `relay send`)."""


class ChannelError(Exception):
    """A call the channel refuses, with the reason the agent reads."""


def check_arguments(arguments: Mapping[str, object]) -> None:
    """Refuse (ChannelError) a tool argument over its limit (ARGUMENT_LIMITS), a target
    that is not one word (a directive's target never is), or more or longer tags than a
    memory keeps; the refusal names the argument and its size, never repeats it."""
    for name, value in arguments.items():
        if isinstance(value, str):
            limit = ARGUMENT_LIMITS[name]
            if len(value) > limit:
                raise ChannelError(f"`{name}` is {len(value):,} characters; at most {limit:,}")
            if name == "target" and any(char.isspace() for char in value):
                raise ChannelError("`target` is one word, as in @NAMESPACE:TARGET: no spaces")
        elif isinstance(value, list):  # tags
            if len(value) > MAX_TAGS:
                raise ChannelError(f"`{name}` has {len(value):,} entries; at most {MAX_TAGS}")
            for entry in value:
                if not isinstance(entry, str) or len(entry) > MAX_NAME:
                    raise ChannelError(f"each of `{name}` is text of at most {MAX_NAME} characters")


class Channel:
    """relay's services for one calling agent."""

    def __init__(
        self,
        hooks: HookSystem,
        *,
        name: str | None = None,
        environ: Mapping[str, str] | None = None,
        session_id: str | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.hooks = hooks
        hooks.initialize()
        chosen = name or env.get("RELAY_AGENT_NAME") or None
        self.name = check_name(chosen) if chosen else None
        self.in_session = bool(env.get("RELAY_SESSION_ID"))
        """Started by an agent under `relay run`, which keeps the agent's presence: as the
        environment claims it, until `start` proves it or takes it back."""
        self.session_id = session_id or env.get("RELAY_SESSION_ID") or uuid.uuid4().hex
        self._identity_problem: str | None = None
        # $RELAY_TEAM (the team of the `relay run` session it is in), else messaging.team,
        # else the repository's: the same as `relay run`'s there.
        self.messenger = Messenger(
            messaging_config(hooks.settings),
            project=hooks.project_dir,
            team=env.get("RELAY_TEAM") or None,
        )
        self.memory: MemoryService | None = None
        self.sharing: TeamSharing | None = None
        """Where team memories are shared (memory.transport "nats"), or None."""
        self.notices: list[str] = []
        """One-line notices for the user (stderr), e.g. a team memory sync that failed."""
        self._register_builtins()

    # -- set-up ---------------------------------------------------------------------

    @property
    def project(self) -> str:
        return str(self.hooks.project_dir)

    def user_namespaces(self) -> list[str]:
        """The namespaces of the settings' `patterns` handlers, bar the built-in ones."""
        names: dict[str, None] = {}
        for loaded in self.hooks.settings.files:
            for namespace, handler in loaded.settings.patterns.items():
                if handler != "builtin" and namespace not in BUILTIN_NAMESPACES:
                    names[namespace] = None
        return list(names)

    def _has_user_handler(self, namespace: str) -> bool:
        return any(
            hook.canonical == "PatternMatch"
            and not hook.matcher.matches_all
            and hook.matcher(namespace)
            for hook in self.hooks.registry.hooks
        )

    def _register_builtins(self) -> None:
        if not self._has_user_handler("memory"):
            config = memory_config(self.hooks.settings)
            try:
                self.sharing = team_sharing(
                    self.hooks.settings, self.hooks.project_dir, self.messenger.team
                )
            except TeamMemoryError as exc:
                self.notices.append(f"team memory is off: {exc.message}")
            self.memory = open_memory(config, self.sharing)
            # Its project by identity (spec/memory.md "Which project"), not its path.
            key, moved = memory_project(self.memory, self.hooks.project_dir)
            self.notices.extend(moved)
            self.hooks.register(
                "PatternMatch",
                MemoryDirectives(
                    self.memory,
                    project=key,
                    scope=config.scope,
                    team=self.sharing.team if self.sharing is not None else None,
                ),
                matcher="memory",
                name=MEMORY_BUILTIN,
                sequential=True,
            )
        if not self._has_user_handler("relay"):
            self.hooks.register(
                "PatternMatch",
                MessagingDirectives(self.messenger),
                matcher="relay",
                name=RELAY_BUILTIN,
                sequential=True,
            )

    async def start(self) -> None:
        """Take up the named agent's identity, for `relay mcp`. Inside that agent's own
        `relay run` session (proved: see `_proven_session`), the session keeps its presence
        and this server acts for it. Otherwise the name is registered with the team for as
        long as this server runs (others can write to it; its presence is this process),
        under a session id of its own; a name a live agent holds is refused."""
        if self.name is None:
            return
        mailbox, team = self.messenger.mailbox, self.messenger.team
        if self.in_session:
            if await anyio.to_thread.run_sync(self._proven_session):
                return
            # $RELAY_SESSION_ID is a claim anyone can make (or read from another
            # process): not that session's, this server speaks for itself.
            self.in_session = False
            self.session_id = uuid.uuid4().hex
        try:
            await anyio.to_thread.run_sync(
                lambda: mailbox.register_agent(
                    self.name or "", team=team, session_id=self.session_id, cwd=self.project
                )
            )
        except NameTakenError as exc:
            self._identity_problem = (
                f"the name {self.name} belongs to a live agent ({exc}); give this agent "
                "another name with `relay mcp --name NAME`"
            )
        except MessagingError as exc:
            self._identity_problem = f"the mailbox is unavailable: {exc.message}"

    def _proven_session(self, caller: int | None = None) -> bool:
        """Whether `caller` (default: this process) runs inside the `relay run` session
        that holds the name: the team's live agent of that name has this session id, lives
        on this machine, and its relay process (pid and start time, as it registered) is
        one of the caller's ancestors. A session id alone proves nothing: it is in the
        agent's environment, which other processes of the user can read."""
        agent = self._live_holder()
        return agent is not None and self._descends(agent, caller)

    def _live_holder(self) -> Agent | None:
        """The team's live agent that holds this channel's name, if any."""
        mailbox, team = self.messenger.mailbox, self.messenger.team
        try:
            agents = mailbox.agents(team)
        except MessagingError:
            return None
        for agent in agents:
            if agent.name == self.name:
                return agent if agent.kind == "agent" and agent.state != "offline" else None
        return None

    def _descends(self, agent: Agent, caller: int | None) -> bool:
        from relay.engine.processes import descends_from

        return (
            agent.session_id == self.session_id
            and agent.host == self.messenger.mailbox.host
            and agent.pid is not None
            and descends_from(agent.pid, agent.started_ticks, child=caller)
        )

    def claim_for(self, caller: int | None) -> None:
        """For a host's hook call: the name is this call's unless a live agent holds it and
        the call (`caller`'s pid; None: this process) does not come from inside that agent
        (`_inside`). Otherwise sending and taking mail are refused, as for `relay mcp`."""
        if self.name is None:
            return
        agent = self._live_holder()
        if agent is not None and not self._inside(agent, caller):
            self._identity_problem = (
                f"the name {self.name} belongs to a live agent (session {agent.session_id}) "
                "and this call does not come from inside it"
            )

    def _inside(self, agent: Agent, caller: int | None) -> bool:
        """Whether `caller` runs inside the live agent `agent`: it descends from the relay
        process that holds the name (a `relay run`), or, where that process is the host's
        own MCP server (`relay mcp` started by Claude Code, Gemini CLI or Codex), from the
        host that started it, whose hook calls are its siblings. A `relay run`'s parent is
        the user's shell, which proves nothing: only its own descendants are inside it."""
        from relay.engine.processes import descends_from, parent_of, process_alive
        from relay.session.sessions import list_sessions

        if agent.host != self.messenger.mailbox.host or agent.pid is None:
            return False
        if descends_from(agent.pid, agent.started_ticks, child=caller):
            return True
        if not process_alive(agent.pid, agent.started_ticks):
            return False
        if any(record.pid == agent.pid for record in list_sessions()):
            return False  # a relay run session: its own descendants only
        host = parent_of(agent.pid)
        return host is not None and host > 1 and descends_from(host, None, child=caller)

    async def enroll(self) -> None:
        """Make the named agent known to its team, so others can write to it, without a
        presence to keep (a host's hooks have no process that lasts): it shows offline,
        and its mail waits for its next event. A live agent of that name is left alone."""
        if self.name is None or self.in_session:
            return
        mailbox, team, name = self.messenger.mailbox, self.messenger.team, self.name

        def enroll() -> None:
            try:
                mailbox.register_agent(
                    name, team=team, session_id=self.session_id, cwd=self.project
                )
            except NameTakenError:
                return
            mailbox.set_presence(name, team=team, session_id=self.session_id, state="offline")

        await anyio.to_thread.run_sync(enroll)

    async def sync_team_memory(self) -> None:
        """Catch up on the team's memories (spec/memory-team.md), bounded to a couple of
        seconds; what went wrong becomes a notice, never an error."""
        sync = getattr(self.memory, "sync", None)
        if self.sharing is None or sync is None:
            return
        from relay.services.memory.team import START_TIMEOUT

        try:
            report = await anyio.to_thread.run_sync(partial(sync, timeout=START_TIMEOUT))
        except (MemoryStoreError, TeamMemoryError) as exc:
            self.notices.append(f"team memory: not synced: {exc}")
            return
        except Exception as exc:  # team memory never stops the server: a notice, not an exit
            self.notices.append(f"team memory: not synced: {type(exc).__name__}: {exc}")
            return
        if report.unreachable is not None:
            self.notices.append(
                f"team memory: not synced ({report.unreachable}); using this machine's memories"
            )
        self.notices.extend(f"team memory: {problem}" for problem in report.problems[:5])

    def close(self) -> None:
        self.messenger.mailbox.close()
        close = getattr(self.memory, "close", None)
        if close is not None:
            close()

    # -- calls ----------------------------------------------------------------------

    def _agent(self, what: str) -> str:
        if self._identity_problem is not None:
            raise ChannelError(f"cannot {what}: {self._identity_problem}")
        if self.name is None:
            raise ChannelError(
                f"relay does not know which agent is calling, so it cannot {what}: run the "
                "agent under `relay run --name NAME`, or register the server as "
                "`relay mcp --name NAME`"
            )
        return self.name

    def _payload(self, **fields: object) -> dict[str, object]:
        # A name this server could not take up is not the caller's: hooks never see it.
        name = self.name if self._identity_problem is None else None
        return {
            "session_id": self.session_id,
            "cwd": str(self.hooks.cwd or Path.cwd()),
            "agent_name": name,
            **fields,
        }

    async def directive(
        self, namespace: str, target: str, message: str, *, source: Source = "tool"
    ) -> str:
        """`@namespace:target message` from a tool call (or, in a host, the assistant's own
        text): its policy, then its handlers; what they answer (ChannelError when it is not
        run)."""
        if len(message) > MAX_TEXT:
            raise ChannelError(f"the text is {len(message):,} characters; at most {MAX_TEXT:,}")
        policy = namespace_policy(self.hooks.settings, namespace)
        shown = f"@{namespace}:{target}"
        if not policy.accepts(source):
            allowed = ", ".join(sorted(policy.sources)) or "no source"
            raise ChannelError(
                f"{shown} is not accepted from {_SOURCE_NAMES[source]}: the settings allow it "
                f"from {allowed} only (directives.{namespace}.from)"
            )
        if policy.needs_confirmation(target):
            raise ChannelError(
                f"{shown} needs the human's confirmation (directives.{namespace}.confirm), "
                f"which {_SOURCE_NAMES[source]} cannot ask for: ask the human to run it"
            )
        if namespace == "relay":
            self._agent("send a message in its name")
        line = f"{shown} {message}".rstrip()
        result = await self.hooks.fire(
            "PatternMatch",
            self._payload(
                namespace=namespace, target=target, message=message, line=line, source=source
            ),
        )
        return _answer(result, namespace)

    async def send_message(self, to: str, body: str, thread: str | None = None) -> str:
        """Send as the agent: the arguments checked as `relay send` checks them (names,
        body, thread) before any hook runs."""
        name = self._agent("send a message in its name")
        check_arguments({"to": to, "body": body, "thread": thread})
        try:
            new_message(
                team=self.messenger.team, sender=name, recipient=to, body=body, thread=thread
            )
        except MessagingError as exc:
            raise ChannelError(f"not sent: {exc.message}") from None
        text = f"[thread:{thread}] {body}" if thread else body
        return await self.directive("relay", to, text)

    async def check_inbox(self) -> str:
        """Messages waiting for the agent, each once: claimed, run through MessageReceived
        hooks, and acknowledged as returned to the agent."""
        name = self._agent("read its messages")
        mail = await self.take_mail(INBOX_LIMIT)
        await self.acknowledge(mail, ACK_EVIDENCE)
        if not mail:
            return f"No messages for {name}."
        more = " (more are waiting: call check_inbox again)" if len(mail) == INBOX_LIMIT else ""
        return "\n\n".join(text for _, text in mail) + more

    async def take_mail(self, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` waiting messages, claimed for this session and run through the
        MessageReceived hooks (a denied one is dropped and its sender told): each message's
        id and the text to hand the agent. Acknowledge them once they are handed over."""
        name = self._agent("read its messages")
        mailbox, team = self.messenger.mailbox, self.messenger.team
        try:
            deliveries = await anyio.to_thread.run_sync(
                lambda: mailbox.claim(name, team=team, session_id=self.session_id, limit=limit)
            )
        except MessagingError as exc:
            raise ChannelError(f"the mailbox is unavailable: {exc.message}") from exc
        mail: list[tuple[str, str]] = []
        for delivery in deliveries:
            message = delivery.message
            result = await self.hooks.fire(
                "MessageReceived",
                self._payload(
                    message_id=message.id,
                    sender=message.sender,
                    body=message.body,
                    thread=message.thread,
                ),
            )
            if result.decision == "deny":
                reason = result.reason or "a MessageReceived hook denied it"
                await anyio.to_thread.run_sync(
                    partial(mailbox.deny, message.id, name, team=team, reason=reason)
                )
                continue
            specific = result.hookSpecificOutput or {}
            body = specific.get("body") if isinstance(specific.get("body"), str) else None
            text = delivery_text(message, body)
            mail.append((message.id, f"{text}\n{result.inject}" if result.inject else text))
        return mail

    async def acknowledge(self, mail: list[tuple[str, str]], evidence: str) -> None:
        """The agent has the messages `take_mail` returned: `evidence` says how."""
        name = self._agent("read its messages")
        mailbox, team = self.messenger.mailbox, self.messenger.team
        for message_id, _ in mail:
            # Handed over and taken in at once: the attempt counts here, not at the claim.
            await anyio.to_thread.run_sync(
                partial(mailbox.ack, message_id, name, team=team, evidence=evidence, attempt=True)
            )

    async def release(self, mail: list[tuple[str, str]]) -> None:
        """`take_mail` returned messages that never reached the agent: queue them again."""
        if self.name is None or not mail:
            return
        mailbox, team, name = self.messenger.mailbox, self.messenger.team, self.name
        ids = [message_id for message_id, _ in mail]
        await anyio.to_thread.run_sync(
            partial(mailbox.release, name, ids, team=team, session_id=self.session_id)
        )

    async def list_agents(self) -> str:
        try:
            agents = await self.messenger.agents()
        except MessagingError as exc:
            raise ChannelError(f"the mailbox is unavailable: {exc.message}") from exc
        if not agents:
            return f"No agents in team {self.messenger.team} yet."
        lines = [f"Agents in team {self.messenger.team}:"]
        for agent in agents:
            you = " (you)" if agent.name == self.name else ""
            lines.append(f"- {agent.name}: {agent.state}{you}")
        return "\n".join(lines)


_SOURCE_NAMES: dict[Source, str] = {
    "tool": "a tool call",
    "assistant": "the assistant's text",
    "terminal": "the terminal",
}


def _answer(result: AggregatedResult, namespace: str) -> str:
    """What the handlers answered, for the agent: their `inject`, else why there is none."""
    if result.inject:
        return result.inject
    problems = [f"hook {error.hook} failed: {error.message}" for error in result.errors]
    if result.systemMessage:
        problems.append(result.systemMessage)
    if problems:
        raise ChannelError("; ".join(problems))
    if not result.hooks:
        raise ChannelError(f"no handler is registered for @{namespace}:")
    return "Done (the handler gave no answer)."

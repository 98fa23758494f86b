"""The shape of a settings.json file (DESIGN §5), as msgspec Structs."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from relay.errors import SettingsError

Scope = Literal["runtime", "project-local", "project", "user", "settings", "system"]
"""Where a hook comes from; plan order follows this order (DESIGN §6)."""

SCOPE_ORDER: dict[str, int] = {
    "runtime": 0,
    "project-local": 1,
    "project": 2,
    "user": 3,
    "settings": 4,
    "system": 5,
}
# Plan order. `settings` (--settings FILE) sits at user level, after the user file.

TRUST_REQUIRED: frozenset[str] = frozenset({"project", "project-local"})

USER_ONLY_MEMORY = ("backend", "command", "transport", "team", "syncSeconds", "scope")
"""`memory` settings read only from files the user controls: a project file cannot choose
a program to run, switch sharing on, pick the team or the server memories go to, or make
the agent's saves go to the team by default (a cloned repository that could would let
anything the agent reads there plant memories in every teammate's sessions)."""
USER_ONLY_MESSAGING = (
    "transport",
    "nats",
    "team",
    "maxAttempts",
    "maxPerMinute",
    "maxExchanges",
    "loopCooldownMinutes",
)
"""`messaging` settings read only from files the user controls: a project file cannot send
the team's messages to a server of its choosing, join another team, or loosen the limits
that stop agents flooding each other or replying to each other forever."""
USER_ONLY = {"memory": USER_ONLY_MEMORY, "messaging": USER_ONLY_MESSAGING}
"""By section: the settings a file of a TRUST_REQUIRED scope may not set (ignored there,
with a warning)."""

DEFAULT_TIMEOUT = 60.0
MILLISECOND_SUSPECT = 600.0


class HookEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One command hook."""

    command: str
    type: Literal["command"] = "command"
    args: list[str] | None = None
    name: str | None = None
    timeout: Annotated[float, Meta(gt=0, description="seconds")] = DEFAULT_TIMEOUT
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    failClosed: bool = False
    enabled: bool = True
    description: str | None = None
    signal: str = "SIGTERM"
    reach: list[str] = msgspec.field(default_factory=list)
    """Project paths (files, folders, globs; from the root) that the hook loads code from
    where relay cannot see it: its trust fingerprint covers every file under them, and a
    hook whose reach relay cannot pin (a dynamic import) can be trusted once it names them."""

    @property
    def display_name(self) -> str:
        """The hook's name: `name`, else the command string."""
        return self.name or self.command_line

    @property
    def command_line(self) -> str:
        """The command as one line: `command`, with `args` after it in exec form."""
        return " ".join([self.command, *self.args]) if self.args else self.command


class HookGroup(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Hooks that share a matcher."""

    matcher: str | None = None
    sequential: bool = False
    hooks: list[HookEntry] = msgspec.field(default_factory=list)


class HooksConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Switches over all hooks."""

    enabled: bool = True
    disabled: list[str] = msgspec.field(default_factory=list)


class MemoryConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The built-in memory service."""

    backend: Literal["sqlite", "command"] = "sqlite"
    command: str | None = None
    """For backend "command": the executable speaking JSON over stdio (spec/memory-backend.md).
    Read from the system, user and --settings files only: a project file cannot choose
    a program for relay to run outside trust."""
    injectOnStart: bool = True
    """SessionStart's inject starts with the project's most relevant memories."""
    promptOnEnd: bool = True
    """SessionEnd (reason stop) asks the agent to save what it learned."""
    startBudget: Annotated[int, Meta(ge=0)] = 2000
    """At most this many characters of memories at SessionStart."""
    semantic: bool = True
    """Search by meaning as well as by words (spec/memory.md "Hybrid search"), when the
    `semantic` extra is installed; false: by words alone."""
    scope: Literal["project", "global", "team"] = "project"
    """Where a save goes unless it says (`--global`, `--team`): this project's memories,
    every project's on this machine, or the team's on every machine of the team
    (spec/memory-team.md; "team" needs `transport` "nats"). Read from the system, user
    and --settings files only: a cloned repository must not send an agent's saves to the
    whole team."""
    transport: Literal["local", "nats"] = "local"
    """local: memories stay on this machine. nats: team memories are shared through NATS
    JetStream, with the connection of `messaging.nats` (spec/memory-team.md). Read from
    the system, user and --settings files only."""
    team: str | None = None
    """The team whose memories this machine shares; unset: messaging's team
    (`messaging.team`, else the project's own). Read from the system, user and
    --settings files only."""
    syncSeconds: Annotated[float, Meta(ge=5)] = 60.0
    """With transport nats: how often a running session picks up the team's new memories.
    Read from the system, user and --settings files only."""


class SessionConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """`relay run` timings."""

    idleSeconds: Annotated[float, Meta(gt=0)] = 30.0
    """Quiet seconds before Idle fires (once per quiet period)."""
    injectQuietMs: Annotated[int, Meta(ge=0)] = 500
    """The agent's output must be quiet this long before relay types into it."""
    endGraceSeconds: Annotated[float, Meta(ge=0)] = 5.0
    """On a stop: how long to wait for the agent to go quiet after SessionEnd's inject."""
    style: Literal["auto", "plain", "claude", "gemini", "codex"] = "auto"
    """How the agent draws its own words, which decides the lines read as directives
    (spec/directives.md §3); auto: by the program's name (claude, gemini), else plain."""
    inject: bool = True
    """False: relay never types into the agent (for a shell or a REPL): no start context,
    no memory recap, no answers; messages wait in the mailbox (`relay inbox`)."""
    transcript: bool = True
    """False: no transcript file (`state/sessions/NAME.transcript.jsonl`) is written."""


Source = Literal["assistant", "terminal", "tool"]
"""Where a directive came from: the assistant's message text as a host's hooks report it,
the agent's terminal under `relay run`, or a call of relay's MCP tools."""
SOURCES: tuple[Source, ...] = ("assistant", "terminal", "tool")


class DirectivePolicy(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one `@namespace:` accepts (spec/directives.md §10)."""

    from_: list[Source] | None = msgspec.field(default=None, name="from")
    """The sources it accepts; unset: all of them."""
    confirm: bool | list[str] = False
    """True: the human confirms each directive before its handler runs; a list: only
    directives with one of these targets (`["forget"]`, `["*"]` for a broadcast)."""


class NatsTls(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """TLS options for the NATS connection (paths to PEM files)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True
    """False skips checking the server's certificate (tests with self-signed ones only)."""


class NatsConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Where the NATS server is and how to log in (one of credentials, nkey, user/password, token)."""

    url: str = "nats://127.0.0.1:4222"
    """One URL, or several separated by commas (a cluster)."""
    credentials: str | None = None
    """A .creds file (JWT and nkey seed), as `nsc` writes it."""
    nkey: str | None = None
    """A file holding an nkey seed."""
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls: NatsTls | None = None
    inboxPrefix: str | None = None
    """The prefix of the connection's reply subjects. Default `_INBOX_<team>_<name>`, with the
    agent's name in a session and the sender's (`--as`, else $USER) from the CLI: what a
    per-agent NATS user is allowed to subscribe to."""
    presenceTtlSeconds: Annotated[float, Meta(gt=0)] = 30.0
    """An agent not heard from for this long is offline."""


class MessagingConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Messages between agents (`@relay:`, `relay send`)."""

    transport: Literal["sqlite", "nats"] = "sqlite"
    """sqlite: one machine, the embedded mailbox. nats: NATS JetStream between machines.
    Read from the system, user and --settings files only."""
    team: str | None = None
    """Agents of one team can message each other; other teams are invisible. Unset: the
    project's own team, `<root's name>-<8 hex of its path>` (spec/messaging.md)."""
    maxAttempts: Annotated[int, Meta(ge=1)] = 5
    """A delivery handed out this many times without an acknowledgement is dead."""
    maxPerMinute: Annotated[int, Meta(ge=1)] = 30
    """Messages one agent may send in a minute (slows a flood down)."""
    maxExchanges: Annotated[int, Meta(ge=1)] = 20
    """Messages two agents may exchange (either way) with no human message to either of
    them in between; past it, messages between the two are refused (stops a reply loop)."""
    loopCooldownMinutes: Annotated[float, Meta(gt=0)] = 10.0
    """A pair stopped by maxExchanges may write again this long after its last message
    (or at once after a human's message); a quiet gap this long also ends the count."""
    doorbell: bool = True
    """Wake a waiting recipient with a datagram after a send; false: poll only."""
    pollMs: Annotated[int, Meta(ge=1)] = 250
    """How often a waiting recipient checks the mailbox (PRAGMA data_version, cheap)."""
    ackTimeoutSeconds: Annotated[float, Meta(gt=0)] = 2.0
    """After injecting a message: how long to wait for its [id8] marker in the agent's
    output before the first output after it counts as the acknowledgement."""
    nats: NatsConfig | None = None


class LogConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The hook log (`relay hooks log`)."""

    maxEvents: Annotated[int, Meta(ge=1)] | None = None
    """Events kept (unset: 10,000). Read from the system, user and --settings files only."""


class Settings(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One settings.json file."""

    hooks: dict[str, list[HookGroup]] = msgspec.field(default_factory=dict)
    hooksConfig: HooksConfig = msgspec.field(default_factory=HooksConfig)
    patterns: dict[str, HookEntry | Literal["builtin"]] = msgspec.field(default_factory=dict)
    memory: MemoryConfig = msgspec.field(default_factory=MemoryConfig)
    session: SessionConfig = msgspec.field(default_factory=SessionConfig)
    messaging: MessagingConfig = msgspec.field(default_factory=MessagingConfig)
    log: LogConfig = msgspec.field(default_factory=LogConfig)
    directives: dict[str, DirectivePolicy] = msgspec.field(default_factory=dict)


class ConfigWarning(msgspec.Struct, kw_only=True):
    """Something in a settings file that works but is probably a mistake."""

    file: str
    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class BrokenHook(msgspec.Struct, kw_only=True):
    """A hook entry (or a `patterns` handler) of a settings file that has an error: it does
    not run, the file's other hooks do; a failClosed one denies on its events instead
    (spec/protocol.md §7.8). A broken group or event stands for every hook in it."""

    event: str
    """The event name as written (`PatternMatch` for a `patterns` handler)."""
    matcher: str | None
    """Its group's matcher when that is usable; None (every target) when it is the group
    that is broken."""
    name: str
    """Its `name`, else its command, else where it is (`hooks.Stop[0]`)."""
    command: str
    place: str
    """Where it is in the file: `hooks.BeforeTool[0].hooks[1]`."""
    fail_closed: bool
    """It asks to fail closed (`"failClosed": true`, or a value meaning it, anywhere in it)."""
    enabled: bool = True
    """False when it says `"enabled": false`: off anyway, so it denies nothing."""
    errors: list[SettingsError] = msgspec.field(default_factory=list)

    def describe(self) -> str:
        """What is wrong with it and what that means: `FILE:LINE:COL: PATH: what; hook NAME
        does not run (…)`."""
        error = self.errors[0] if self.errors else None
        what = str(error) if error is not None else self.place
        more = f" (and {len(self.errors) - 1} more error(s) in it)" if len(self.errors) > 1 else ""
        effect = (
            "it is failClosed, so relay denies its events instead"
            if self.fail_closed and self.enabled
            else "the file's other hooks still run"
        )
        return f"{what}{more}; hook {self.name} does not run until this is fixed: {effect}"


class LoadedSettings(msgspec.Struct, kw_only=True):
    """A settings file that was found, read and validated."""

    file: str
    scope: Scope
    settings: Settings
    """Without its broken hooks (`broken`)."""
    warnings: list[ConfigWarning] = msgspec.field(default_factory=list)
    broken: list[BrokenHook] = msgspec.field(default_factory=list)
    """Hook entries with an error: left out of `settings`; the rest of the file is used."""

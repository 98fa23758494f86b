"""One host's call of `relay hooks run`: its arguments, working directory, environment and
stdin in; what to print and the exit code out.

The one path shared by `relay hooks run`, the clients' in-process fallback and `relay
serve` (STYLE §16: a test runs the server and the in-process path on the same calls and
compares the bytes). For a host's dialect (claude, gemini, codex) relay never fails
silently: whatever it skipped or failed at reaches the user as a `systemMessage`, and
where the user asked for it (failClosed), a failure denies instead of allowing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from relay.config.discovery import (
    SETTINGS_VARIABLE,
    BrokenSettings,
    SettingsCache,
    settings_cache,
    settings_from_environment,
    settings_witness,
)
from relay.config.model import SCOPE_ORDER, TRUST_REQUIRED
from relay.config.paths import cached_path, relay_home, state_file, system_settings_path
from relay.config.trust import DigestCache, TrustStore, digest_cache
from relay.engine.planner import Plan
from relay.engine.registry import RegisteredHook, RegistryCache
from relay.engine.system import HookSystem, PlannedEvent
from relay.engine.telemetry import Telemetry, log_path, resolve_max_events
from relay.errors import RelayError
from relay.hosts import HOST_NAMES
from relay.hosts import host as _load_host
from relay.hosts.channel import HostTurn, host_turn
from relay.hosts.model import Host
from relay.protocol.codec import EventEnvelope, EventError, decode_event
from relay.protocol.dialects import UnknownEventError, canonical_name, matcher_field
from relay.protocol.display import visible
from relay.protocol.output import AggregatedResult
from relay.server.client import Call, Reply
from relay.session.hostnotes import STATUS_SOCKET_VARIABLE, tell_session

if TYPE_CHECKING:
    from relay.engine.execution import Ending

DIALECTS: tuple[str, ...] = ("relay", *HOST_NAMES)
ALL_SCOPES = frozenset(SCOPE_ORDER)
_FAIL_CLOSED = re.compile(rb'"failClosed"\s*:\s*true')
_encoder = msgspec.json.Encoder()
host = functools.cache(_load_host)
"""The host of a dialect, kept (importlib's lookup of a module already imported is a dozen
calls on every host's event)."""


class RunArgs(msgspec.Struct, kw_only=True):
    """The arguments of `relay hooks run`."""

    event: str
    dialect: str = "relay"
    settings: list[str] = msgspec.field(default_factory=list)
    cwd: str | None = None


def parse_run_args(argv: list[str], cwd: str) -> RunArgs | None:
    """`relay hooks run`'s arguments, or None when click must handle them (help, a usage
    error, an option it does not know): the fast path never imports click."""
    event: str | None = None
    args = RunArgs(event="")
    position = 0
    while position < len(argv):
        word = argv[position]
        position += 1
        if word.startswith("--") and word not in ("--",):
            name, equals, value = word.partition("=")
            if name not in ("--settings", "--cwd", "--dialect"):
                return None
            if not equals:
                if position >= len(argv):
                    return None
                value = argv[position]
                position += 1
            if name == "--settings":
                args.settings.append(value)
            elif name == "--cwd":
                args.cwd = value
            elif value in DIALECTS:
                args.dialect = value
            else:
                return None
        elif word.startswith("-") and word != "-":
            return None
        elif event is None:
            event = word
        else:
            return None
    if event is None:
        return None
    if args.cwd is not None and not os.path.isdir(os.path.join(cwd, args.cwd)):
        return None  # click says "Directory … does not exist."
    args.event = event
    return args


class Caches:
    """What a resident server keeps warm between calls: parsed settings, script digests,
    trust stores and hook logs (each validated per call by a stat; see filecache)."""

    def __init__(self) -> None:
        self.settings: SettingsCache = settings_cache()
        self.digests: DigestCache = digest_cache()
        self.registries = RegistryCache()
        self.plans = PlanCache()
        self._lock = threading.Lock()
        self._trust: dict[Path, TrustStore] = {}
        self._logs: dict[tuple[Path, int], Telemetry] = {}

    def trust_store(self, path: Path) -> TrustStore:
        """The trust store at `path`, kept."""
        with self._lock:
            store = self._trust.get(path)
            if store is None:
                store = self._trust[path] = TrustStore(path)
            return store

    def telemetry(self, path: Path, max_events: int) -> Telemetry:
        """The hook log at `path`, kept (its writer thread too)."""
        with self._lock:
            log = self._logs.get((path, max_events))
            if log is None:
                log = self._logs[(path, max_events)] = Telemetry(path, max_events=max_events)
            return log

    def figures(self) -> dict[str, object]:
        """What `relay serve --status` tells of these caches."""
        return {
            "plans": {"kept": len(self.plans), "used": self.plans.used},
            "trust_checks": self.registries.figures(),
        }

    def close(self) -> None:
        """Flush every hook log."""
        for log in list(self._logs.values()):
            log.close()


class PreparedCall:
    """A call whose event is planned: `bound` seconds at most until `finish` returns."""

    def __init__(self, bound: float, finish: Callable[[], Reply]) -> None:
        self.bound = bound
        self._finish = finish

    def finish(self) -> Reply:
        """Run the planned hooks and render the answer."""
        return self._finish()


def answer_call(call: Call, caches: Caches | None = None) -> Reply | None:
    """The reply to a call, or None when its arguments are click's to handle."""
    args = parse_run_args(call.argv, call.cwd)
    if args is None:
        return None
    return prepare(args, call, caches).finish()


def prepare(
    args: RunArgs, call: Call, caches: Caches | None = None, *, on_close: bool = True
) -> PreparedCall:
    """Read the event and plan it; never raises (every failure is a reply).

    `on_close`: flush the hook log when finished (the in-process path; a server's logs
    stay open between calls). `caches`: the server's.
    """
    target = host(args.dialect) if args.dialect != "relay" else None
    try:
        return _prepare(args, call, caches, target, on_close=on_close)
    except Exception as exc:  # relay's own failure: visible, never a silent allow
        return _failed(args, call, target, exc)


def lost_call(args: RunArgs, call: Call, reason: str) -> PreparedCall:
    """The answer to a call that relay's server accepted and did not finish (`reason`):
    its hooks may have run in part, so none runs again; relay's failure, a deny where the
    user's settings ask relay to fail closed."""
    target = host(args.dialect) if args.dialect != "relay" else None
    return _failed(args, call, target, _Failure(reason), ran="no relay hook answered")


def _prepare(
    args: RunArgs, call: Call, caches: Caches | None, target: Host | None, *, on_close: bool
) -> PreparedCall:
    cwd_option = os.path.join(call.cwd, args.cwd) if args.cwd is not None else None
    if cwd_option is not None and not os.path.isabs(cwd_option):
        raise RelayError("the working directory no longer exists: give --cwd as an absolute path")
    try:
        envelope = decode_event(
            args.event,
            call.stdin,
            cwd=os.path.abspath(cwd_option) if cwd_option else call.cwd,
            unknown_passes=target is not None,
        )
    except UnknownEventError as exc:
        return _done(Reply(1, b"", f"relay: error: EVENT: {exc}\n".encode()))
    except EventError as exc:
        if target is None:
            return _done(Reply(1, b"", f"relay: error: stdin: {exc}\n".encode()))
        raise _Failure(f"cannot read the event {target.title} sent: {exc}") from None
    if target is not None and STATUS_SOCKET_VARIABLE in call.env:
        tell_session(call.env, envelope)  # the tool it is in, a prompt waiting: its status
    # The project is found from --cwd, else the event's cwd, else the caller's (DESIGN §5).
    event_cwd = envelope.event.cwd
    if cwd_option is not None:
        start = cached_path(cwd_option)
    elif os.path.isabs(event_cwd) and os.path.isdir(event_cwd):
        start = cached_path(event_cwd)
    elif call.cwd:
        start = cached_path(call.cwd)
    else:
        raise RelayError("the working directory no longer exists: give the event a cwd")
    settings = [Path(call.cwd or "/", path) for path in args.settings]
    key: PlanKey | None = None
    turns: list[HostTurn | None] = []
    if caches is not None and target is not None and not on_close:
        # relay serve, for a host: a plan made before for the same inputs starts at once.
        turns.append(host_turn(target, envelope, call.env, call.caller))
        if turns[0] is None:
            key = plan_key(args, call, envelope, start, settings)
            kept = caches.plans.get(key) if key is not None else None
            if kept is not None:
                system = kept.system.for_call(call.env)
                system.deferred_records = []
                stands, plan = _checked_again(kept, system) if kept.asked else (True, kept.plan)
                if stands:
                    planned = system.planned_again(plan, envelope)
                else:
                    kept = None  # a project hook's trust is not what it was: planned afresh
            if kept is not None:
                caches.plans.used += 1
                return _finishing(
                    args,
                    call,
                    target,
                    system,
                    planned,
                    envelope=envelope,
                    bound=kept.bound,
                    turn=None,
                    kept=kept,
                    # The hook log is needed once the hooks have run: found while they run.
                    log=functools.partial(_keep_log, system, caches, call.env),
                )
    system = _system(
        start, settings, call.env, caches, isolate=ALL_SCOPES if target else TRUST_REQUIRED
    )
    try:
        system.initialize()
    except RelayError as exc:
        if target is None:
            return _done(Reply(1, b"", f"relay: error: {exc}\n".encode()))
        raise
    if caches is not None:
        _keep_log(system, caches, call.env)
    if not on_close:
        # relay serve: the hook log's record is made once the answer is out (`later`).
        system.deferred_records = []
    planned = system.plan(envelope.name, envelope)
    bound = system.time_bound(planned)
    kept = None
    if key is not None and caches is not None and _cacheable(key, system, planned, envelope):
        asked = system.registry.trust_asked(canonical_name(envelope.name, unknown_passes=True))
        kept = _Kept(system.for_call({}), planned.plan, bound, asked)
        caches.plans.put(key, kept)
    if turns:
        turn = turns[0]
    else:
        turn = host_turn(target, envelope, call.env, call.caller) if target is not None else None
    if turn is not None:
        # The agent channel dispatches through its own system: it registers the built-in
        # handlers, which must not reach a registry the server keeps between calls.
        channel_system = _system(start, settings, call.env, None, isolate=ALL_SCOPES)
        channel_system.initialize()
        bound += turn.prepare(channel_system)
    return _finishing(
        args,
        call,
        target,
        system,
        planned,
        envelope=envelope,
        bound=bound,
        turn=turn,
        on_close=on_close,
        kept=kept if turn is None else None,
    )


def _keep_log(system: HookSystem, caches: Caches, env: Mapping[str, str]) -> None:
    """The server's hook log, for this call's record."""
    max_events = resolve_max_events(system.settings.files, env)
    system.telemetry = caches.telemetry(log_path(env), max_events)


def _finishing(
    args: RunArgs,
    call: Call,
    target: Host | None,
    system: HookSystem,
    planned: PlannedEvent,
    *,
    envelope: EventEnvelope,
    bound: float,
    turn: HostTurn | None,
    on_close: bool = False,
    kept: _Kept | None = None,
    log: Callable[[], None] | None = None,
) -> PreparedCall:
    """The call, planned: its hooks run and its answer is rendered by `finish`. `kept`: the
    server's kept plan, whose last endings the answer is made for while the hooks run;
    `log`: gives the system its hook log, first thing while they run."""
    told: list[_Told] = []
    foreseen = None
    if kept is not None:
        from relay.engine.execution import Foreseen  # the server's: `hooks run` needs it not

        foreseen = Foreseen(kept.endings)

    def meanwhile() -> None:
        # What the answer tells besides the hooks' answers depends on the plan alone: made
        # while the hooks run rather than after them; and the answer itself, for hooks that
        # end as they did the last time.
        if log is not None:
            log()  # a lookup in the server's caches: it does not fail
        with contextlib.suppress(Exception):  # made again after the run, failing there
            told.append(_told(system, planned, envelope, target))
        if foreseen is not None and foreseen.result is not None:
            try:
                foreseen.made = _render(foreseen.result, target, told[0])
            except Exception:  # made after the run, failing there
                foreseen.result = None

    def finish() -> Reply:
        try:
            # In-process, the hook log is closed after the run and may add a warning.
            result = system.run_planned(
                planned, meanwhile=None if on_close else meanwhile, foreseen=foreseen
            )
            after = turn.run(result) if turn is not None else None
            if on_close:
                # Before rendering: a log that cannot be written is a warning to show.
                system.close(leave_open=True)
            if turn is not None:
                turn.hooks.close()
            if foreseen is not None and foreseen.taken and isinstance(foreseen.made, Reply):
                reply = foreseen.made  # `result` is the one it was rendered from
            else:
                if not told:
                    told.append(_told(system, planned, envelope, target))
                reply = _render(result, target, told[0])
            reply.sent = after
            if kept is not None and foreseen is not None:
                kept.ended(foreseen.seen)
        except Exception as exc:
            reply = _failed(args, call, target, exc).finish()
        if system.deferred_records:
            reply.later = functools.partial(_run_all, system.deferred_records)
        return reply

    return PreparedCall(bound, finish)


# ---- the server's plan cache ---------------------------------------------------------------

PlanKey = tuple[object, ...]
FOLDER_VARIABLES = (
    "RELAY_HOME",
    "HOME",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "RELAY_SYSTEM_SETTINGS",
    SETTINGS_VARIABLE,
)
"""The environment variables that choose relay's folders and settings files."""
_LONGEST_MATCHED = 1024
"""A matcher's field longer than this (a prompt, say) is not worth a plan kept for it."""


_LARGEST_ENDING = 4096
"""The most bytes of output a plan's last endings are kept with (to foresee the next run's)."""


class _Kept:
    """A plan kept for a key (`plan_key`): the system it was made in (initialized, nothing
    of its call's run), its plan (None: no hook runs), its time bound, and how its hooks
    ended the last time it ran (None: not known, or too large to keep), which the next
    run's answer is made for while its hooks run (execution.Foreseen). `asked`: the
    project hooks whose trust the plan asked (the registry's shared hook, whether it was
    trusted, the plan's copy of it): checked again on every call (`_checked_again`)."""

    __slots__ = ("asked", "bound", "endings", "plan", "system")

    def __init__(
        self,
        system: HookSystem,
        plan: Plan | None,
        bound: float,
        asked: list[tuple[RegisteredHook, RegisteredHook]],
    ) -> None:
        self.system = system
        self.plan = plan
        self.bound = bound
        self.asked = [(shared, copy.trusted, copy) for shared, copy in asked]
        self.endings: list[Ending] | None = None

    def ended(self, endings: list[Ending] | None) -> None:
        """How the plan's hooks ended this time: what the next run expects."""
        size = 0
        for ending in endings or ():
            for output in ending[4:6]:
                size += len(output) if isinstance(output, bytes) else 0
        self.endings = endings if size <= _LARGEST_ENDING else None


class PlanCache:
    """The plans a server made, by `plan_key`: a call whose key was seen has its hooks
    started without planning again. Thread-safe and bounded."""

    MAX_ENTRIES = 256

    def __init__(self) -> None:
        self._entries: dict[PlanKey, _Kept] = {}
        self._lock = threading.Lock()
        self.used = 0
        """How many calls a kept plan was used for."""

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: PlanKey) -> _Kept | None:
        """The plan kept for `key`, if any (the caller counts it in `used` if it uses it)."""
        return self._entries.get(key)

    def put(self, key: PlanKey, kept: _Kept) -> None:
        """Keep a plan for `key`."""
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = kept


def plan_key(
    args: RunArgs, call: Call, envelope: EventEnvelope, start: Path, settings: list[Path]
) -> PlanKey | None:
    """Everything a host's event's plan depends on, None when it cannot be known without
    planning: the arguments and working directory, the variables that choose relay's
    folders, the event's name and the field its matchers read, the folder its project is
    searched from, and the stats of that search and of every settings file looked for
    (discovery.settings_witness: a file's identity stands for its bytes, one changed
    within the racy window stands for nothing). What else a plan reads (a project hook's
    trust, its scripts) is not in the key: a kept plan with project hooks has their trust
    checked again on each call (`_checked_again`)."""
    witness = settings_witness(start, settings, env=call.env)
    if witness is None:
        return None
    name = matcher_field(envelope.name)
    matched = envelope.field(name) if name is not None else None
    if matched is not None and not (isinstance(matched, str) and len(matched) <= _LONGEST_MATCHED):
        return None
    env = call.env
    return (
        args.dialect,
        args.event,
        tuple(args.settings),
        args.cwd,
        call.cwd,
        envelope.name,
        matched,
        start,
        tuple(env.get(variable) for variable in FOLDER_VARIABLES),
        witness,
    )


def _cacheable(
    key: PlanKey, system: HookSystem, planned: PlannedEvent, envelope: EventEnvelope
) -> bool:
    """Whether the plan made for `key` is the plan every call with that key gets: made from
    the very files the key's stats stand for, and running command hooks alone (a Python
    hook is this process's own). A project hook's trust is not in the key: a kept plan
    with project hooks has it checked again on each call (`_checked_again`)."""
    settings = system.settings
    if settings.witness != key[-1] or settings.broken or envelope.name == "SessionStart":
        return False  # a session's start tells of every untrusted project hook
    if planned.result is not None:
        return not planned.result.untrusted
    plan = planned.plan
    return (
        plan is not None
        and bool(plan.hooks)
        and not plan.untrusted
        and not plan.broken
        and all(hook.handler is None for hook in plan.hooks)
    )


def _checked_again(kept: _Kept, system: HookSystem) -> tuple[bool, Plan | None]:
    """The kept plan for this call: each project hook whose trust it asked checked again
    in this call's registry view (relay.engine.registry keeps what a check found while
    every look it made at the filesystem gives the same answer, and reads the scripts a
    trusted hook runs anew), and the plan's copies replaced by this call's, which hold
    the scripts' bytes just checked. (False, None) when one's answer is not what it was:
    the plan would come out otherwise (its matching, order and dedup depend on nothing
    else the key does not hold)."""
    registry = system.registry
    copies: dict[int, RegisteredHook] = {}
    for shared, trusted, copy in kept.asked:
        fresh = registry.checked(shared)
        if fresh.trusted != trusted:
            return False, None
        copies[id(copy)] = fresh
    plan = kept.plan
    if plan is None:
        return True, None
    hooks = [copies.get(id(hook), hook) for hook in plan.hooks]
    return True, msgspec.structs.replace(plan, hooks=hooks)


def _run_all(calls: list[Callable[[], None]]) -> None:
    for call in calls:
        call()


def _system(
    start: Path,
    settings: list[Path],
    env: Mapping[str, str],
    caches: Caches | None,
    *,
    isolate: frozenset[str],
) -> HookSystem:
    if caches is None:
        return HookSystem(cwd=start, settings=settings, quiet=True, environ=env, isolate=isolate)
    return HookSystem(
        cwd=start,
        settings=settings,
        quiet=True,
        environ=env,
        isolate=isolate,
        settings_cache=caches.settings,
        digests=caches.digests,
        trust=caches.trust_store(state_file("trust.json", env)),
        telemetry=False,
        registries=caches.registries,
    )


class _Told:
    """What an answer tells the user besides the hooks' answers: notices for the host's
    message, the deny of a broken failClosed file, warnings for stderr. Made from the plan
    alone, so while the hooks run (see `_prepare`)."""

    __slots__ = ("guard", "notices", "warnings")

    def __init__(self, notices: list[str], guard: str | None, warnings: list[str]) -> None:
        self.notices = notices
        self.guard = guard
        self.warnings = warnings


def _told(
    system: HookSystem, planned: PlannedEvent, envelope: EventEnvelope, target: Host | None
) -> _Told:
    untrusted = _untrusted(system, planned, envelope)
    # The warnings for the user's stderr name a project's hooks: made visible.
    warnings = [visible(line) for line in system.warnings(untrusted=untrusted)]
    if target is None:
        return _Told([], None, warnings)
    notices = _notices(system, planned, untrusted, envelope, target)
    return _Told(notices, _broken_guard(system.settings.broken, envelope, target), warnings)


def _render(result: AggregatedResult, target: Host | None, told: _Told) -> Reply:
    if target is None:
        lines = [f"relay: warning: {warning}\n" for warning in told.warnings]
        stdout = _encoder.encode(result) + b"\n"
        return Reply(0, stdout, "".join(lines).encode())
    if told.notices:
        result.systemMessage = "\n".join([*filter(None, [result.systemMessage]), *told.notices])
    if told.guard is not None:
        result.decision, result.reason = "deny", told.guard
    answer = target.render(result)
    stdout = b"" if answer.stdout is None else _encoder.encode(answer.stdout) + b"\n"
    stderr = f"{answer.stderr}\n" if answer.stderr else ""
    if answer.exit_code == 0:
        # On exit 2 the host shows stderr to the model: keep it to the reason alone.
        stderr += "".join(f"relay: warning: {warning}\n" for warning in told.warnings)
    return Reply(answer.exit_code, stdout, stderr.encode())


def _untrusted(system: HookSystem, planned: PlannedEvent, envelope: EventEnvelope) -> list[str]:
    """The untrusted project hooks to tell the user about: those this event would have run,
    and at the start of a session, all of them."""
    if envelope.name == "SessionStart":
        return sorted({hook.name for hook in system.registry.untrusted})
    return planned.untrusted


def _notices(
    system: HookSystem,
    planned: PlannedEvent,
    untrusted: list[str],
    envelope: EventEnvelope,
    target: Host,
) -> list[str]:
    """What relay skipped, for the user: broken settings files and hook entries that
    concern this event (or all of them, at session start) and the untrusted project hooks
    (`_untrusted`)."""
    names = (envelope.name, target.wire(envelope.name))
    notices = [
        f"relay: {broken.error} — the hooks in this file did not run; fix it "
        f"(`relay hooks validate`)"
        for broken in system.settings.broken
        if envelope.name == "SessionStart" or broken.mentions(*names)
    ]
    if envelope.name == "SessionStart":
        broken_hooks = [hook for _, hook in system.settings.broken_hooks]
    else:
        broken_hooks = [hook.broken for hook in planned.plan.broken] if planned.plan else []
    notices.extend(f"relay: {hook.describe()} (`relay hooks validate`)" for hook in broken_hooks)
    root = system.settings.root or system.project_dir
    refused = system.registry.refused_names()
    if cannot := [name for name in untrusted if name in refused]:
        notices.append(
            f"relay: skipped {len(cannot)} project hook(s) relay cannot trust as written: "
            f"{', '.join(cannot)}. `relay trust` in {root} says why and how to pin them"
        )
    if untrusted := [name for name in untrusted if name not in refused]:
        notices.append(
            f"relay: skipped {len(untrusted)} project hook(s) not trusted (new, or changed "
            f"since trusted): {', '.join(untrusted)}. Review them, then run `relay trust` "
            f"in {root}"
        )
    return notices


def _broken_guard(
    broken: list[BrokenSettings], envelope: EventEnvelope, target: Host
) -> str | None:
    """The deny reason when a file that cannot be read declares failClosed hooks for this
    event: they were meant to block when they cannot run, so relay blocks."""
    wire = target.wire(envelope.name)
    if wire not in target.gate_events:
        return None
    for file in broken:
        if file.mentions(envelope.name, wire) and _FAIL_CLOSED.search(file.text):
            return (
                f"relay: {file.file} declares failClosed hooks for {wire} but cannot be "
                f"read ({file.error.message}); denied until it is fixed"
            )
    return None


class _Failure(Exception):
    """relay could not answer a host's call; the message says why."""


def _failed(
    args: RunArgs,
    call: Call,
    target: Host | None,
    exc: Exception,
    *,
    ran: str = "no relay hook ran",
) -> PreparedCall:
    if isinstance(exc, _Failure | RelayError):
        message = str(exc)
    else:
        message = f"internal error: {type(exc).__name__}: {exc} (please report this)"
    if target is None:
        code = 1 if isinstance(exc, RelayError | _Failure) else 3
        return _done(Reply(code, b"", f"relay: error: {message}\n".encode()))
    result = AggregatedResult(
        hook_event_name=_canonical_or_raw(args.event),
        systemMessage=f"relay: {message}; {ran} for this {args.event}",
    )
    if target.wire(result.hook_event_name) in target.gate_events and _asks_fail_closed(args, call):
        result.decision = "deny"
        result.reason = f"relay failed ({message}) and your settings ask it to fail closed"
    answer = target.render(result)
    stdout = b"" if answer.stdout is None else _encoder.encode(answer.stdout) + b"\n"
    stderr = f"{answer.stderr}\n" if answer.stderr else f"relay: {message}\n"
    return _done(Reply(answer.exit_code, stdout, stderr.encode()))


def _canonical_or_raw(event: str) -> str:
    from relay.protocol.dialects import canonical_name

    try:
        return canonical_name(event, unknown_passes=True)
    except UnknownEventError:
        return event


def _asks_fail_closed(args: RunArgs, call: Call) -> bool:
    """Whether the user's own settings declare failClosed (read as text: parsing them may be
    what failed)."""
    env = call.env
    files = [
        system_settings_path(env),
        relay_home(env) / "settings.json",
        *settings_from_environment(env),
        *(Path(call.cwd, path) for path in args.settings),
    ]
    for path in files:
        try:
            if _FAIL_CLOSED.search(path.read_bytes()[: 1 << 20]):
                return True
        except OSError:
            continue
    return False


def _done(reply: Reply) -> PreparedCall:
    return PreparedCall(0.0, lambda: reply)

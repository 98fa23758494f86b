"""Claude Code: its hook events and how it reads a hook's answer (checked against 2.1.332).

`OUTPUT_FIELDS` and `SPECIFIC_FIELDS` are the answer fields Claude Code reads, as its own
schema of a hook's output names them; `bundle_names` reads that schema, and the event list,
out of the installed Claude Code, so that `relay doctor` and the tests notice the day a
release adds one relay does not know (`unknown_names`).
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import msgspec

from relay.config.paths import cache_dir
from relay.hosts.code_cache import read_cached
from relay.hosts.model import Host

EVENTS: tuple[str, ...] = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "PermissionRequest",
    "PermissionDenied",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "Notification",
    "MessageDisplay",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "PreModelSwitch",
    "PostModelSwitch",
    "SessionStart",
    "SessionEnd",
    "Setup",
    "ConfigChange",
    "InstructionsLoaded",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "FileChanged",
    "CwdChanged",
    "DirectoryAdded",
    "WorktreeCreate",
    "WorktreeRemove",
    "PreSkillShellCommand",
)

OUTPUT_FIELDS: frozenset[str] = frozenset(
    {
        "continue",
        "suppressOutput",
        "stopReason",
        "decision",
        "reason",
        "systemMessage",
        "terminalSequence",
        "hookSpecificOutput",
    }
)
"""The top-level fields of a hook's answer that Claude Code reads (on every event)."""

SPECIFIC_FIELDS: dict[str, frozenset[str]] = {
    "PreToolUse": frozenset(
        {
            "permissionDecision",
            "permissionDecisionReason",
            "updatedInput",
            "additionalContext",
            "permissionDisplay",  # Claude's desktop app only; passed on as a hook gave it
        }
    ),
    "UserPromptSubmit": frozenset({"additionalContext", "sessionTitle", "suppressOriginalPrompt"}),
    "UserPromptExpansion": frozenset({"additionalContext", "suppressOriginalPrompt"}),
    "SessionStart": frozenset(
        {"additionalContext", "initialUserMessage", "sessionTitle", "watchPaths", "reloadSkills"}
    ),
    "Setup": frozenset({"additionalContext"}),
    "PreModelSwitch": frozenset({"permissionDecision", "permissionDecisionReason"}),
    "PreSkillShellCommand": frozenset(
        {"permissionDecision", "permissionDecisionReason", "updatedInput"}
    ),
    "PostModelSwitch": frozenset({"additionalContext"}),
    "SubagentStart": frozenset({"additionalContext"}),
    "PostToolUse": frozenset(
        {"additionalContext", "classifierContext", "updatedToolOutput", "updatedMCPToolOutput"}
    ),
    "PostToolUseFailure": frozenset({"additionalContext"}),
    "PostToolBatch": frozenset({"additionalContext"}),
    "Stop": frozenset({"additionalContext"}),
    "SubagentStop": frozenset({"additionalContext"}),
    "PermissionDenied": frozenset({"retry"}),
    "Notification": frozenset({"additionalContext"}),
    "PermissionRequest": frozenset({"decision"}),
    "Elicitation": frozenset({"action", "content"}),
    "ElicitationResult": frozenset({"action", "content"}),
    "CwdChanged": frozenset({"watchPaths"}),
    "FileChanged": frozenset({"watchPaths"}),
    "WorktreeCreate": frozenset({"worktreePath"}),
    "MessageDisplay": frozenset({"displayContent"}),
}
"""Per event, the `hookSpecificOutput` fields Claude Code reads there (besides
`hookEventName`, which must name the event). relay passes each on as the hooks gave it,
merged across hooks as relay.protocol.dialects.merge_specific_field says."""

HOST = Host(
    name="claude",
    title="Claude Code",
    dialect="claude",
    version="2.1.332",
    events=EVENTS,
    executable="claude",
    config_dir=".claude",
    config_dir_env="CLAUDE_CONFIG_DIR",
    local_file="settings.local.json",
    context_events=frozenset(
        event for event, fields in SPECIFIC_FIELDS.items() if "additionalContext" in fields
    ),
    # PreSkillShellCommand reads a deny, ask or defer as "do not run the skill's command"
    # and a rewrite as a refusal too (Claude Code cannot change a skill's command).
    permission_events=frozenset({"PreToolUse", "PreModelSwitch", "PreSkillShellCommand"}),
    event_permission_values={"PreModelSwitch": frozenset({"allow", "deny", "ask"})},
    # An allow skips Claude Code's permission prompt and rules: for a hook's allow only. A
    # rewrite alone (`updatedInput`, no decision) is applied and then checked by them.
    allow_means="approve",
    behavior_events=frozenset({"PermissionRequest"}),
    # A block here carries the rest of the answer (suppressOriginalPrompt, context), which
    # an exit 2 would lose.
    block_events=frozenset(
        {
            "UserPromptSubmit",
            "UserPromptExpansion",
            "PostToolUse",
            "PostToolUseFailure",
            "Stop",
            "SubagentStop",
        }
    ),
    gate_events=frozenset(
        {
            "PreToolUse",
            "PermissionRequest",
            "UserPromptSubmit",
            "UserPromptExpansion",
            "PreModelSwitch",
            "PreSkillShellCommand",
        }
    ),
    terminal_sequences=True,
)


# --- what the installed Claude Code names ----------------------------------------------------


class BundleNames(msgspec.Struct, frozen=True, kw_only=True):
    """The hook events and answer fields that a Claude Code build names in its own code."""

    events: tuple[str, ...]
    """Its list of hook events."""
    output_fields: tuple[str, ...]
    """The top-level fields of its schema of a hook's answer."""
    specific_fields: dict[str, tuple[str, ...]]
    """Per event, the `hookSpecificOutput` fields of that schema (`hookEventName` left out)."""


class BundleError(Exception):
    """The host's code cannot be read, or does not hold what relay looks for in it."""


_CLI_FILES = ("cli.js", "cli.mjs", "cli.cjs")
_BUNDLE_SCAN_LIMIT = 1 << 30
"""A file bigger than 1 GiB is not read."""
_NAME = re.compile(rb'"[A-Z][A-Za-z0-9]{1,63}"')
_TOKEN = re.compile(
    rb'"(?:\\.|[^"\\\n])*"'
    rb"|'(?:\\.|[^'\\\n])*'"
    rb"|`(?:\\.|[^`\\])*`"
    rb"|[{}()\[\],:]"
    rb"|[A-Za-z_$][\w$]*"
    rb"|[^\s{}()\[\],:\"'`A-Za-z_$]+"
)
"""JavaScript, coarsely: strings (quoted and template), brackets, commas, colons, words."""
_MAX_OCCURRENCES = 2000
_OBJECT_LIMIT = 64 * 1024
"""The longest object literal read (Claude Code's output schema is about 8 KiB)."""


def bundle_files(executable: Path) -> list[Path]:
    """The files that hold Claude Code's code: the native binary (2.1.x), or the npm
    package's cli.js of the older builds."""
    real = executable.resolve()
    package = next((p for p in real.parents if (p / "package.json").is_file()), None)
    candidates = [real]
    if package is not None:
        candidates += [package / folder / name for folder in ("", "dist") for name in _CLI_FILES]
        candidates += sorted(package.parent.glob(package.name + "-*/claude"))
    seen: list[Path] = []
    for path in candidates:
        if path.is_file() and path not in seen:
            seen.append(path)
    return seen


def bundle_names(executable: Path, cache: Path | None = None) -> BundleNames:
    """What the Claude Code at `executable` names, read from its own code; with `cache`, kept
    in that JSON file per code file (path, size, modification time), as reading a 400 MB
    build takes seconds. Raises BundleError when nothing can be read from it."""
    problems: list[str] = []
    for path in bundle_files(executable):
        try:
            return _cached(path, cache)
        except BundleError as exc:
            problems.append(f"{path}: {exc}")
    raise BundleError("; ".join(problems) or f"{executable}: no Claude Code code found")


def _cached(path: Path, cache: Path | None) -> BundleNames:
    try:
        return read_cached(path, cache, read_bundle, BundleNames)
    except OSError as exc:
        raise BundleError(f"cannot read it: {exc.strerror or exc}") from None


def read_bundle(path: Path) -> BundleNames:
    """The events and answer fields named in one file of Claude Code's code."""
    try:
        with path.open("rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            if not size:
                raise BundleError("empty file")
            if size > _BUNDLE_SCAN_LIMIT:
                raise BundleError(f"{size} bytes: too big to read")
            with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _read_names(data)
    except OSError as exc:
        raise BundleError(f"cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:  # mmap of a file that is not a regular file
        raise BundleError(f"cannot read it: {exc}") from None


class _Budget:
    """How many more tokens of object literals may be read from one file: the bound keeps
    odd code (a million braces) from making the reading slow."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def spend(self) -> None:
        self.tokens -= 1
        if self.tokens < 0:
            raise BundleError("too much of it looks like the code relay reads; gave up reading")


_TOKEN_BUDGET = 300_000
"""Tokens read in object literals per file (Claude Code 2.1.332's code takes about 6,000)."""


def _read_names(data: mmap.mmap) -> BundleNames:
    events = _event_list(data)
    if not events:
        raise BundleError("no list of hook events found in it")
    budget = _Budget(_TOKEN_BUDGET)
    output_fields = _output_fields(data, budget)
    if not output_fields:
        raise BundleError("no schema of a hook's answer found in it")
    specific: dict[str, set[str]] = {}
    for event, fields in _specific_schemas(data, budget):
        if event in events:
            specific.setdefault(event, set()).update(fields)
    return BundleNames(
        events=tuple(events),
        output_fields=tuple(sorted(output_fields)),
        specific_fields={event: tuple(sorted(fields)) for event, fields in specific.items()},
    )


def _event_list(data: mmap.mmap) -> list[str]:
    """Every name of the arrays of quoted event names that hold SessionStart, PreToolUse and
    Stop (the lists of all hook events), in the order first seen."""
    found: dict[str, None] = {}
    for at in _occurrences(data, b'"SessionStart"'):
        start = data.rfind(b"[", max(0, at - 4096), at)
        end = data.find(b"]", at, at + 4096)
        if start < 0 or end < 0:
            continue
        items = [item.strip() for item in data[start + 1 : end].split(b",")]
        if not all(_NAME.fullmatch(item) for item in items):
            continue
        names = [item[1:-1].decode() for item in items]
        if {"SessionStart", "PreToolUse", "Stop"} <= set(names):
            found.update(dict.fromkeys(names))
    return list(found)


def _output_fields(data: mmap.mmap, budget: _Budget) -> set[str]:
    """The keys of the schema objects whose `hookSpecificOutput` key is a schema (a call,
    as `z.union([...])`), found around each `hookSpecificOutput:` in the code."""
    fields: set[str] = set()
    for at in _occurrences(data, b"hookSpecificOutput:"):
        start = at
        for _ in range(64):
            start = data.rfind(b"{", max(0, at - 16_384), start)
            if start < 0:
                break
            read = _object_keys(data, start, budget)
            if read is None or read[1] <= at:
                continue
            keys = dict(read[0])
            if (
                keys.get("hookSpecificOutput") == "call"
                and sum(kind == "call" for kind in keys.values()) >= len(keys) - 1
            ):
                fields.update(keys)
            break
    return fields


def _specific_schemas(data: mmap.mmap, budget: _Budget) -> Iterator[tuple[str, set[str]]]:
    """(event, fields) of each schema object `{hookEventName: z.literal("Event"), …}`."""
    for at in _occurrences(data, b"{hookEventName:"):
        read = _object_keys(data, at, budget)
        if read is None:
            continue
        keys = dict(read[0])
        literal = re.match(rb'[\w$.]+\(\s*"([A-Z][A-Za-z0-9]{1,63})"\s*\)', data[at + 15 : at + 96])
        if literal is None or keys.get("hookEventName") != "call":
            continue
        yield literal.group(1).decode(), {key for key in keys if key != "hookEventName"}


def _occurrences(data: mmap.mmap, needle: bytes) -> Iterator[int]:
    """Where `needle` is, the first _MAX_OCCURRENCES times (Claude Code's code has fewer than
    100 of each: the bound keeps odd code from making the reading slow)."""
    at = data.find(needle)
    for _ in range(_MAX_OCCURRENCES):
        if at < 0:
            return
        yield at
        at = data.find(needle, at + 1)


def _object_keys(
    data: mmap.mmap, start: int, budget: _Budget
) -> tuple[list[tuple[str, str]], int] | None:
    """The keys of the object literal opening at `start`, each with the kind of its value
    ("call" when it begins with a name followed by `(` or `.`, else "value"), and where the
    object ends; None when no object literal ends within reach."""
    depth = 0
    keys: list[tuple[str, str]] = []
    expect_key = False
    key: bytes | None = None
    value: list[bytes] = []
    for match in _TOKEN.finditer(data, start, min(len(data), start + _OBJECT_LIMIT)):
        budget.spend()
        token = match.group()
        first = token[:1]
        if depth == 1 and key is not None and len(value) < 3 and first not in b",}":
            value.append(token)
        if first in b"{([":
            if depth == 0 and token != b"{":
                return None
            depth += 1
            expect_key = depth == 1
            continue
        if first in b"})]":
            depth -= 1
            if depth == 0:
                _end_key(keys, key, value)
                return keys, match.end()
            continue
        if depth != 1:
            continue
        if token == b",":
            _end_key(keys, key, value)
            key, value, expect_key = None, [], True
        elif expect_key:
            key, value, expect_key = token, [], False
        elif token == b":" and key is not None and not value:
            value = [b":"]
    return None


def _end_key(keys: list[tuple[str, str]], key: bytes | None, value: list[bytes]) -> None:
    if key is None or not value or value[0] != b":":
        return  # a shorthand property or a spread: no key of a schema
    name = key.strip(b"\"'").decode("utf-8", "replace")
    rest = value[1:]
    call = len(rest) == 2 and re.fullmatch(rb"[A-Za-z_$][\w$]*", rest[0]) and rest[1] in b"(."
    kind = "call" if call else "value"
    keys.append((name, kind))


def unknown_names(names: BundleNames) -> list[str]:
    """What the host names that relay's table for it does not know, one item each:
    `event X`, `field X`, `field Event.X` (hookSpecificOutput)."""
    unknown = [f"event {event}" for event in names.events if event not in EVENTS]
    unknown += [f"field {field}" for field in names.output_fields if field not in OUTPUT_FIELDS]
    for event, fields in names.specific_fields.items():
        known = SPECIFIC_FIELDS.get(event, frozenset())
        unknown += [f"field {event}.{field}" for field in fields if field not in known]
    return unknown


def bundle_cache(env: Mapping[str, str] | None = None) -> Path:
    """Where what was read from host code is kept (relay's cache folder)."""
    return cache_dir(env) / "host-code.json"

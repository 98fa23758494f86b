"""Read one settings.json: decode, validate with file:line errors, collect warnings (DESIGN §5).

One reader walks the document and collects every error: `check_settings` reports them all
(`relay hooks validate`), `parse_settings` raises the first.
"""

from __future__ import annotations

import bisect
import copy
import functools
import math
import re
import signal
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from relay.config.matcher import matcher_problem
from relay.config.model import (
    MILLISECOND_SUSPECT,
    TRUST_REQUIRED,
    USER_ONLY,
    BrokenHook,
    ConfigWarning,
    HookEntry,
    HookGroup,
    LoadedSettings,
    Scope,
    Settings,
)
from relay.errors import SettingsError
from relay.protocol.decoding import json_type_name, split_validation_error
from relay.protocol.dialects import EVENT_NAME, known_event_names

Segment = str | int
FieldPath = tuple[Segment, ...]
"""Where a value sits in a settings file: keys and list indexes from the top."""

MAX_SETTINGS_BYTES = 4 * 1024 * 1024
"""A settings file larger than this is refused unread (a hostile project file must not
cost every event seconds and gigabytes)."""
MAX_HOOKS = 1000
"""At most this many hook entries and patterns in one settings file."""

BUILTIN_NAMESPACES: frozenset[str] = frozenset({"relay", "memory"})
IGNORED_TOP_LEVEL_KEYS: frozenset[str] = frozenset({"$schema"})

_NAMESPACE = re.compile(r"[a-z][a-z0-9_-]*")
_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_SIGNAL_NAMES: frozenset[str] = frozenset(signal.Signals.__members__)
_UTF8_BOM = b"\xef\xbb\xbf"
_BYTE_OFFSET = re.compile(r"\s*\(byte (\d+)\)$")
_TYPE_WORDS = {
    "float": "number",
    "int": "integer",
    "str": "string",
    "bool": "boolean",
    "object": "object",
    "array": "array",
    "null": "null",
}
_SKIP: Any = object()
"""Returned for a hook entry that is dropped with a warning (a non-command `type`)."""
_INVALID: Any = object()
"""Returned for a node with an error (already recorded): its parents are invalid too, and
report nothing more about it, so one mistake is one error."""
_EMPTY: Any = object()
"""What decode_document returns for an empty or blank file (an empty object, not `null`)."""


class SettingsReport(msgspec.Struct, kw_only=True):
    """Every error and warning of one settings file, and its Settings when it has no error."""

    file: str
    scope: Scope
    errors: list[SettingsError] = msgspec.field(default_factory=list)
    warnings: list[ConfigWarning] = msgspec.field(default_factory=list)
    settings: Settings | None = None
    """None when the file has an error."""
    usable: Settings | None = None
    """What relay uses of the file: its settings without its broken hooks (`broken`) when
    every error is inside a hook entry, group, event or pattern; None when an error
    concerns the whole file (bad JSON, a bad `hooksConfig`, …) and nothing of it is used."""
    broken: list[BrokenHook] = msgspec.field(default_factory=list)
    """The hooks left out of `usable` because of their errors."""

    @property
    def ok(self) -> bool:
        """Whether the file has no error (warnings are fine)."""
        return not self.errors


def parse_settings(data: bytes, *, file: str, scope: Scope) -> LoadedSettings:
    """Decode and validate the bytes of one settings file; raise SettingsError (its first
    error) if it has any."""
    report = check_settings(data, file=file, scope=scope)
    if report.settings is None:
        raise report.errors[0]
    return LoadedSettings(
        file=file, scope=scope, settings=report.settings, warnings=report.warnings
    )


def usable_settings(data: bytes, *, file: str, scope: Scope) -> LoadedSettings:
    """What relay runs of one settings file: decoded and validated, its broken hooks left
    out (and listed); raise SettingsError only if nothing of it can be used."""
    report = check_settings(data, file=file, scope=scope)
    if report.usable is None:
        raise report.errors[0]
    return LoadedSettings(
        file=file,
        scope=scope,
        settings=report.usable,
        warnings=report.warnings,
        broken=report.broken,
    )


def check_settings(data: bytes, *, file: str, scope: Scope) -> SettingsReport:
    """Decode and validate the bytes of one settings file, collecting every error and warning."""
    try:
        if len(data) > MAX_SETTINGS_BYTES:
            limit = f"{MAX_SETTINGS_BYTES // (1024 * 1024)} MiB"
            raise SettingsError(f"settings file is larger than {limit}; not read", file=file)
        text, document = decode_document(data, file=file)
        if document is not _EMPTY:
            _check_hook_count(document, file)
    except SettingsError as exc:
        # Malformed JSON stops here: nothing after the first syntax error can be trusted.
        return SettingsReport(file=file, scope=scope, errors=[exc])
    if document is _EMPTY:
        return SettingsReport(file=file, scope=scope, settings=Settings(), usable=Settings())
    reader = _SettingsReader(text, file)
    settings = reader.convert(document, Settings, ())
    if scope in TRUST_REQUIRED:
        reader.check_user_only(document)
    report = SettingsReport(file=file, scope=scope, errors=reader.errors, warnings=reader.warnings)
    if not reader.errors:
        report.settings = report.usable = settings
    else:
        report.usable, report.broken = _without_broken_hooks(document, reader)
    return report


def _without_broken_hooks(
    document: Any, reader: _SettingsReader
) -> tuple[Settings | None, list[BrokenHook]]:
    """The settings of a file with errors, its broken hooks left out, and those hooks; (None,
    []) when some error is outside every hook (then nothing of the file can be relied on).

    One bad field must not switch off a file's other hooks (a guard stopped by a typo in
    another hook), so an error in a hook entry takes out that entry, one in a group's own
    fields (its matcher) the group, one in an event's list the event."""
    units: dict[FieldPath, list[SettingsError]] = {}
    for error, place in zip(reader.errors, reader.places, strict=True):
        unit = _hook_unit(place)
        if unit is None:
            return None, []
        units.setdefault(unit, []).append(error)
    # A unit inside another broken one is part of it.
    for unit in sorted(units, key=len):
        for depth in range(2, len(unit)):
            outer = units.get(unit[:depth])
            if outer is not None:
                outer.extend(units.pop(unit))
                break
    pruned = copy.deepcopy(document)
    for unit in sorted(units, key=_deletion_order, reverse=True):
        parent = pruned
        for segment in unit[:-1]:
            parent = parent[segment]
        del parent[unit[-1]]
    again = _SettingsReader("", reader.file)
    settings = again.convert(pruned, Settings, ())
    if again.errors:  # cannot happen: what had an error was left out; refuse rather than guess
        return None, []
    broken = [hook for unit, errors in units.items() for hook in _broken(document, unit, errors)]
    return settings, broken


def _hook_unit(path: FieldPath) -> FieldPath | None:
    """The hook entry, group, event or pattern that an error found at `path` takes out; None
    when the error concerns the file as a whole."""
    if len(path) >= 2 and path[0] == "patterns":
        return path[:2]
    if len(path) < 2 or path[0] != "hooks" or not isinstance(path[1], str):
        return None
    if (
        len(path) >= 5
        and isinstance(path[2], int)
        and path[3] == "hooks"
        and isinstance(path[4], int)
    ):
        return path[:5]
    if len(path) >= 3 and isinstance(path[2], int):
        return path[:3]
    return path[:2]


def _deletion_order(unit: FieldPath) -> tuple[object, ...]:
    # Deeper first, and later list items before earlier ones, so indexes stay right.
    return (
        len(unit),
        *((0, segment) if isinstance(segment, int) else (1, segment) for segment in unit),
    )


def _broken(document: Any, unit: FieldPath, errors: list[SettingsError]) -> list[BrokenHook]:
    """The hooks a broken unit stands for: an entry, each entry of a group, or the whole of
    an event's value or a pattern."""
    value = document
    for segment in unit:
        value = value[segment]
    place = render_path(unit)
    if unit[0] == "patterns":
        name = str(unit[1])
        matcher = name if validate_matcher(name) is None else None
        return [
            _broken_hook("PatternMatch", matcher, value, place, errors, default_name=f"@{name}")
        ]
    event = str(unit[1])
    if len(unit) == 5:
        group = document["hooks"][event][unit[2]]
        matcher = group.get("matcher") if isinstance(group.get("matcher"), str) else None
        return [_broken_hook(event, matcher, value, place, errors)]
    if len(unit) == 3 and isinstance(value, dict):
        written = value.get("matcher")
        matcher = written if isinstance(written, str) and not validate_matcher(written) else None
        entries = value.get("hooks")
        if isinstance(entries, list) and entries:
            return [
                _broken_hook(event, matcher, entry, f"{place}.hooks[{index}]", errors)
                for index, entry in enumerate(entries)
            ]
        return [_broken_hook(event, matcher, value, place, errors)]
    return [_broken_hook(event, None, value, place, errors)]


def _broken_hook(
    event: str,
    matcher: str | None,
    value: Any,
    place: str,
    errors: list[SettingsError],
    *,
    default_name: str | None = None,
) -> BrokenHook:
    entry = value if isinstance(value, dict) else {}
    written = entry.get("command")
    command = written if isinstance(written, str) else ""
    args = entry.get("args")
    if command and isinstance(args, list) and all(isinstance(arg, str) for arg in args):
        command = " ".join([command, *args])
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        name = command or default_name or place
    return BrokenHook(
        event=event,
        matcher=matcher,
        name=name,
        command=command,
        place=place,
        fail_closed=_asks_fail_closed(value),
        enabled=entry.get("enabled") is not False,
        errors=errors,
    )


def _asks_fail_closed(value: Any) -> bool:
    """Whether a hook (or anything holding hooks) asks to fail closed: `"failClosed"` set to
    true or to a value that means it (`"true"`, 1), so a typo in the value still blocks."""
    if isinstance(value, list):
        return any(_asks_fail_closed(item) for item in value)
    if not isinstance(value, dict):
        return False
    flag = value.get("failClosed")
    if flag is True or (isinstance(flag, int | float) and not isinstance(flag, bool) and flag):
        return True
    if isinstance(flag, str) and flag.strip().lower() in ("true", "yes", "1", "on"):
        return True
    return any(_asks_fail_closed(item) for item in value.values() if isinstance(item, dict | list))


def load_settings_file(path: Path, scope: Scope) -> LoadedSettings:
    """Read and validate one settings file; raise SettingsError if it cannot be read or used."""
    return parse_settings(read_settings_bytes(path), file=str(path), scope=scope)


def check_settings_file(path: Path, scope: Scope) -> SettingsReport:
    """Read and validate one settings file, collecting every error and warning."""
    try:
        data = read_settings_bytes(path)
    except SettingsError as exc:
        return SettingsReport(file=str(path), scope=scope, errors=[exc])
    return check_settings(data, file=str(path), scope=scope)


def decode_document(data: bytes, *, file: str) -> tuple[str, Any]:
    """The text (byte-order mark removed) and decoded JSON value of a file's bytes; raise
    SettingsError with line and column if they are not UTF-8 JSON. An empty or blank file
    decodes to the EMPTY marker."""
    data = strip_bom(data)
    # msgspec does not check the UTF-8 inside strings; the position scanner needs text too.
    text = decode_text(data, file=file)
    if not text.strip():
        return text, _EMPTY
    try:
        return text, msgspec.json.decode(data)
    except msgspec.ValidationError as exc:  # a value msgspec cannot hold, e.g. 1e400
        message, _ = split_validation_error(exc)
        raise SettingsError(f"invalid JSON: {message}", file=file) from None
    except msgspec.DecodeError as exc:
        raise _malformed(exc, data, file) from None
    except RecursionError:
        raise SettingsError("invalid JSON: nested too deeply", file=file) from None


def strip_bom(data: bytes) -> bytes:
    """The bytes without a UTF-8 byte-order mark at the start."""
    return data[len(_UTF8_BOM) :] if data.startswith(_UTF8_BOM) else data


def decode_text(data: bytes, *, file: str) -> str:
    """The bytes as UTF-8 text; raise SettingsError with line and column if they are not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_column(data, exc.start)
        raise SettingsError("not valid UTF-8", file=file, line=line, column=column) from None


def locate(text: str, path: FieldPath) -> tuple[int | None, int | None]:
    """1-based line and column of the value at `path` (a member's key) in a valid JSON text,
    or of its nearest ancestor that is there."""
    return _JsonPositions(text).locate(path) or (None, None)


def suggest_name(name: str, known: list[str]) -> str | None:
    """The known name that `name` is probably a misspelling of, if any."""
    return _suggest(name, known)


def is_empty_document(document: Any) -> bool:
    """Whether decode_document found an empty or blank file."""
    return document is _EMPTY


def read_settings_bytes(path: Path) -> bytes:
    """The file's bytes, at most one past the cap (the check refuses that many)."""
    try:
        with path.open("rb") as stream:
            return stream.read(MAX_SETTINGS_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SettingsError(f"cannot read settings file: {reason}", file=str(path)) from None


def _check_hook_count(document: Any, file: str) -> None:
    """Refuse a file with more than MAX_HOOKS hook entries and patterns (counted on the raw
    document, before any validation work is spent on them)."""
    if not isinstance(document, dict):
        return
    count = 0
    events = document.get("hooks")
    if isinstance(events, dict):
        for groups in events.values():
            for group in groups if isinstance(groups, list) else ():
                entries = group.get("hooks") if isinstance(group, dict) else None
                count += len(entries) if isinstance(entries, list) else 0
    patterns = document.get("patterns")
    count += len(patterns) if isinstance(patterns, dict) else 0
    if count > MAX_HOOKS:
        raise SettingsError(
            f"too many hooks: {count} hook entries and patterns (the limit is {MAX_HOOKS})",
            file=file,
        )


def validate_matcher(matcher: str) -> str | None:
    """Why a matcher cannot be used, or None when it is fine."""
    return matcher_problem(matcher)


def render_path(path: FieldPath) -> str:
    """`hooks.BeforeTool[0].hooks[1].timeout` for the given keys and indexes."""
    text = ""
    for segment in path:
        if isinstance(segment, int):
            text += f"[{segment}]"
        elif _PLAIN_KEY.fullmatch(segment):
            text += f".{segment}" if text else segment
        else:
            text += "[" + msgspec.json.encode(segment).decode() + "]"
    return text


class _SettingsReader:
    """Converts a decoded settings document to Structs, one node at a time, so every
    error and warning carries the node's own path and line.

    Errors are collected, not raised: a node with an error converts to _INVALID and the walk
    goes on, so one pass finds every error. The first one collected is the one a reader that
    stopped at the first error would have raised."""

    def __init__(self, text: str, file: str) -> None:
        self.file = file
        self.errors: list[SettingsError] = []
        self.places: list[FieldPath] = []
        """The node each error was found at, in the order of `errors`."""
        self.warnings: list[ConfigWarning] = []
        self._positions = _JsonPositions(text)
        self._error_paths: set[str | None] = set()

    def convert(self, value: Any, kind: Any, path: FieldPath) -> Any:
        """`value` as `kind`, walking Structs and containers; leaves are left to msgspec."""
        if _is_struct(kind):
            return self._convert_struct(value, kind, path)
        origin = typing.get_origin(kind)
        if origin is list:
            if not isinstance(value, list):
                return self._fail(path, f"expected array, got {json_type_name(value)}")
            (item_kind,) = typing.get_args(kind)
            items = [self.convert(item, item_kind, (*path, i)) for i, item in enumerate(value)]
            if any(item is _INVALID for item in items):
                return _INVALID
            return [item for item in items if item is not _SKIP]
        if origin is dict:
            if not isinstance(value, dict):
                return self._fail(path, f"expected object, got {json_type_name(value)}")
            _, item_kind = typing.get_args(kind)
            entries = {
                key: self.convert(item, item_kind, (*path, key)) for key, item in value.items()
            }
            if any(item is _INVALID for item in entries.values()):
                return _INVALID
            return {key: item for key, item in entries.items() if item is not _SKIP}
        if origin in (typing.Union, types.UnionType):
            for arm in typing.get_args(kind):
                if (isinstance(value, dict) and _is_struct(arm)) or (
                    isinstance(value, list) and typing.get_origin(arm) is list
                ):
                    return self.convert(value, arm, path)
        try:
            return msgspec.convert(value, kind)
        except msgspec.ValidationError as exc:
            return self._record(self._translate(exc, path, value), path)

    def _convert_struct(self, value: Any, kind: type[msgspec.Struct], path: FieldPath) -> Any:
        if not isinstance(value, dict):
            return self._fail(path, f"expected object, got {json_type_name(value)}")
        if kind is HookEntry and self._is_skipped_entry(value, path):
            return _SKIP
        if kind is Settings:
            self._check_patterns(value.get("patterns"))
        fields = _fields_of(kind)
        members: dict[str, Any] = {}
        invalid = False
        for key, item in value.items():
            field = fields.get(key)
            if field is not None:
                member = self.convert(item, field.type, (*path, key))
                if member is _INVALID:
                    invalid = True
                else:
                    members[key] = member
            elif not (path == () and key in IGNORED_TOP_LEVEL_KEYS):
                # Unknown keys only warn: Claude-only keys (`async`, `statusMessage`) must not
                # break a file that Claude Code also reads.
                message = f"unknown key {key!r} ignored"
                suggestion = _suggest(key, list(fields))
                if suggestion is not None:
                    message += f" (did you mean {suggestion!r}?)"
                self._warn((*path, key), message)
        if kind is Settings:
            self._check_events(value.get("hooks"))
        try:
            result = msgspec.convert(members, kind)
        except msgspec.ValidationError as exc:
            # A required member that had an error of its own is missing here: said once.
            absent = any(f.required and f.encode_name not in value for f in fields.values())
            if not invalid or absent:
                self._record(self._translate(exc, path, value), path)
            return _INVALID
        errors_before = len(self.errors)
        if isinstance(result, HookEntry):
            self._check_entry(result, path)
        elif isinstance(result, HookGroup):
            self._check_group(result, path)
        if invalid or len(self.errors) > errors_before:
            return _INVALID
        return result

    def _is_skipped_entry(self, value: dict[str, Any], path: FieldPath) -> bool:
        kind = value.get("type")
        if isinstance(kind, str) and kind != "command":
            # Claude's "prompt" and "http" hooks: relay runs commands only.
            self._warn((*path, "type"), f"hook type {kind!r} is not supported; hook skipped")
            return True
        return False

    def _check_patterns(self, patterns: Any) -> None:
        if not isinstance(patterns, dict):
            return
        for name, value in patterns.items():
            path: FieldPath = ("patterns", name)
            if isinstance(value, str):
                if value != "builtin":
                    message = f'expected "builtin" or a hook object, got string {value!r}'
                    self._fail(path, message)
                elif name not in BUILTIN_NAMESPACES:
                    builtins = ", ".join(sorted(BUILTIN_NAMESPACES))
                    message = f'"builtin" names a built-in namespace ({builtins}), not {name!r}'
                    self._fail(path, message)
            if not _NAMESPACE.fullmatch(name):
                self._warn(path, f"pattern {name!r} never matches: namespaces are [a-z][a-z0-9_-]*")

    def _check_entry(self, entry: HookEntry, path: FieldPath) -> None:
        if not entry.command.strip():
            self._fail((*path, "command"), "command is empty")
        if not math.isfinite(entry.timeout):
            self._fail((*path, "timeout"), "expected a finite number of seconds")
        elif entry.timeout > MILLISECOND_SUSPECT:
            # Timeout units silently changing between s and ms is a fault of the anchors.
            seconds = f"{entry.timeout:.0f}" if entry.timeout.is_integer() else f"{entry.timeout:g}"
            message = f"did you mean milliseconds? {seconds} seconds is {_duration(entry.timeout)}"
            self._warn((*path, "timeout"), message)
        if entry.signal not in _SIGNAL_NAMES:
            message = f"unknown signal {entry.signal!r}; expected a name like SIGTERM or SIGKILL"
            self._fail((*path, "signal"), message)

    def _check_group(self, group: HookGroup, path: FieldPath) -> None:
        if group.matcher is not None:
            problem = validate_matcher(group.matcher)
            if problem is not None:
                self._fail((*path, "matcher"), problem)

    def _check_events(self, hooks: Any) -> None:
        if not isinstance(hooks, dict):
            return  # its type error is reported where it is converted
        known = known_event_names()
        for name in hooks:
            if name not in known:
                # Kept: a host's newer event passes through, and its hooks run when the
                # host fires exactly that name. It may also be a typo.
                if EVENT_NAME.fullmatch(name):
                    message = (
                        f"unknown event {name!r}; its hooks run only if a host fires an "
                        "event of exactly that name"
                    )
                else:
                    message = f"unknown event {name!r}; its hooks never run"
                suggestion = _suggest(name, known)
                if suggestion is not None:
                    message += f" (did you mean {suggestion!r}?)"
                self._warn(("hooks", name), message)

    def check_user_only(self, document: Any) -> None:
        """A project file setting what only the user's own files may (model.USER_ONLY):
        ignored, and said so, where it is."""
        if not isinstance(document, dict):
            return
        for section, names in USER_ONLY.items():
            values = document.get(section)
            if not isinstance(values, dict):
                continue
            for name in names:
                if name in values:
                    self._warn(
                        (section, name),
                        f"ignored in a project's settings: only your own settings files (user,"
                        f" system or --settings) may set {section}.{name}",
                    )

    def _warn(self, path: FieldPath, message: str) -> None:
        position = self._positions.locate(path)
        line = position[0] if position else None
        warning = ConfigWarning(file=self.file, path=render_path(path), message=message, line=line)
        self.warnings.append(warning)

    def _fail(self, path: FieldPath, message: str) -> Any:
        return self._record(self._error(path, message), path)

    def _record(self, error: SettingsError, path: FieldPath) -> Any:
        # One error per node: a pattern string already refused is not refused again as a hook.
        if error.path not in self._error_paths:
            self._error_paths.add(error.path)
            self.errors.append(error)
            self.places.append(path)
        return _INVALID

    def _error(self, path: FieldPath, message: str, suffix: str = "") -> SettingsError:
        line, column = self._positions.locate(path) or (None, None)
        where = render_path(path) + suffix
        return SettingsError(message, file=self.file, path=where or None, line=line, column=column)

    def _translate(
        self, exc: msgspec.ValidationError, path: FieldPath, value: Any
    ) -> SettingsError:
        """msgspec's "Expected `float`, got `str` - at `$.timeout`" in JSON words and our path."""
        message, _, where = str(exc).partition(" - at `")
        suffix = where.rstrip("`").removeprefix("$")
        if not path:
            suffix = suffix.removeprefix(".")
        missing = re.fullmatch(r"Object missing required field `(.+)`", message)
        if missing:
            return self._error(path, f"missing required field {missing.group(1)!r}")
        if not suffix:
            message = re.sub(r"got `[^`]*`", f"got {json_type_name(value)}", message)
        message = re.sub(r"`([^`]*)`", _type_words, message)
        message = re.sub(r"(\d+)\.0\b", r"\1", message)
        if ", got" not in message and not suffix and not isinstance(value, dict | list):
            message += f", got {msgspec.json.encode(value).decode()}"
        return self._error(path, message[:1].lower() + message[1:], suffix)


class JsonSpan(NamedTuple):
    """Where one value sits in a JSON text, as character offsets."""

    key: int | None
    """Start of the member's key, for a member of an object; None otherwise."""
    start: int
    """First character of the value."""
    end: int
    """Just past the value's last character."""


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.DOTALL)


def scan_json(text: str) -> dict[FieldPath, JsonSpan]:
    """The span of every value in a JSON text already known to be valid, by path."""
    # An explicit stack, not recursion: a deeply nested file must not overflow Python's.
    spans: dict[FieldPath, JsonSpan] = {}
    stack: list[_Container] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("}", "]"):
            closed = stack.pop()
            spans[closed.path] = JsonSpan(closed.own_key, closed.start, match.end())
            continue
        if token in (",", ":"):
            if token == "," and stack[-1].is_object:
                stack[-1].expect_key = True
            continue
        top = stack[-1] if stack else None
        if top is not None and top.is_object and top.expect_key:
            top.key = msgspec.json.decode(token)
            top.key_start = match.start()
            top.expect_key = False
            continue
        key_start: int | None = None
        if top is None:
            path: FieldPath = ()
        elif top.is_object:
            path = (*top.path, top.key)
            key_start = top.key_start
        else:
            path = (*top.path, top.index)
            top.index += 1
        if token == "{":
            stack.append(_Container(path, is_object=True, start=match.start(), key=key_start))
        elif token == "[":
            stack.append(_Container(path, is_object=False, start=match.start(), key=key_start))
        else:
            spans[path] = JsonSpan(key_start, match.start(), match.end())
    return spans


class _JsonPositions:
    """Line and column of the members and elements of a JSON text already known to be valid."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._spans: dict[FieldPath, JsonSpan] | None = None
        self._newlines: list[int] = []

    def locate(self, path: FieldPath) -> tuple[int, int] | None:
        """1-based line and column of the node at `path` (a member's key), or of its nearest
        ancestor found."""
        if self._spans is None:
            # Built on first use only: files without a problem never pay for the scan.
            self._spans = scan_json(self._text)
            self._newlines = [match.start() for match in re.finditer("\n", self._text)]
        for depth in range(len(path), -1, -1):
            span = self._spans.get(path[:depth])
            if span is not None:
                offset = span.start if span.key is None else span.key
                line = bisect.bisect_left(self._newlines, offset)
                line_start = self._newlines[line - 1] + 1 if line else 0
                return line + 1, offset - line_start + 1
        return None


class _Container:
    """An object or array being scanned by scan_json."""

    __slots__ = ("expect_key", "index", "is_object", "key", "key_start", "own_key", "path", "start")

    def __init__(self, path: FieldPath, *, is_object: bool, start: int, key: int | None) -> None:
        self.path = path
        self.is_object = is_object
        self.start = start
        self.own_key = key
        """Start of this container's own key, when it is a member of an object."""
        self.expect_key = is_object
        self.key: str = ""
        """The key of the member being scanned, and where that key starts."""
        self.key_start: int | None = None
        self.index = 0


def _malformed(exc: msgspec.DecodeError, data: bytes, file: str) -> SettingsError:
    text = str(exc)
    found = _BYTE_OFFSET.search(text)
    if found:
        offset = min(int(found.group(1)), len(data))
        reason = text[: found.start()].removeprefix("JSON is malformed: ")
        if reason == "trailing characters":
            offset -= 1  # msgspec counts one past the first trailing character
    else:
        # "Input data was truncated": point just past the last thing written.
        offset = len(data.rstrip())
        reason = "unexpected end of file"
    line, column = _line_column(data, offset)
    return SettingsError(f"invalid JSON: {reason}", file=file, line=line, column=column)


def _line_column(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters, not bytes) of a byte offset."""
    before = data[:offset]
    line_start = before.rfind(b"\n") + 1
    return before.count(b"\n") + 1, len(before[line_start:].decode("utf-8", "replace")) + 1


@functools.cache
def _fields_of(kind: type[msgspec.Struct]) -> dict[str, msgspec.structs.FieldInfo]:
    """A Struct's fields by their JSON name, looked up once per class: msgspec evaluates
    the (postponed) annotations on every call, which made validation cost grow with
    every hook in a file, run or not."""
    return {field.encode_name: field for field in msgspec.structs.fields(kind)}


def _is_struct(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, msgspec.Struct)


def _type_words(match: re.Match[str]) -> str:
    names = [name.strip() for name in match.group(1).split("|")]
    if all(name in _TYPE_WORDS for name in names):
        return " or ".join(_TYPE_WORDS[name] for name in names)
    return match.group(0)


_KEY_ALIASES = {
    "cmd": "command",
    "script": "command",
    "exec": "command",
    "commandline": "command",
    "argv": "args",
    "arguments": "args",
    "environment": "env",
    "dir": "cwd",
    "directory": "cwd",
    "workdir": "cwd",
    "workingdir": "cwd",
    "workingdirectory": "cwd",
    "match": "matcher",
    "matchers": "matcher",
    "tool": "matcher",
    "toolname": "matcher",
}
"""Keys people write for one relay (or Claude Code) spells otherwise, by their folded form
(see _fold): a spelling distance alone takes "cmd" for "cwd", not "command"."""


def _fold(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _suggest(name: str, known: list[str]) -> str | None:
    alias = _KEY_ALIASES.get(_fold(name))
    if alias in known:
        return alias
    by_folded = {_fold(candidate): candidate for candidate in known}
    if _fold(name) in by_folded:
        return by_folded[_fold(name)]  # another case, or snake_case for camelCase
    by_lower = {candidate.lower(): candidate for candidate in known}
    import difflib  # only for a suggestion, off the start-up path

    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.1f} minutes"

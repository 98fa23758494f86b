"""Read one settings.json: decode, validate with file:line errors, collect warnings (DESIGN §5)."""

from __future__ import annotations

import bisect
import math
import re
import signal
import types
import typing
from pathlib import Path
from typing import Any

import msgspec

from relay.config.model import (
    MILLISECOND_SUSPECT,
    ConfigWarning,
    HookEntry,
    HookGroup,
    LoadedSettings,
    Scope,
    Settings,
)
from relay.errors import SettingsError
from relay.protocol.dialects import known_event_names

Segment = str | int
FieldPath = tuple[Segment, ...]
"""Where a value sits in a settings file: keys and list indexes from the top."""

BUILTIN_NAMESPACES: frozenset[str] = frozenset({"relay", "memory"})
IGNORED_TOP_LEVEL_KEYS: frozenset[str] = frozenset({"$schema"})

_EXACT_NAMES = re.compile(r"[A-Za-z0-9_\- ,|]*")
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


def parse_settings(data: bytes, *, file: str, scope: Scope) -> LoadedSettings:
    """Decode and validate the bytes of one settings file; raise SettingsError if unusable."""
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    try:
        # msgspec does not check the UTF-8 inside strings; the position scanner needs text too.
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_column(data, exc.start)
        raise SettingsError("not valid UTF-8", file=file, line=line, column=column) from None
    if not text.strip():
        return LoadedSettings(file=file, scope=scope, settings=Settings())
    try:
        document = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise _malformed(exc, data, file) from None
    reader = _SettingsReader(text, file)
    settings = reader.convert(document, Settings, ())
    return LoadedSettings(file=file, scope=scope, settings=settings, warnings=reader.warnings)


def load_settings_file(path: Path, scope: Scope) -> LoadedSettings:
    """Read and validate one settings file; raise SettingsError if it cannot be read or used."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SettingsError(f"cannot read settings file: {reason}", file=str(path)) from None
    return parse_settings(data, file=str(path), scope=scope)


def validate_matcher(matcher: str) -> str | None:
    """Why a matcher cannot be used, or None when it is fine."""
    if matcher == "*" or _EXACT_NAMES.fullmatch(matcher):
        return None
    try:
        re.compile(matcher)
    except re.error as exc:
        return f"invalid regular expression {matcher!r}: {exc}"
    return None


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
    error and warning carries the node's own path and line."""

    def __init__(self, text: str, file: str) -> None:
        self.file = file
        self.warnings: list[ConfigWarning] = []
        self._positions = _JsonPositions(text)

    def convert(self, value: Any, kind: Any, path: FieldPath) -> Any:
        """`value` as `kind`, walking Structs and containers; leaves are left to msgspec."""
        if _is_struct(kind):
            return self._convert_struct(value, kind, path)
        origin = typing.get_origin(kind)
        if origin is list:
            if not isinstance(value, list):
                raise self._error(path, f"expected array, got {_json_type(value)}")
            (item_kind,) = typing.get_args(kind)
            items = [self.convert(item, item_kind, (*path, i)) for i, item in enumerate(value)]
            return [item for item in items if item is not _SKIP]
        if origin is dict:
            if not isinstance(value, dict):
                raise self._error(path, f"expected object, got {_json_type(value)}")
            _, item_kind = typing.get_args(kind)
            entries = {
                key: self.convert(item, item_kind, (*path, key)) for key, item in value.items()
            }
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
            raise self._translate(exc, path, value) from None

    def _convert_struct(self, value: Any, kind: type[msgspec.Struct], path: FieldPath) -> Any:
        if not isinstance(value, dict):
            raise self._error(path, f"expected object, got {_json_type(value)}")
        if kind is HookEntry and self._is_skipped_entry(value, path):
            return _SKIP
        if kind is Settings:
            self._check_patterns(value.get("patterns"))
        fields = {field.encode_name: field for field in msgspec.structs.fields(kind)}
        members: dict[str, Any] = {}
        for key, item in value.items():
            field = fields.get(key)
            if field is not None:
                members[key] = self.convert(item, field.type, (*path, key))
            elif not (path == () and key in IGNORED_TOP_LEVEL_KEYS):
                # Unknown keys only warn: Claude-only keys (`async`, `statusMessage`) must not
                # break a file that Claude Code also reads.
                message = f"unknown key {key!r} ignored"
                suggestion = _suggest(key, list(fields))
                if suggestion is not None:
                    message += f" (did you mean {suggestion!r}?)"
                self._warn((*path, key), message)
        try:
            result = msgspec.convert(members, kind)
        except msgspec.ValidationError as exc:
            raise self._translate(exc, path, value) from None
        if isinstance(result, HookEntry):
            self._check_entry(result, path)
        elif isinstance(result, HookGroup):
            self._check_group(result, path)
        elif isinstance(result, Settings):
            self._check_events(result)
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
                    raise self._error(path, message)
                if name not in BUILTIN_NAMESPACES:
                    builtins = ", ".join(sorted(BUILTIN_NAMESPACES))
                    message = f'"builtin" names a built-in namespace ({builtins}), not {name!r}'
                    raise self._error(path, message)
            if not _NAMESPACE.fullmatch(name):
                self._warn(path, f"pattern {name!r} never matches: namespaces are [a-z][a-z0-9_-]*")

    def _check_entry(self, entry: HookEntry, path: FieldPath) -> None:
        if not entry.command.strip():
            raise self._error((*path, "command"), "command is empty")
        if not math.isfinite(entry.timeout):
            raise self._error((*path, "timeout"), "expected a finite number of seconds")
        if entry.timeout > MILLISECOND_SUSPECT:
            # Timeout units silently changing between s and ms is a fault of the anchors.
            seconds = f"{entry.timeout:.0f}" if entry.timeout.is_integer() else f"{entry.timeout:g}"
            message = f"did you mean milliseconds? {seconds} seconds is {_duration(entry.timeout)}"
            self._warn((*path, "timeout"), message)
        if entry.signal not in _SIGNAL_NAMES:
            message = f"unknown signal {entry.signal!r}; expected a name like SIGTERM or SIGKILL"
            raise self._error((*path, "signal"), message)

    def _check_group(self, group: HookGroup, path: FieldPath) -> None:
        if group.matcher is not None:
            problem = validate_matcher(group.matcher)
            if problem is not None:
                raise self._error((*path, "matcher"), problem)

    def _check_events(self, settings: Settings) -> None:
        known = known_event_names()
        for name in settings.hooks:
            if name not in known:
                # Kept in the Settings: the registry skips names it does not know.
                message = f"unknown event {name!r}; its hooks never run"
                suggestion = _suggest(name, known)
                if suggestion is not None:
                    message += f" (did you mean {suggestion!r}?)"
                self._warn(("hooks", name), message)

    def _warn(self, path: FieldPath, message: str) -> None:
        position = self._positions.locate(path)
        line = position[0] if position else None
        warning = ConfigWarning(file=self.file, path=render_path(path), message=message, line=line)
        self.warnings.append(warning)

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
            message = re.sub(r"got `[^`]*`", f"got {_json_type(value)}", message)
        message = re.sub(r"`([^`]*)`", _type_words, message)
        message = re.sub(r"(\d+)\.0\b", r"\1", message)
        if ", got" not in message and not suffix and not isinstance(value, dict | list):
            message += f", got {msgspec.json.encode(value).decode()}"
        return self._error(path, message[:1].lower() + message[1:], suffix)


class _JsonPositions:
    """Offsets of the members and elements of a JSON text already known to be valid."""

    _TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.DOTALL)

    def __init__(self, text: str) -> None:
        self._text = text
        self._offsets: dict[FieldPath, int] | None = None
        self._newlines: list[int] = []

    def locate(self, path: FieldPath) -> tuple[int, int] | None:
        """1-based line and column of the node at `path`, or of its nearest ancestor found."""
        if self._offsets is None:
            # Built on first use only: files without a problem never pay for the scan.
            self._offsets = self._scan()
            self._newlines = [match.start() for match in re.finditer("\n", self._text)]
        for depth in range(len(path), -1, -1):
            offset = self._offsets.get(path[:depth])
            if offset is not None:
                line = bisect.bisect_left(self._newlines, offset)
                line_start = self._newlines[line - 1] + 1 if line else 0
                return line + 1, offset - line_start + 1
        return None

    def _scan(self) -> dict[FieldPath, int]:
        # An explicit stack, not recursion: a deeply nested file must not overflow Python's.
        offsets: dict[FieldPath, int] = {}
        stack: list[_Container] = []
        for match in self._TOKEN.finditer(self._text):
            token = match.group()
            if token in ("}", "]"):
                stack.pop()
                continue
            if token in (",", ":"):
                if token == "," and stack[-1].is_object:
                    stack[-1].expect_key = True
                continue
            top = stack[-1] if stack else None
            if top is not None and top.is_object and top.expect_key:
                top.key = msgspec.json.decode(token)
                top.expect_key = False
                offsets[(*top.path, top.key)] = match.start()
                continue
            if top is None:
                path: FieldPath = ()
                offsets[path] = match.start()
            elif top.is_object:
                path = (*top.path, top.key)
            else:
                path = (*top.path, top.index)
                offsets[path] = match.start()
                top.index += 1
            if token == "{":
                stack.append(_Container(path, is_object=True))
            elif token == "[":
                stack.append(_Container(path, is_object=False))
        return offsets


class _Container:
    """An object or array being scanned by _JsonPositions."""

    __slots__ = ("expect_key", "index", "is_object", "key", "path")

    def __init__(self, path: FieldPath, *, is_object: bool) -> None:
        self.path = path
        self.is_object = is_object
        self.expect_key = is_object
        self.key: str = ""
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


def _is_struct(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, msgspec.Struct)


def _json_type(value: object) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _type_words(match: re.Match[str]) -> str:
    names = [name.strip() for name in match.group(1).split("|")]
    if all(name in _TYPE_WORDS for name in names):
        return " or ".join(_TYPE_WORDS[name] for name in names)
    return match.group(0)


def _suggest(name: str, known: list[str]) -> str | None:
    by_lower = {candidate.lower(): candidate for candidate in known}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    import difflib  # only for a suggestion, off the start-up path

    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.1f} minutes"

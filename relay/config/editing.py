"""Edit settings files in place: only the changed span of the text is rewritten, so other
keys, their order, indentation and line endings stay exactly as the user wrote them."""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from relay.config.loader import (
    FieldPath,
    check_settings,
    check_settings_file,
    decode_document,
    decode_text,
    is_empty_document,
    locate,
    render_path,
    scan_json,
    suggest_name,
)
from relay.config.model import TRUST_REQUIRED, HookEntry, Scope, Settings
from relay.config.paths import NO_PROJECT, PROJECT_DIR_NAME, find_project_root, relay_home
from relay.errors import RelayError, SettingsError
from relay.protocol.decoding import json_type_name

ToggleScope = Literal["user", "project", "local"]
ToggleAction = Literal["disabled", "enabled", "already-disabled", "not-disabled", "unknown"]

NEW_FILE_INDENT = 2
_DEFAULT_UNIT = "  "
_KEY_THEN_COLON = re.compile(r'"(?:[^"\\]|\\.)*"(\s*:\s*)', re.DOTALL)
_TRAILING_BLANKS = re.compile(r"[ \t]+(\r?\n)")
_COMMENT_OR_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/|/\*', re.DOTALL)
_KEY_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.DOTALL)


class JsonText:
    """The text of one JSON document, edited in place.

    Each edit splices new text into the span it changes and nothing else, following the
    layout around it (indentation unit, one-line or one-member-per-line containers,
    spacing after `,` and `:`, line endings); the result is decoded again after every edit,
    so a mistake can never reach the disk as broken JSON.
    """

    def __init__(self, text: str, *, file: str, comments: bool = False) -> None:
        self.file = file
        self.comments = comments
        """Whether `//` and `/* */` comments are allowed (JSON with comments, as Gemini CLI
        reads its settings); they are kept where they are, as any other text outside an edit."""
        self._bom = "\ufeff" if text.startswith("\ufeff") else ""
        self._newline = "\r\n" if "\r\n" in text else "\n"
        self._cached_unit: str | None = None
        self._load(text.removeprefix("\ufeff"))

    @property
    def text(self) -> str:
        """The current text, with the byte-order mark it had."""
        return self._bom + self._text

    @property
    def value(self) -> Any:
        """The decoded document (do not mutate it)."""
        return self._value

    def at(self, path: FieldPath) -> Any:
        """The decoded value at `path`; KeyError or IndexError if there is none."""
        value = self._value
        for segment in path:
            value = value[segment]
        return value

    def location(self, path: FieldPath) -> tuple[int | None, int | None]:
        """1-based line and column of the value at `path` (a member's key)."""
        return locate(self._text, path)

    def has(self, path: FieldPath) -> bool:
        """Whether a value sits at `path`."""
        return path in self._spans

    def append(self, path: FieldPath, value: Any) -> None:
        """Add `value` as the last element of the array at `path`."""
        self._add(path, None, value)

    def insert(self, path: FieldPath, key: str, value: Any) -> None:
        """Add the member `key: value` at the end of the object at `path` (key must be new)."""
        if (*path, key) in self._spans:
            raise ValueError(f"{render_path((*path, key))} already exists")
        self._add(path, key, value)

    def replace(self, path: FieldPath, value: Any) -> None:
        """Put `value` in place of the value at `path`."""
        span = self._spans[path]
        rendered = self._render(value, self._line_indent(span.start), inline=self._inline(path))
        self._splice(span.start, span.end, rendered)

    def remove(self, path: FieldPath) -> None:
        """Remove the element or member at `path`, with the separator that went with it."""
        parent = path[:-1]
        siblings = self._children(parent)
        index = siblings.index(path)
        span = self._spans[path]
        first = self._start_of(path)
        # Comments around the element (not inside it) are the user's notes on its
        # neighbours or the container: they stay, and only the separator goes.
        if len(siblings) == 1:
            container = self._spans[parent]
            kept = self._comments(container.start + 1, first) + self._comments(
                span.end, container.end - 1
            )
            self._splice(container.start + 1, container.end - 1, kept)
        else:
            previous = self._spans[siblings[index - 1]].end if index else first
            before = self._comments(previous, first, drop_comma=True).rstrip()
            if index == 0 or (before and index < len(siblings) - 1):
                # From the element to the next one: the separator before it stays, with
                # any comment on it.
                following = self._start_of(siblings[index + 1])
                kept = self._comments(span.end, following, drop_comma=True).lstrip(" \t")
                self._splice(first, following, kept)
            else:
                rest = self._plain[span.end :].split("\n", 1)[0]
                if "//" in before.rsplit("\n", 1)[-1] and rest.strip():
                    # The line comment now ends the text before what closed the container.
                    before += self._newline + self._line_indent(self._spans[parent].start)
                self._splice(previous, span.end, before)

    def _comments(self, start: int, end: int, *, drop_comma: bool = False) -> str:
        """The text between `start` and `end` if it holds a comment (without the one comma
        there when `drop_comma`), else nothing."""
        text, plain = self._text[start:end], self._plain[start:end]
        if text == plain:
            return ""
        comma = plain.find(",") if drop_comma else -1
        return text[:comma] + text[comma + 1 :] if comma >= 0 else text

    # --- layout ----------------------------------------------------------------------------

    def _add(self, path: FieldPath, key: str | None, value: Any) -> None:
        container = self._spans[path]
        siblings = self._children(path)
        inline = self._inline(path)
        colon = self._colon()
        if siblings:
            last = siblings[-1]
            if len(siblings) >= 2:
                between = self._plain[self._spans[siblings[-2]].end : self._start_of(last)]
                separator = _TRAILING_BLANKS.sub(r"\1", between)
            elif inline:
                separator = self._comma()
            else:
                separator = "," + self._newline + self._line_indent(self._start_of(last))
            indent = self._line_indent(self._start_of(last))
            inline = inline or "\n" not in separator
            member = self._member(key, value, indent, inline=inline, colon=colon)
            end = self._spans[last].end
            line_end = self._text.find("\n", end)
            line_end = len(self._text) if line_end < 0 else line_end
            line_end -= self._text[line_end - 1 : line_end] == "\r"
            trailing = self._text[end:line_end]
            newline = separator.find("\n")
            plain = self._plain[end:line_end]
            if trailing != plain and not plain.strip() and newline > 0:
                # A comment ends the last member's line: it stays on that line, and the new
                # member goes on the next.
                start = newline - (separator[newline - 1 : newline] == "\r")
                self._splice(end, line_end, "," + trailing + separator[start:] + member)
                return
            self._splice(end, end, separator + member)
            return
        parent_inline = self._inline(path[:-1]) if path else False
        if inline and parent_inline:
            member = self._member(key, value, "", inline=True, colon=colon)
            self._splice(container.start + 1, container.end - 1, member)
            return
        # An empty container in a multi-line document opens up, one member per line.
        outer = self._line_indent(container.start)
        indent = outer + self._unit()
        member = self._member(key, value, indent, inline=False, colon=colon)
        body = self._newline + indent + member + self._newline + outer
        self._splice(container.start + 1, container.end - 1, body)

    def _member(self, key: str | None, value: Any, indent: str, *, inline: bool, colon: str) -> str:
        rendered = self._render(value, indent, inline=inline)
        if key is None:
            return rendered
        return json.dumps(key, ensure_ascii=False) + colon + rendered

    def _render(self, value: Any, indent: str, *, inline: bool) -> str:
        if inline or not isinstance(value, dict | list) or not value:
            return json.dumps(value, ensure_ascii=False, separators=(self._comma(), self._colon()))
        text = json.dumps(value, ensure_ascii=False, indent=self._unit(), separators=(",", ": "))
        return text.replace("\n", self._newline + indent)

    def _unit(self) -> str:
        """One level of indentation: the first step in from a container to its members."""
        if self._cached_unit is None:
            self._cached_unit = _DEFAULT_UNIT
            for path in self._containers_in_order():
                children = self._children(path)
                if not children or self._inline(path):
                    continue
                outer = self._line_indent(self._spans[path].start)
                inner = self._line_indent(self._start_of(children[0]))
                if (
                    len(inner) > len(outer)
                    and inner.startswith(outer)
                    and self._starts_line(self._start_of(children[0]))
                ):
                    self._cached_unit = inner[len(outer) :]
                    break
        return self._cached_unit

    def _colon(self) -> str:
        """What follows a key: the spacing of the document's first member, else `": "`."""
        match = _KEY_THEN_COLON.search(self._plain)
        return ":" + match.group(1).split(":", 1)[1] if match else ": "

    def _comma(self) -> str:
        """What separates two values on one line: as the document does, else `", "`."""
        for path in self._containers_in_order():
            children = self._children(path)
            if len(children) >= 2:
                between = self._plain[self._spans[children[0]].end : self._start_of(children[1])]
                if "\n" not in between:
                    return between
        return ", " if self._colon() != ":" else ","

    def _inline(self, path: FieldPath) -> bool:
        """Whether the container at `path` is written on one line."""
        span = self._spans[path]
        return "\n" not in self._plain[span.start : span.end]

    def _line_indent(self, offset: int) -> str:
        line_start = self._plain.rfind("\n", 0, offset) + 1
        line = self._plain[line_start:offset]
        return line[: len(line) - len(line.lstrip(" \t"))]

    def _starts_line(self, offset: int) -> bool:
        line_start = self._plain.rfind("\n", 0, offset) + 1
        return not self._plain[line_start:offset].strip()

    # --- the scanned document --------------------------------------------------------------

    def _load(self, text: str) -> None:
        # Comments become spaces of the same length, so every offset into the plain text
        # is an offset into the text as written, where the edits are spliced.
        plain = blank_comments(text, file=self.file) if self.comments else text
        _, value = decode_document(plain.encode(), file=self.file)
        if is_empty_document(value):
            raise SettingsError("cannot edit an empty document", file=self.file)
        _refuse_duplicate_keys(plain, self.file)
        self._text = text
        self._plain = plain
        self._value = value
        self._spans = scan_json(plain)
        self._child_index: dict[FieldPath, list[FieldPath]] = {}
        for path in self._spans:
            if path:
                self._child_index.setdefault(path[:-1], []).append(path)
        for children in self._child_index.values():
            children.sort(key=self._start_of)
        self._cached_unit = None

    def _splice(self, start: int, end: int, replacement: str) -> None:
        self._load(self._text[:start] + replacement + self._text[end:])

    def _children(self, path: FieldPath) -> list[FieldPath]:
        return self._child_index.get(path, [])

    def _containers_in_order(self) -> Iterator[FieldPath]:
        containers = [path for path, span in self._spans.items() if self._plain[span.start] in "{["]
        yield from sorted(containers, key=lambda path: self._spans[path].start)

    def _start_of(self, path: FieldPath) -> int:
        span = self._spans[path]
        return span.start if span.key is None else span.key


def blank_comments(text: str, *, file: str) -> str:
    """The text with each `//` and `/* */` comment outside strings turned into spaces (line
    breaks kept), so that offsets, lines and columns stay those of the text as written."""

    def blank(match: re.Match[str]) -> str:
        found = match.group()
        if found.startswith('"'):
            return found
        if found == "/*":
            line = text.count("\n", 0, match.start()) + 1
            column = match.start() - text.rfind("\n", 0, match.start())
            raise SettingsError("unterminated /* comment", file=file, line=line, column=column)
        return re.sub(r"[^\r\n]", " ", found)

    return _COMMENT_OR_STRING.sub(blank, text)


def decode_with_comments(text: str, *, file: str) -> Any:
    """The value of a JSON text that may hold comments; SettingsError (with line and
    column) when it is not valid, or when an object repeats a key."""
    plain = blank_comments(text, file=file)
    _, value = decode_document(plain.encode(), file=file)
    if is_empty_document(value):
        return None
    _refuse_duplicate_keys(plain, file)
    return value


def _refuse_duplicate_keys(text: str, file: str) -> None:
    """SettingsError at the second of two equal keys in one object: readers disagree on
    which one counts (the last, the first, or an error), so an edit could change the wrong one."""
    seen: list[set[str] | None] = []  # per open container: its keys so far (None: an array)
    expect_key = False
    for match in _KEY_TOKEN.finditer(text):
        token = match.group()
        if token in ("{", "["):
            seen.append(set() if token == "{" else None)
            expect_key = token == "{"
        elif token in ("}", "]"):
            seen.pop()
            expect_key = False
        elif token == ",":
            expect_key = bool(seen) and seen[-1] is not None
        elif token != ":" and expect_key:
            expect_key = False
            keys = seen[-1]
            key = msgspec.json.decode(token)
            if keys is not None and key in keys:
                line = text.count("\n", 0, match.start()) + 1
                column = match.start() - text.rfind("\n", 0, match.start())
                raise SettingsError(
                    f"the key {token} appears twice in one object; relay cannot tell which "
                    "one counts, so it leaves the file as it is",
                    file=file,
                    line=line,
                    column=column,
                )
            if keys is not None:
                keys.add(key)


# --- hooksConfig.disabled ------------------------------------------------------------------


def new_settings_text(document: dict[str, Any]) -> str:
    """A new settings file: 2-space indent and a trailing newline."""
    return json.dumps(document, ensure_ascii=False, indent=NEW_FILE_INDENT) + "\n"


def disable_in_text(text: str, name: str, *, file: str) -> str:
    """The settings text with `name` added to hooksConfig.disabled (unchanged if it is there)."""
    if not text.strip():
        return new_settings_text({"hooksConfig": {"disabled": [name]}})
    document = _editable(text, file)
    expected = copy.deepcopy(document.value)
    config = _object_member(document, ("hooksConfig",))
    if config is None:
        document.insert((), "hooksConfig", {"disabled": [name]})
        expected["hooksConfig"] = {"disabled": [name]}
    else:
        disabled = _array_member(document, ("hooksConfig", "disabled"))
        if disabled is None:
            document.insert(("hooksConfig",), "disabled", [name])
            expected["hooksConfig"]["disabled"] = [name]
        elif name in disabled:
            return text
        else:
            document.append(("hooksConfig", "disabled"), name)
            expected["hooksConfig"]["disabled"].append(name)
    return _checked(document, expected, text)


def enable_in_text(text: str, name: str, *, file: str) -> str:
    """The settings text with every `name` removed from hooksConfig.disabled."""
    if not text.strip():
        return text
    document = _editable(text, file)
    expected = copy.deepcopy(document.value)
    if _object_member(document, ("hooksConfig",)) is None:
        return text
    disabled = _array_member(document, ("hooksConfig", "disabled"))
    if disabled is None or name not in disabled:
        return text
    kept = [item for item in disabled if item != name]
    if kept:
        # From the last one back, so earlier indexes stay valid.
        for index in reversed([i for i, item in enumerate(disabled) if item == name]):
            document.remove(("hooksConfig", "disabled", index))
        expected["hooksConfig"]["disabled"] = kept
    elif len(document.at(("hooksConfig",))) > 1:
        # No empty key left behind: an empty list goes, and an empty hooksConfig with it.
        document.remove(("hooksConfig", "disabled"))
        del expected["hooksConfig"]["disabled"]
    else:
        document.remove(("hooksConfig",))
        del expected["hooksConfig"]
    return _checked(document, expected, text)


def _editable(text: str, file: str) -> JsonText:
    """The document, refused with its location unless it is a JSON object."""
    document = JsonText(text, file=file)
    if not isinstance(document.value, dict):
        raise SettingsError(
            f"cannot edit: expected a JSON object, got {json_type_name(document.value)}",
            file=file,
            line=1,
            column=1,
        )
    return document


def _object_member(document: JsonText, path: FieldPath) -> dict[str, Any] | None:
    value = _member(document, path, "object")
    return value if isinstance(value, dict) else None


def _array_member(document: JsonText, path: FieldPath) -> list[Any] | None:
    value = _member(document, path, "array")
    return value if isinstance(value, list) else None


def _member(document: JsonText, path: FieldPath, expected: str) -> object:
    """The value at `path`, None when absent; SettingsError when it is not of the expected type."""
    if not document.has(path):
        return None
    value: object = document.at(path)
    if json_type_name(value) != expected:
        line, column = document.location(path)
        raise SettingsError(
            f"cannot edit: expected {expected}, got {json_type_name(value)}",
            file=document.file,
            path=render_path(path),
            line=line,
            column=column,
        )
    return value


def _checked(document: JsonText, expected: Any, before: str) -> str:
    """The edited text, once it decodes to exactly the intended document and has no new error."""
    if document.value != expected:
        raise RelayError(f"{document.file}: internal error: the edit changed more than intended")
    errors_before = len(check_settings(before.encode(), file=document.file, scope="user").errors)
    after = check_settings(document.text.encode(), file=document.file, scope="user")
    if len(after.errors) > errors_before:
        raise after.errors[0]
    return document.text


# --- files ---------------------------------------------------------------------------------


def settings_path(scope: ToggleScope | None, cwd: Path) -> tuple[Path, Scope]:
    """The settings file of a scope (default: project inside a project, else user)."""
    root = find_project_root(cwd)
    if scope is None:
        scope = "project" if root is not None else "user"
    if scope == "user":
        return relay_home() / "settings.json", "user"
    if root is None:
        raise RelayError(f"no project here: {NO_PROJECT.format(cwd)}")
    if scope == "project":
        return root / PROJECT_DIR_NAME / "settings.json", "project"
    return root / PROJECT_DIR_NAME / "settings.local.json", "project-local"


def read_settings_text(path: Path) -> str | None:
    """The text of a settings file, None when it does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingsError(
            f"cannot read settings file: {exc.strerror or exc}", file=str(path)
        ) from None
    return decode_text(data, file=str(path))


def write_settings_text(path: Path, text: str) -> None:
    """Replace the file's content at once: a reader sees the old or the new text, never half."""
    target = path.resolve() if path.is_symlink() else path  # keep a symlinked dotfile a link
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        import tempfile

        descriptor, temporary = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
        )
    except OSError as exc:
        raise SettingsError(f"cannot write: {exc.strerror or exc}", file=str(path)) from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
        # mkstemp makes the file 0600: keep the old file's mode, or give a new one the usual.
        os.chmod(temporary, target.stat().st_mode & 0o7777 if target.exists() else _new_file_mode())
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise SettingsError(f"cannot write: {exc.strerror or exc}", file=str(path)) from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


class ToggleResult(msgspec.Struct, kw_only=True):
    """What `relay hooks enable/disable` did to one settings file."""

    name: str
    file: Path
    action: ToggleAction
    created: bool = False
    """The file did not exist and was written."""
    known: bool = True
    """NAME is the name of a hook in the settings that apply here."""
    suggestion: str | None = None
    """A known hook name close to NAME, when NAME is unknown."""
    still_disabled_by: list[str] = msgspec.field(default_factory=list)
    """Other settings files whose hooksConfig.disabled still lists NAME (the lists are joined)."""
    outside_project: bool = False
    """A project file was edited but NAME belongs only to user, system or --settings hooks,
    which project settings cannot switch off (DESIGN §7: an untrusted repo must not)."""

    @property
    def changed(self) -> bool:
        """Whether the file was written."""
        return self.action in ("disabled", "enabled")


def set_hook_disabled(
    name: str,
    disabled: bool,
    *,
    scope: ToggleScope | None = None,
    cwd: Path | None = None,
    force: bool = False,
    shared: bool = False,
) -> ToggleResult:
    """Add NAME to (or remove it from) hooksConfig.disabled of one settings file, in place.

    Without `scope`, the personal file: the project-local one for a project hook (or a name
    no hook has yet, inside a project), the user's for any other; `shared`: the project's
    committed file. A NAME no hook in the settings that apply has is not added (action
    "unknown") unless `force`: a hook that will be added later, or one from a --settings file."""
    start = Path.cwd() if cwd is None else cwd
    if shared:
        if scope not in (None, "project"):
            raise RelayError(
                f"--shared is the project's shared file: it cannot go with --scope {scope}"
            )
        scope = "project"
    if scope is None:
        scope = _personal_scope(name, start)
    path, edited_scope = settings_path(scope, start)
    names, project_names, others = _hook_names_and_disabling_files(start, name, path)
    known = name in names
    suggestion = None if known else suggest_name(name, sorted(names))
    before = read_settings_text(path)
    text = before or ""
    if disabled:
        after = disable_in_text(text, name, file=str(path))
        action: ToggleAction = "disabled" if after != text else "already-disabled"
    else:
        after = enable_in_text(text, name, file=str(path))
        action = "enabled" if after != text else "not-disabled"
    if disabled and not known and not force:
        # A typo would otherwise be written and silently match nothing.
        return ToggleResult(
            name=name, file=path, action="unknown", known=False, suggestion=suggestion
        )
    if after != text:
        write_settings_text(path, after)
    return ToggleResult(
        name=name,
        file=path,
        action=action,
        created=before is None and after != text,
        known=known,
        suggestion=suggestion,
        still_disabled_by=[] if disabled else others,
        outside_project=disabled
        and edited_scope in TRUST_REQUIRED
        and known
        and name not in project_names,
    )


def _personal_scope(name: str, cwd: Path) -> ToggleScope:
    """The file a person's own switch goes to: a project hook's is the project-local file
    (git-ignored, so a teammate's hooks stay on); a user, system or --settings hook's is
    the user file, since project files cannot switch those off (DESIGN §5)."""
    if find_project_root(cwd) is None:
        return "user"
    names, project_names, _ = _hook_names_and_disabling_files(cwd, name, Path())
    if name in names and name not in project_names:
        return "user"
    return "local"


def hook_names(settings: Settings) -> list[str]:
    """The names of a file's hooks and pattern handlers, as hooksConfig.disabled matches them."""
    names = [
        entry.display_name
        for groups in settings.hooks.values()
        for group in groups
        for entry in group.hooks
    ]
    for namespace, handler in settings.patterns.items():
        if isinstance(handler, HookEntry):
            names.append(handler.name or f"@{namespace}")
    return names


def _hook_names_and_disabling_files(
    cwd: Path, name: str, edited: Path
) -> tuple[set[str], set[str], list[str]]:
    """Every hook name in the settings for `cwd`, those of the project files, and the files
    other than `edited` whose hooksConfig.disabled lists `name`."""
    from relay.config.discovery import discover

    names: set[str] = set()
    project_names: set[str] = set()
    others: list[str] = []
    edited_real = edited.resolve()
    for path, scope in discover(cwd):
        report = check_settings_file(path, scope)
        if report.settings is None:
            continue  # a broken file: `relay hooks validate` tells what is wrong with it
        names.update(hook_names(report.settings))
        if scope in TRUST_REQUIRED:
            project_names.update(hook_names(report.settings))
        if path.resolve() != edited_real and name in report.settings.hooksConfig.disabled:
            others.append(str(path))
    return names, project_names, others

"""Convert the hooks of Claude Code and Gemini CLI settings files into relay settings.

Claude Code hooks keep their Claude event names, so they keep running in the claude dialect
(same input field names, same reading of their answers). Gemini CLI already uses relay's
canonical event names; its timeouts are milliseconds and become seconds. Whatever cannot be
carried over is left out and named in the report, never silently dropped.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from relay.config.editing import (
    JsonText,
    disable_in_text,
    hook_names,
    new_settings_text,
    read_settings_text,
    write_settings_text,
)
from relay.config.loader import (
    check_settings,
    decode_document,
    is_empty_document,
    render_path,
    validate_matcher,
)
from relay.config.model import (
    MILLISECOND_SUSPECT,
    HookEntry,
    HookGroup,
    HooksConfig,
    Settings,
)
from relay.config.paths import PROJECT_DIR_NAME, find_project_root, relay_home
from relay.errors import RelayError, SettingsError
from relay.protocol.dialects import known_event_names

Agent = Literal["claude", "gemini"]
AGENT_NAMES: dict[Agent, str] = {"claude": "Claude Code", "gemini": "Gemini CLI"}

PROJECT_FILES = ("settings.json", "settings.local.json")
"""A project's relay files: the shared one and the personal, git-ignored one."""

GEMINI_EVENTS: frozenset[str] = frozenset(
    {
        "BeforeTool",
        "AfterTool",
        "BeforeAgent",
        "AfterAgent",
        "BeforeModel",
        "AfterModel",
        "BeforeToolSelection",
        "SessionStart",
        "SessionEnd",
        "PreCompress",
        "Notification",
    }
)
_TOOL_EVENTS = frozenset({"BeforeTool", "AfterTool"})
_PLAIN_NAMES = re.compile(r"[A-Za-z0-9_\- ,|]*")
"""A matcher that relay reads as a list of exact names (spec/protocol.md §7.4)."""

_CLAUDE_DROPPED_KEYS: dict[str, str] = {
    "async": "Claude Code runs it in the background; relay runs it like any hook and waits",
    "statusMessage": "relay shows no status message while a hook runs",
    "once": "relay has no run-once hooks",
}
_GEMINI_CONFIG_KEYS = frozenset({"enabled", "disabled", "notifications"})


class ImportSourceError(RelayError):
    """No settings file to import from: names every path tried."""

    def __init__(self, agent: Agent, tried: Sequence[Path]) -> None:
        self.agent = agent
        self.tried = [str(path) for path in tried]
        super().__init__(
            f"no {AGENT_NAMES[agent]} settings file found; tried: {', '.join(self.tried)}"
        )


ImportScope = Literal["project", "user"]


class ImportSource(msgspec.Struct, frozen=True, kw_only=True):
    """A host settings file to read, and the relay settings file its hooks are meant for."""

    path: Path
    target: Path | None = None
    """None: no file in mind (the hooks are only converted)."""


class ImportPart(msgspec.Struct, kw_only=True):
    """The converted hooks bound for one relay settings file."""

    target: str | None
    files: list[str]
    """The host files they came from."""
    settings: Settings

    @property
    def hook_names(self) -> list[str]:
        """The names of its hooks, in file order."""
        return [entry.display_name for entry in _entries(self.settings)]

    def settings_text(self) -> str:
        """Its settings as a relay settings file: 2-space indent, trailing newline."""
        return new_settings_text(settings_document(self.settings))


class ImportResult(msgspec.Struct, kw_only=True):
    """Hooks converted from another agent's settings files, and what could not be carried."""

    agent: Agent
    files: list[str]
    """The files read, in merge order."""
    settings: Settings
    """Everything converted, as one settings file."""
    report: list[str]
    """One line per thing left out, changed or worth knowing, in file order."""
    parts: list[ImportPart] = msgspec.field(default_factory=list)
    """The converted hooks per relay file they are meant for; parts with nothing left out."""
    generated: list[str] = msgspec.field(default_factory=list)
    """The names the import made up (the host's own names are not among them)."""

    @property
    def hook_count(self) -> int:
        """How many hooks were converted."""
        return len(_entries(self.settings))

    def settings_text(self) -> str:
        """The converted settings as a relay settings file: 2-space indent, trailing newline."""
        return new_settings_text(settings_document(self.settings))


class MergeResult(msgspec.Struct, kw_only=True):
    """What merging imported hooks into a relay settings file did."""

    file: str
    text: str
    """The file's new text."""
    created: bool = False
    added: int = 0
    """Groups appended."""
    skipped: int = 0
    """Groups already present (identically, or but for the names the import made up)."""
    names: list[str] = msgspec.field(default_factory=list)
    """The names of the hooks added, as written."""
    present: int = 0
    """Hooks that were already there."""
    renamed: dict[str, str] = msgspec.field(default_factory=dict)
    """Made-up names taken in the file already, and the names written instead."""
    report: list[str] = msgspec.field(default_factory=list)


def settings_document(settings: Settings) -> dict[str, Any]:
    """The JSON object of a settings file holding these settings, without empty sections."""
    document: dict[str, Any] = msgspec.to_builtins(settings)
    # omit_defaults leaves out default values, not sections built by a default factory.
    return {key: value for key, value in document.items() if value not in ({}, [])}


def relay_target(scope: ImportScope, cwd: Path, *, personal: bool = False) -> Path:
    """The relay settings file imported hooks go to: the user's, the project's shared one, or
    (`personal`, for a host's personal project file) the project's git-ignored local one."""
    if scope == "user":
        return relay_home() / "settings.json"
    root = find_project_root(cwd) or cwd
    return root / PROJECT_DIR_NAME / ("settings.local.json" if personal else "settings.json")


def import_sources(
    agent: Agent, sources: Sequence[ImportSource], *, required: bool = False
) -> ImportResult:
    """Read and convert an agent's settings files, merged in the order given: those that exist
    (`required`: every one must), at least one."""
    missing = [source.path for source in sources if not source.path.is_file()]
    found = [source for source in sources if source.path.is_file()]
    if (required and missing) or not found:
        raise ImportSourceError(agent, missing if required else [s.path for s in sources])
    converter = _Converter(agent)
    for source in found:
        target = None if source.target is None else str(source.target)
        converter.read(str(source.path), _read_source(source.path), target)
    return converter.result([str(source.path) for source in found])


def convert(agent: Agent, documents: Sequence[tuple[str, Any]]) -> ImportResult:
    """Convert decoded settings documents of one agent, merged in the order given."""
    converter = _Converter(agent)
    for file, document in documents:
        converter.read(file, document)
    return converter.result([file for file, _ in documents])


def write_import(imported: ImportResult) -> list[MergeResult]:
    """Merge each part into its relay file, in place; made-up names are kept unique across
    the files of a scope (a project's shared and local files run together)."""
    results: list[MergeResult] = []
    for part in imported.parts:
        if part.target is None:
            raise RelayError("internal error: an imported part has no target file")
        target = Path(part.target)
        reserved: set[str] = set()
        for other in imported.parts:
            if other is not part:
                reserved.update(other.hook_names)
        for sibling in _scope_files(target):
            if sibling != target:
                reserved.update(_names_in(sibling))
        results.append(
            merge_into_file(part.settings, target, generated=imported.generated, reserved=reserved)
        )
    return results


def merge_into_file(
    imported: Settings,
    path: Path,
    *,
    generated: Collection[str] = (),
    reserved: Collection[str] = (),
) -> MergeResult:
    """Add the imported hooks to a relay settings file, in place, keeping what it has."""
    before = read_settings_text(path)
    merged = merge_into_text(
        before or "", imported, file=str(path), generated=generated, reserved=reserved
    )
    if merged.text != (before or ""):
        write_settings_text(path, merged.text)
        merged.created = before is None
    return merged


def merge_into_text(
    text: str,
    imported: Settings,
    *,
    file: str,
    generated: Collection[str] = (),
    reserved: Collection[str] = (),
) -> MergeResult:
    """The settings text with the imported groups appended per event, disabled names added and
    `enabled: false` carried over.

    A group already present is skipped: identically, or but for the `generated` names (so
    re-importing adds nothing, even where a name was changed). The `generated` names are
    numbered again so that none is a name of the file's hooks or a `reserved` one (`guard`
    taken: `guard-2`); the host's own names are kept as they are.
    """
    blank = not text.strip()
    existing = Settings()
    if not blank:
        checked = check_settings(text.encode(), file=file, scope="project")
        if checked.settings is None:
            # Refuse to touch a file relay cannot read: its own error says where to look.
            raise checked.errors[0]
        existing = checked.settings
    result = MergeResult(file=file, text=text)
    made_up = set(generated)
    # The host's own names are kept as they are: made-up ones must not take them.
    given = {entry.name for entry in _entries(imported) if entry.name and entry.name not in made_up}
    taken = set(hook_names(existing)) | set(reserved) | given
    added: dict[str, list[HookGroup]] = {}
    for event, groups in imported.hooks.items():
        present = list(existing.hooks.get(event, []))
        for group in groups:
            if any(_same_group(group, other, made_up) for other in present):
                result.skipped += 1
                result.present += len(group.hooks)
                where = _describe_group(event, group.matcher)
                result.report.append(f"{where}: the same group is already in {file}; skipped")
                continue
            written = _rename(group, made_up, taken, result.renamed)
            taken.update(entry.display_name for entry in written.hooks)
            added.setdefault(event, []).append(written)
            present.append(written)
            result.added += 1
            result.names.extend(entry.display_name for entry in written.hooks)
    if result.renamed:
        changes = ", ".join(f"{old} -> {new}" for old, new in result.renamed.items())
        result.report.append(
            f"names numbered on, since {file} or a file beside it has them: {changes}"
        )
    if blank:
        fresh = settings_document(Settings(hooks=added, hooksConfig=imported.hooksConfig))
        result.text = new_settings_text(fresh) if fresh else text
        return result
    document = JsonText(text, file=file)
    if not isinstance(document.value, dict):
        raise SettingsError("cannot edit: expected a JSON object", file=file, line=1, column=1)
    for event, groups in added.items():
        for group in groups:
            _append_group(document, event, group)
    text = document.text
    for name in imported.hooksConfig.disabled:
        text = disable_in_text(text, name, file=file)
    if not imported.hooksConfig.enabled and existing.hooksConfig.enabled:
        document = JsonText(text, file=file)
        if document.has(("hooksConfig", "enabled")):
            document.replace(("hooksConfig", "enabled"), False)
        elif document.has(("hooksConfig",)):
            document.insert(("hooksConfig",), "enabled", False)
        else:
            document.insert((), "hooksConfig", {"enabled": False})
        text = document.text
    after = check_settings(text.encode(), file=file, scope="project")
    if after.errors:  # the file was valid and every value was checked: this is a bug
        raise RelayError(f"internal error: the merge would break {file}: {after.errors[0]}")
    result.text = text
    return result


def _entries(settings: Settings) -> list[HookEntry]:
    return [
        entry for groups in settings.hooks.values() for group in groups for entry in group.hooks
    ]


def _same_group(imported: HookGroup, present: HookGroup, made_up: set[str]) -> bool:
    """Whether `present` is `imported`, but for the names the import made up."""
    if imported == present:
        return True
    if (imported.matcher, imported.sequential) != (present.matcher, present.sequential):
        return False
    if len(imported.hooks) != len(present.hooks):
        return False
    return all(
        mine == theirs
        or (
            mine.name in made_up
            and msgspec.structs.replace(mine, name=None)
            == msgspec.structs.replace(theirs, name=None)
        )
        for mine, theirs in zip(imported.hooks, present.hooks, strict=True)
    )


def _numbered(base: str, taken: set[str]) -> str:
    """The first of `base`, `base-2`, `base-3`… not in `taken`, which now has it."""
    name, number = base, 1
    while name in taken:
        number += 1
        name = f"{base}-{number}"
    taken.add(name)
    return name


def _rename(
    group: HookGroup, made_up: set[str], taken: set[str], renamed: dict[str, str]
) -> HookGroup:
    """The group with its made-up names given again, each the first of `guard`, `guard-2`…
    not `taken` (the import's own numbering, with the file's names counted as well)."""
    hooks: list[HookEntry] = []
    for entry in group.hooks:
        if entry.name is None or entry.name not in made_up:
            hooks.append(entry)
            continue
        name = _numbered(generated_name(entry.command), taken)
        if name != entry.name:
            renamed[entry.name] = name
        hooks.append(msgspec.structs.replace(entry, name=name))
    return msgspec.structs.replace(group, hooks=hooks)


def _scope_files(target: Path) -> list[Path]:
    """The relay files that run together with `target`: a project's shared and local ones."""
    if target.parent.name == PROJECT_DIR_NAME and target.name in PROJECT_FILES:
        return [target.parent / name for name in PROJECT_FILES]
    return [target]


def _names_in(path: Path) -> list[str]:
    """The hook names of a relay settings file; none when it is missing or unreadable (the
    merge into it, or `relay hooks validate`, says what is wrong)."""
    try:
        text = read_settings_text(path)
    except SettingsError:
        return []
    if text is None or not text.strip():
        return []
    checked = check_settings(text.encode(), file=str(path), scope="project")
    return [] if checked.settings is None else hook_names(checked.settings)


def _append_group(document: JsonText, event: str, group: HookGroup) -> None:
    value = msgspec.to_builtins(group)
    if not document.has(("hooks",)):
        document.insert((), "hooks", {event: [value]})
    elif not document.has(("hooks", event)):
        document.insert(("hooks",), event, [value])
    else:
        document.append(("hooks", event), value)


def _read_source(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    _, document = decode_document(data, file=str(path))
    return {} if is_empty_document(document) else document


def not_carried(agent: Agent, hook: dict[str, Any]) -> str:
    """Why a hook that is not a command hook is not carried into relay, and what becomes of it."""
    kind = hook.get("type", "command")
    if kind == "mcp_tool" and agent == "claude":
        server, tool = hook.get("server"), hook.get("tool")
        called = f"tool {str(tool)[:60]!r} of MCP server {str(server)[:60]!r}"
        return (
            f"'mcp_tool' hook ({called}) stays with Claude Code, which goes on running it: it "
            "calls a tool of an MCP server that Claude Code connects and signs in to, which "
            "relay cannot reach; left out"
        )
    what = hook.get("prompt") or hook.get("url") or hook.get("command") or ""
    shown = f" {str(what)[:60]!r}" if what else ""
    return f"{kind!r} hook{shown} cannot be carried over (relay runs command hooks only); left out"


def hooks_left_with_host(agent: Agent, file: str, hooks: Any) -> list[str]:
    """One line per hook of a host settings file's `hooks` that is not a command hook, which
    `--import` leaves in the host's file (the host goes on running it)."""
    if not isinstance(hooks, dict):
        return []
    lines: list[str] = []
    for event, groups in hooks.items():
        for index, group in enumerate(groups if isinstance(groups, list) else ()):
            entries = group.get("hooks") if isinstance(group, dict) else None
            for number, hook in enumerate(entries if isinstance(entries, list) else ()):
                if isinstance(hook, dict) and hook.get("type", "command") != "command":
                    where = render_path(("hooks", event, index, "hooks", number))
                    label = _describe_group(event, group.get("matcher"))
                    reason = not_carried(agent, hook).removesuffix("; left out")
                    lines.append(f"{file}: {where} ({label}): {reason}; left where it is")
    return lines


def _describe_group(event: str, matcher: object) -> str:
    return f"{event}[{matcher}]" if matcher not in (None, "", "*") else event


# Words before the program that do not name it: `env`, `exec`, `A=1`.
_PREFIXES = frozenset({"env", "exec", "command", "nohup", "time", "nice"})
# Segments that only set the stage for the program that follows: `cd "$DIR" && ./x.sh`.
_STAGE = frozenset({"cd", "pushd", "export", "source", ".", "set", "unset", "umask"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_INTERPRETER = re.compile(
    r"(ba|z|da|k|fi)?sh|python[0-9.]*|pypy[0-9.]*|node(js)?|deno|bun|tsx|ts-node|ruby|perl"
    r"|php|lua|pwsh|uv|poetry|pipenv|pipx"
)
# Runners that fetch a package and run it: the package names the hook (`npx-prettier`).
_PACKAGE_RUNNERS = frozenset({"npx", "pnpx", "bunx", "uvx"})
_SCRIPT = re.compile(r".*/.*|.+\.[A-Za-z0-9]{1,5}")
_NAME_LIMIT = 40


def generated_name(command: str) -> str:
    """A readable name for a hook that has none, from its script's file name
    (`python3 "$CLAUDE_PROJECT_DIR"/hooks/fmt.py` -> `fmt`), else from its program
    (`jq -r .x` -> `jq`, `npx prettier --write` -> `npx-prettier`)."""
    for segment in _segments(command):
        words = segment
        while words and (_ASSIGNMENT.match(words[0]) or words[0] in _PREFIXES):
            words = words[1:]
            while words and words[0].startswith("-"):  # env -i, nice -n…: their options
                words = words[1:]
        if not words or words[0] in _STAGE:
            continue
        return _slug(_program_name(words))
    return "hook"


def _segments(command: str) -> list[list[str]]:
    """The words of each simple command in a shell line, split at `&&`, `||`, `;`, `|`."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token and set(token) <= set("&|;()<>"):
                segments.append([])
            else:
                segments[-1].append(token)
    except ValueError:  # an unclosed quote: the words as they stand
        return [command.replace('"', " ").replace("'", " ").split()]
    return [segment for segment in segments if segment]


def _program_name(words: list[str]) -> str:
    program = _base(words[0])
    arguments = [word for word in words[1:] if word != "run"]  # uv run, deno run, pipx run
    if program in _PACKAGE_RUNNERS:
        package = next((word for word in arguments if not word.startswith("-")), None)
        if package is None:
            return program
        # @scope/name@1.2 -> name
        return f"{program}-{package.rsplit('/', 1)[-1].split('@', 1)[0] or package}"
    if not _INTERPRETER.fullmatch(program):
        return _stem(program)
    for index, word in enumerate(arguments):
        following = arguments[index + 1] if index + 1 < len(arguments) else None
        if word == "-c" and following is not None and program.endswith("sh"):
            return generated_name(following)  # bash -c '…': the command inside
        if word == "-m" and following is not None:
            return following.rsplit(".", 1)[-1]  # python -m black
    operands = [word for word in arguments if not word.startswith("-")]
    script = next((word for word in operands if _SCRIPT.fullmatch(word)), None)
    if script is None and operands and not any(word in ("-c", "-e") for word in arguments):
        script = operands[0]
    return _stem(_base(script)) if script else program


def _base(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1]


def _stem(file_name: str) -> str:
    return re.sub(r"(?<=.)\.[A-Za-z0-9]{1,5}$", "", file_name)


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:_NAME_LIMIT].strip("-")
    return slug or "hook"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _whole(value: float) -> float:
    """5.0 as 5, so a converted timeout reads as written."""
    return int(value) if float(value).is_integer() else value


class _Part:
    """What is converted for one relay file: hooks per event and the switches."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.hooks: dict[str, list[HookGroup]] = {}
        self.enabled = True
        self.disabled: list[str] = []


class _Converter:
    """Collects converted hooks and report lines across the files of one agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.parts: dict[str | None, _Part] = {}
        self.report: list[str] = []
        self._part = _Part()
        self._untimed = 0
        self._plain_tool_matchers: list[str] = []
        self._converted_timeouts: list[str] = []

    def read(self, file: str, document: Any, target: str | None = None) -> None:
        if not isinstance(document, dict):
            raise SettingsError("expected a JSON object", file=file, line=1, column=1)
        self._part = self.parts.setdefault(target, _Part())
        self._part.files.append(file)
        if self.agent == "claude":
            self._read_claude(file, document)
        else:
            self._read_gemini(file, document)

    def result(self, files: list[str]) -> ImportResult:
        if self.agent == "claude" and self._untimed:
            self.report.append(
                f"{self._untimed} hook(s) without a timeout get relay's default of 60 seconds; "
                "add a timeout if one needs longer"
            )
        if self._converted_timeouts:
            self.report.append(
                "timeouts converted from milliseconds (Gemini CLI) to seconds (relay): "
                + ", ".join(self._converted_timeouts)
            )
        if self._plain_tool_matchers:
            listed = ", ".join(repr(matcher) for matcher in self._plain_tool_matchers)
            self.report.append(
                f"matchers {listed}: Gemini CLI searches tool names with them as regular "
                "expressions, relay reads a plain list of names as exact names; write a regular "
                "expression (such as '.*read.*') where a part of a name was meant"
            )
        generated = self._name_hooks()
        parts: list[ImportPart] = []
        everything = Settings()
        for target, part in self.parts.items():
            settings = Settings(
                hooks=part.hooks,
                hooksConfig=HooksConfig(enabled=part.enabled, disabled=part.disabled),
            )
            if settings_document(settings):
                parts.append(ImportPart(target=target, files=part.files, settings=settings))
            for event, groups in part.hooks.items():
                everything.hooks.setdefault(event, []).extend(groups)
            everything.hooksConfig.enabled &= part.enabled
            everything.hooksConfig.disabled.extend(
                name for name in part.disabled if name not in everything.hooksConfig.disabled
            )
        encoded = msgspec.json.encode(everything)
        checked = check_settings(encoded, file="<imported>", scope="project")
        if checked.errors:  # every value was checked on the way in: this is a bug
            raise RelayError(f"internal error: imported settings are invalid: {checked.errors[0]}")
        return ImportResult(
            agent=self.agent,
            files=files,
            settings=everything,
            report=self.report,
            parts=parts,
            generated=generated,
        )

    def _name_hooks(self) -> list[str]:
        """Give each hook without a name one from its script or program, unique in the import
        and never one the host gave another hook (`guard`, `guard-2`…); the names made up."""
        groups = [
            group
            for part in self.parts.values()
            for event_groups in part.hooks.values()
            for group in event_groups
        ]
        taken = {entry.name for group in groups for entry in group.hooks if entry.name}
        generated: list[str] = []
        for group in groups:
            for index, entry in enumerate(group.hooks):
                if entry.name is not None:
                    continue
                name = _numbered(generated_name(entry.command), taken)
                generated.append(name)
                group.hooks[index] = msgspec.structs.replace(entry, name=name)
        return generated

    # --- Claude Code -----------------------------------------------------------------------

    def _read_claude(self, file: str, document: dict[str, Any]) -> None:
        if document.get("disableAllHooks") is True:
            self._part.enabled = False
            self.report.append(
                f"{file}: disableAllHooks: true became hooksConfig.enabled: false "
                "(no hook runs while it is set)"
            )
        self._read_events(file, document.get("hooks"), ("hooks",), skip=frozenset())
        self._note_other_keys(file, document, {"hooks", "disableAllHooks"})

    # --- Gemini CLI ------------------------------------------------------------------------

    def _read_gemini(self, file: str, document: dict[str, Any]) -> None:
        hooks = document.get("hooks")
        # Two layouts: {"hooks": {Event: [...]}, "hooksConfig": {...}}, and the older one with
        # the switches inside "hooks" itself: {"hooks": {"enabled": …, "disabled": […], Event: […]}}.
        if isinstance(hooks, dict):
            self._read_gemini_config(file, hooks, ("hooks",))
        config = document.get("hooksConfig")
        if isinstance(config, dict):
            self._read_gemini_config(file, config, ("hooksConfig",))
            unknown = [key for key in config if key not in _GEMINI_CONFIG_KEYS]
            for key in unknown:
                self.report.append(f"{file}: hooksConfig.{key}: unknown setting; left out")
        elif config is not None:
            self.report.append(f"{file}: hooksConfig: expected an object; left out")
        tools = document.get("tools")
        if isinstance(tools, dict) and tools.get("enableHooks") is False:
            self._part.enabled = False
            self.report.append(
                f"{file}: tools.enableHooks: false became hooksConfig.enabled: false"
            )
        self._read_events(file, hooks, ("hooks",), skip=_GEMINI_CONFIG_KEYS)
        self._note_other_keys(file, document, {"hooks", "hooksConfig", "tools"})

    def _read_gemini_config(self, file: str, config: dict[str, Any], path: tuple[str]) -> None:
        where = f"{file}: {render_path(path)}"
        enabled = config.get("enabled")
        if enabled is False:
            self._part.enabled = False
            self.report.append(f"{where}.enabled: false became hooksConfig.enabled: false")
        elif enabled is not None and enabled is not True:
            self.report.append(f"{where}.enabled: expected true or false; left out")
        disabled = config.get("disabled")
        if isinstance(disabled, list):
            for name in disabled:
                if isinstance(name, str):
                    if name not in self._part.disabled:
                        self._part.disabled.append(name)
                else:
                    self.report.append(f"{where}.disabled: {name!r} is not a hook name; left out")
        elif disabled is not None:
            self.report.append(f"{where}.disabled: expected a list of hook names; left out")
        if "notifications" in config:
            self.report.append(f"{where}.notifications: relay has no hook notifications; left out")

    # --- both ------------------------------------------------------------------------------

    def _read_events(
        self, file: str, hooks: Any, path: tuple[str], *, skip: frozenset[str]
    ) -> None:
        if hooks is None:
            return
        if not isinstance(hooks, dict):
            self.report.append(f"{file}: hooks: expected an object; nothing imported from it")
            return
        known = GEMINI_EVENTS if self.agent == "gemini" else frozenset(known_event_names())
        for event, groups in hooks.items():
            if event in skip:
                continue
            if event not in known:
                self._note(
                    file,
                    (*path, event),
                    event,
                    f"not a {AGENT_NAMES[self.agent]} event relay knows; its hooks were left out",
                )
                continue
            if not isinstance(groups, list):
                self._note(file, (*path, event), event, "expected a list of groups; left out")
                continue
            for index, group in enumerate(groups):
                converted = self._group(file, event, group, (*path, event, index))
                if converted is None:
                    continue
                collected = self._part.hooks.setdefault(event, [])
                # The same group in two files (shared and personal) is kept once, in the first.
                if any(converted in part.hooks.get(event, ()) for part in self.parts.values()):
                    label = _describe_group(event, converted.matcher)
                    self._note(file, (*path, event, index), label, "same group seen before; once")
                else:
                    collected.append(converted)

    def _group(
        self, file: str, event: str, group: Any, path: tuple[str | int, ...]
    ) -> HookGroup | None:
        if not isinstance(group, dict):
            self._note(file, path, event, "expected an object; left out")
            return None
        matcher = group.get("matcher")
        label = _describe_group(event, matcher)
        if matcher is not None and not isinstance(matcher, str):
            self._note(file, path, label, "matcher is not a string; group left out")
            return None
        if matcher is not None:
            problem = validate_matcher(matcher)
            if problem is not None:
                self._note(file, path, label, f"{problem}; group left out")
                return None
            if (
                self.agent == "gemini"
                and event in _TOOL_EVENTS
                and matcher not in ("", "*", *self._plain_tool_matchers)
                and _PLAIN_NAMES.fullmatch(matcher)
            ):
                self._plain_tool_matchers.append(matcher)
        group_keys = (
            {"matcher", "hooks", "sequential"} if self.agent == "gemini" else {"matcher", "hooks"}
        )
        for key in group:
            if key not in group_keys:
                self._note(file, (*path, key), label, "no relay equivalent; left out")
        entries = group.get("hooks")
        if not isinstance(entries, list):
            self._note(file, path, label, "no list of hooks; group left out")
            return None
        converted = [
            entry
            for index, hook in enumerate(entries)
            if (entry := self._hook(file, label, hook, (*path, "hooks", index))) is not None
        ]
        if not converted:
            return None
        sequential = self.agent == "gemini" and group.get("sequential") is True
        return HookGroup(matcher=matcher, sequential=sequential, hooks=converted)

    def _hook(
        self, file: str, label: str, hook: Any, path: tuple[str | int, ...]
    ) -> HookEntry | None:
        if not isinstance(hook, dict):
            self._note(file, path, label, "expected an object; left out")
            return None
        kind = hook.get("type", "command")
        if kind != "command":
            self._note(file, path, label, not_carried(self.agent, hook))
            return None
        command = hook.get("command")
        if not isinstance(command, str) or not command.strip():
            self._note(file, path, label, "no command; left out")
            return None
        fields: dict[str, Any] = {"command": command}
        kept = {"type", "command", "timeout"}
        if self.agent == "gemini":
            kept |= {"name", "description"}
            for key in ("name", "description"):
                if isinstance(hook.get(key), str):
                    fields[key] = hook[key]
                elif key in hook:
                    self._note(file, (*path, key), label, "not a string; left out")
        timeout = self._timeout(file, label, hook, path)
        if timeout is not None:
            fields["timeout"] = timeout
        for key in hook:
            if key not in kept:
                why = _CLAUDE_DROPPED_KEYS.get(key, "no relay equivalent")
                self._note(file, (*path, key), label, f"{why}; left out")
        return HookEntry(**fields)  # a hook without a name gets one once all are read

    def _timeout(
        self, file: str, label: str, hook: dict[str, Any], path: tuple[str | int, ...]
    ) -> float | None:
        if "timeout" not in hook:
            self._untimed += 1
            return None
        value = _number(hook["timeout"])
        if value is None or value <= 0:
            self._note(
                file,
                (*path, "timeout"),
                label,
                f"{hook['timeout']!r} is not a positive number; relay's default of 60 seconds "
                "applies",
            )
            return None
        if self.agent == "gemini":
            seconds = _whole(value / 1000)  # Gemini CLI counts milliseconds
            self._converted_timeouts.append(f"{value:g} ms -> {seconds:g} s")
            return seconds
        if value > MILLISECOND_SUSPECT:
            self._note(
                file,
                (*path, "timeout"),
                label,
                f"{value:g} seconds is over 600: relay will ask 'did you mean milliseconds?' "
                "on every run",
            )
        return _whole(value)

    def _note(self, file: str, path: tuple[str | int, ...], label: str, message: str) -> None:
        self.report.append(f"{file}: {render_path(path)} ({label}): {message}")

    def _note_other_keys(self, file: str, document: dict[str, Any], used: set[str]) -> None:
        others = [key for key in document if key not in used and key != "$schema"]
        if others:
            self.report.append(
                f"{file}: not hook settings, left alone: {', '.join(sorted(others))}"
            )

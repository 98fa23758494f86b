"""`relay hooks new`: a working hook to start from, written and registered in one step.

The hook file reads the event on stdin and answers JSON that does something for its event
(a deny rule for a tool event, context for an event that takes it, no opinion elsewhere),
in sh, Python, Node or Perl; the settings file of its scope gets one group for it, edited
in place like `relay hooks import --write` does (the rest of the file keeps its text).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any, Literal

import msgspec

from relay.config.editing import hook_names, read_settings_text, write_settings_text
from relay.config.importing import merge_into_text
from relay.config.loader import check_settings_file
from relay.config.matcher import matcher_problem
from relay.config.model import HookEntry, HookGroup, Settings
from relay.config.paths import NO_PROJECT, PROJECT_DIR_NAME, find_project_root, relay_home
from relay.errors import RelayError
from relay.protocol.answers import PLAIN_TEXT_INJECTS
from relay.protocol.dialects import canonical_name, matcher_field
from relay.protocol.fixtures import DEFAULT_TOOL, example_event

Language = Literal["sh", "python", "node", "perl"]
NewScope = Literal["local", "project", "user"]
Kind = Literal["decision", "context", "observe"]

LANGUAGES: dict[str, tuple[str, str]] = {
    "sh": (".sh", "/bin/sh"),
    "python": (".py", "python3"),
    "node": (".js", "node"),
    "perl": (".pl", "perl"),
}
"""Each language's file suffix and the interpreter its #! line names."""

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CONTEXT_EVENTS = PLAIN_TEXT_INJECTS | {"AfterTool"}
"""Events whose hooks most often add context for the model (`inject`)."""
DECISION_EVENTS = frozenset({"BeforeTool", "PermissionRequest"})
PLAIN_MATCHER = re.compile(r"[A-Za-z0-9_\- ,|]+")
FILE_TOOLS = frozenset({"Write", "Edit", "Read", "write_file", "replace", "read_file"})
BASE_FIELDS = ("session_id", "cwd", "timestamp", "hook_event_name", "transcript_path")


class NewHookError(RelayError):
    """A hook that `relay hooks new` will not write (a name or file that exists, a bad NAME)."""


class NewHook(msgspec.Struct, kw_only=True):
    """What `relay hooks new` wrote."""

    name: str
    event: str
    language: Language
    scope: NewScope
    matcher: str | None
    file: Path
    settings: Path
    settings_created: bool
    command: str
    kind: Kind
    test: list[str]
    """The `relay hooks test …` words that exercise the hook as registered."""
    trust_needed: bool
    interpreter_missing: str | None = None
    """The interpreter of the #! line, when it is not on PATH (the hook fails until it is)."""


def create_hook(
    name: str,
    event: str,
    *,
    language: Language = "sh",
    matcher: str | None = None,
    scope: NewScope | None = None,
    cwd: Path | None = None,
) -> NewHook:
    """Write a working hook NAME for EVENT in the scope's hooks folder and register it in
    the scope's settings file; refuse a NAME or file that exists. Unknown events raise
    relay.protocol.dialects.UnknownEventError."""
    start = (cwd or Path.cwd()).resolve()
    canonical = canonical_name(event)
    if not NAME_PATTERN.fullmatch(name):
        raise NewHookError(
            f"{name!r} cannot name a hook file: use letters, digits, `-`, `_` and `.`, "
            "starting with a letter or digit"
        )
    field = matcher_field(canonical)
    if matcher is not None:
        if field is None:
            raise NewHookError(
                f"{event} has no matcher: its hooks run on every {event} event; leave --matcher out"
            )
        problem = matcher_problem(matcher)
        if problem is not None:
            raise NewHookError(f"--matcher: {problem}")
    root = find_project_root(start)
    chosen: NewScope = scope or ("project" if root is not None else "user")
    suffix, interpreter = LANGUAGES[language]
    if chosen == "user":
        folder, settings = relay_home() / "hooks", relay_home() / "settings.json"
        command = shlex.quote(str(folder / f"{name}{suffix}"))
    else:
        if root is None:
            raise NewHookError(f"no project here for --scope {chosen}: {NO_PROJECT.format(start)}")
        folder = root / PROJECT_DIR_NAME / "hooks"
        local = chosen == "local"
        settings = root / PROJECT_DIR_NAME / ("settings.local.json" if local else "settings.json")
        command = f'"$RELAY_PROJECT_DIR"/{PROJECT_DIR_NAME}/hooks/{name}{suffix}'
    script = folder / f"{name}{suffix}"
    if script.exists() or script.is_symlink():
        raise NewHookError(
            f"{script} exists: relay hooks new never overwrites a file; choose another NAME, "
            "or remove the file first"
        )
    _refuse_taken_name(name, start, settings)

    tool, assignments = _example_choice(canonical, field, matcher)
    kind: Kind = (
        "decision"
        if canonical in DECISION_EVENTS
        else "context"
        if canonical in CONTEXT_EVENTS
        else "observe"
    )
    target_field, pattern, sample = (
        ("file_path", ".env", ".env") if tool in FILE_TOOLS else ("command", "rm -rf", "rm -rf /")
    )
    shown_tool = ["--tool", tool] if tool and tool != DEFAULT_TOOL else []  # Bash is the default
    test = ["relay", "hooks", "test", event, *shown_tool, *assignments]
    if kind == "decision":
        test += ["--set", f"tool_input.{target_field}={json.dumps(sample)}"]
    test += ["--hook", name]
    if kind == "decision":
        test += ["--expect", "deny"]
    elif kind == "context":
        test += ["--expect", "inject"]
    if start != Path.cwd().resolve():
        test += ["--cwd", str(start)]  # the line runs where the person is, not in --cwd
    shown = " ".join(shlex.quote(word) for word in test)
    text = _render(
        language,
        kind,
        name=name,
        event=event,
        field=target_field,
        pattern=pattern,
        example=example_event(event, tool=tool, cwd="/path/to/project"),
        test=shown,
    )

    group = HookGroup(matcher=matcher, hooks=[HookEntry(command=command, name=name)])
    before = read_settings_text(settings)
    merged = merge_into_text(before or "", Settings(hooks={event: [group]}), file=str(settings))

    folder.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
    except FileExistsError:
        raise NewHookError(f"{script} exists: relay hooks new never overwrites a file") from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.chmod(
        script, os.stat(script).st_mode | 0o100
    )  # executable for its owner, whatever the umask
    try:
        write_settings_text(settings, merged.text)
    except BaseException:
        script.unlink(missing_ok=True)  # no hook file without its registration
        raise
    return NewHook(
        name=name,
        event=event,
        language=language,
        scope=chosen,
        matcher=matcher,
        file=script,
        settings=settings,
        settings_created=before is None,
        command=command,
        kind=kind,
        test=test,
        trust_needed=chosen != "user",
        interpreter_missing=None if shutil.which(interpreter) else interpreter,
    )


def _refuse_taken_name(name: str, start: Path, target: Path) -> None:
    """NewHookError when a hook of the settings that apply here, or of the target file,
    has NAME already: `--hook`, `enable`/`disable` and the log know hooks by name."""
    from relay.config.discovery import discover

    files = dict(discover(start))
    files.setdefault(target, "project-local" if target.name == "settings.local.json" else "user")
    for path, scope in files.items():
        report = check_settings_file(path, scope) if path.exists() else None
        if (
            report is not None
            and report.settings is not None
            and name in hook_names(report.settings)
        ):
            raise NewHookError(
                f"a hook named {name!r} exists already in {path}; choose another NAME "
                f"(relay hooks list shows the names)"
            )


def _example_choice(
    canonical: str, field: str | None, matcher: str | None
) -> tuple[str | None, list[str]]:
    """The tool (`--tool`) and `--set`s under which the event's example matches MATCHER."""
    if matcher is None or field is None or not PLAIN_MATCHER.fullmatch(matcher):
        return None, []
    first = re.split(r"[|,]", matcher)[0].strip()
    if not first or first == "*":
        return None, []
    if field == "tool_name":
        return first, []
    return None, ["--set", f"{field}={json.dumps(first)}"]


# --- the hook's text ----------------------------------------------------------------------


def _render(language: Language, kind: Kind, **values: Any) -> str:
    example: dict[str, Any] = values["example"]
    fields = ", ".join(
        [*BASE_FIELDS, *(key for key in example if key not in BASE_FIELDS and key != "agent_name")]
    )
    tool_input = json.dumps(example.get("tool_input", {}), ensure_ascii=False)
    reason = f"{values['name']}: no {values['pattern']} here"
    inject = f"{values['name']}: run the tests before you commit"
    text = TEMPLATES[language][kind]
    comment = "//" if language == "node" else "#"
    header = "\n".join(
        f"{comment} {line}".rstrip()
        for line in (
            f"{values['name']}: a relay hook for {values['event']} (written by `relay hooks new`; "
            "edit it freely).",
            f"It reads the event, one JSON object, on stdin: {fields}.",
            "It answers one JSON object on stdout ({} is no opinion).",
            f"Try it: {values['test']}",
        )
    )
    for token, value in {
        "HEADER": header,
        "FIELD": values["field"],
        "PATTERN": values["pattern"],
        "TOOL_INPUT": tool_input,
        "REASON": reason,
        "INJECT": inject,
    }.items():
        text = text.replace(f"@{token}@", value)
    return text


TEMPLATES: dict[str, dict[str, str]] = {
    "sh": {
        "decision": """#!/bin/sh
@HEADER@
# tool_input here looks like @TOOL_INPUT@
# sh reads no JSON: this looks at the whole event (`jq -r .tool_input.@FIELD@` reads one field).
event=$(cat)
case $event in
  *'@PATTERN@'*)
    echo '{"decision": "deny", "reason": "@REASON@"}'
    exit 0
    ;;
esac
echo '{}'
""",
        "context": """#!/bin/sh
@HEADER@
# "inject" is text for the agent: context it reads with the event.
event=$(cat)
echo '{"inject": "@INJECT@"}'
""",
        "observe": """#!/bin/sh
@HEADER@
# To answer, print fields of relay's hook output: "systemMessage" (shown to the user),
# "decision" and "reason", "continue": false with "stopReason" (relay hooks schema --output).
event=$(cat)
echo '{}'
""",
    },
    "python": {
        "decision": """#!/usr/bin/env python3
@HEADER@
import json
import sys

event = json.load(sys.stdin)
tool_input = event.get("tool_input") or {}  # here like @TOOL_INPUT@
if "@PATTERN@" in str(tool_input.get("@FIELD@", "")):
    answer = {"decision": "deny", "reason": "@REASON@"}
else:
    answer = {}  # no opinion: the tool runs
print(json.dumps(answer))
""",
        "context": """#!/usr/bin/env python3
@HEADER@
import json
import sys

event = json.load(sys.stdin)
# "inject" is text for the agent: context it reads with the event.
print(json.dumps({"inject": "@INJECT@"}))
""",
        "observe": """#!/usr/bin/env python3
@HEADER@
import json
import sys

event = json.load(sys.stdin)
# To answer, add fields of relay's hook output: "systemMessage" (shown to the user),
# "decision" and "reason", "continue": False with "stopReason" (relay hooks schema --output).
answer = {}
print(json.dumps(answer))
""",
    },
    "node": {
        "decision": """#!/usr/bin/env node
@HEADER@
const event = JSON.parse(require("fs").readFileSync(0, "utf8"));
const toolInput = event.tool_input || {}; // here like @TOOL_INPUT@
let answer = {}; // no opinion: the tool runs
if (String(toolInput["@FIELD@"] || "").includes("@PATTERN@")) {
  answer = { decision: "deny", reason: "@REASON@" };
}
console.log(JSON.stringify(answer));
""",
        "context": """#!/usr/bin/env node
@HEADER@
const event = JSON.parse(require("fs").readFileSync(0, "utf8"));
// "inject" is text for the agent: context it reads with the event.
console.log(JSON.stringify({ inject: "@INJECT@" }));
""",
        "observe": """#!/usr/bin/env node
@HEADER@
const event = JSON.parse(require("fs").readFileSync(0, "utf8"));
// To answer, add fields of relay's hook output: systemMessage (shown to the user),
// decision and reason, continue: false with stopReason (relay hooks schema --output).
const answer = {};
console.log(JSON.stringify(answer));
""",
    },
    "perl": {
        "decision": """#!/usr/bin/env perl
@HEADER@
use strict;
use warnings;
use JSON::PP;

my $event = decode_json(do { local $/; <STDIN> });
my $tool_input = $event->{tool_input} || {};    # here like @TOOL_INPUT@
my $answer = {};                                # no opinion: the tool runs
if (index($tool_input->{"@FIELD@"} // "", "@PATTERN@") >= 0) {
    $answer = { decision => "deny", reason => "@REASON@" };
}
print encode_json($answer), "\\n";
""",
        "context": """#!/usr/bin/env perl
@HEADER@
use strict;
use warnings;
use JSON::PP;

my $event = decode_json(do { local $/; <STDIN> });
# "inject" is text for the agent: context it reads with the event.
print encode_json({ inject => "@INJECT@" }), "\\n";
""",
        "observe": """#!/usr/bin/env perl
@HEADER@
use strict;
use warnings;
use JSON::PP;

my $event = decode_json(do { local $/; <STDIN> });
# To answer, add fields of relay's hook output: systemMessage (shown to the user),
# decision and reason, continue: false with stopReason (relay hooks schema --output).
my $answer = {};
print encode_json($answer), "\\n";
""",
    },
}
"""Each language's hook, by what it does; @TOKENS@ are filled in by _render."""

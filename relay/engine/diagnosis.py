"""Warnings that teach: what a hook did that probably isn't what its author meant.

Pure functions over a HookTrace (what relay sent, what the hook printed, how it exited),
for `relay hooks test`, and over a hook's script file, for `relay hooks test` and
`relay hooks validate`. The engine's own warnings (unknown output fields) come with the
trace's report; these add the mistakes hook authors make most.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

import msgspec

from relay.config.model import MILLISECOND_SUSPECT, HookEntry
from relay.engine.command import PROJECT_VARS, prepare_launch
from relay.engine.trace import HookTrace
from relay.protocol.answers import PLAIN_TEXT_INJECTS, ProtocolError, decode_output

STALE_FIELDS: dict[str, str] = {
    "tool_result": "tool_response",
    "user_prompt": "prompt",
    "toolName": "tool_name",
    "toolInput": "tool_input",
}
"""Names from older Claude Code releases (or misremembered), and relay's current name."""

SHEBANG_LIMIT = 256  # the kernel reads no more of a #! line (BINPRM_BUF_SIZE)
SNIFFED_BYTES = 4096

SCRIPT_LANGUAGES: dict[str, tuple[tuple[str, ...], str, re.Pattern[str]]] = {
    "Python": (
        (".py", ".pyw"),
        "python3",
        re.compile(r"^(?:import \w|from [\w.]+ import |def \w+\(|print\()", re.MULTILINE),
    ),
    "JavaScript": (
        (".js", ".cjs", ".mjs"),
        "node",
        re.compile(r"require\(|console\.log\(|JSON\.parse\(|^(?:const|let) \w+ = ", re.MULTILINE),
    ),
    "Perl": ((".pl", ".pm"), "perl", re.compile(r"^use (?:strict|warnings|JSON)", re.MULTILINE)),
    "Ruby": ((".rb",), "ruby", re.compile(r"^require ['\"]json['\"]", re.MULTILINE)),
}
"""Languages a script without a #! line may be written in: its suffixes, the interpreter
its #! line should name, and lines that give it away."""

_decoder = msgspec.json.Decoder()


def diagnose(trace: HookTrace, event: str, *, fail_closed: bool = False) -> list[str]:
    """Teaching warnings for one hook run of `event` (canonical name)."""
    warnings: list[str] = []
    report = trace.report
    stdout, stderr = trace.stdout.strip(), trace.stderr.strip()
    if report.exit_code not in (None, 0, 2) and stderr:
        warnings.append(
            f"exit code {report.exit_code} does not block: only exit 2 denies. This hook fails "
            "open and the action goes ahead; exit 2 (or answer a deny decision) to block"
        )
    if stderr.startswith("{") and _is_json_object(stderr):
        warnings.append(
            "a JSON object was printed on stderr, where relay ignores it: print it on stdout"
            + (
                " (in Python: print(json.dumps(answer)), without file=sys.stderr)"
                if not stdout
                else ""
            )
        )
    reading = _stdout_reading(stdout)
    if report.exit_code == 0 and isinstance(reading, str):
        field = "inject" if event in PLAIN_TEXT_INJECTS else "systemMessage"
        warnings.append(f"stdout is not JSON: relay read it as plain text, as `{field}`")
    if report.exit_code == 0 and isinstance(reading, ProtocolError):
        # The error says what is wrong with the text; this says what relay did about it.
        outcome = (
            "this hook is failClosed, so the event is denied"
            if fail_closed
            else "the hook counts as failed and fails open: its answer is ignored and the "
            "action goes ahead (a failClosed hook would deny)"
        )
        warnings.append(f"relay could not read stdout as an answer: {outcome}")
    if report.exit_code == 2 and isinstance(reading, str):
        warnings.append("plain-text stdout is ignored on exit 2: the reason comes from stderr")
    if report.exit_code == 2 and not stderr:
        warnings.append(
            'exit 2 with empty stderr: the model sees only "hook exited with code 2"; say why on stderr'
        )
    for stale, current in STALE_FIELDS.items():
        if stale in stdout or stale in stderr:
            warnings.append(
                f"`{stale}` appears in the hook's output: relay (like current Claude Code) calls it `{current}`"
            )
    if trace.timeout > MILLISECOND_SUSPECT:
        warnings.append(
            f"timeout {trace.timeout:g} looks like milliseconds: relay's timeouts are in seconds"
        )
    if report.timed_out:
        warnings.append(
            f"timed out after {trace.timeout:g}s and was killed: raise `timeout` or make it faster"
        )
    return warnings


def _stdout_reading(stdout: str) -> dict[str, object] | str | ProtocolError | None:
    """What the engine made of stdout: an object, plain text, or the error it raised."""
    try:
        obj, text = decode_output(stdout.encode(errors="surrogateescape"))
    except ProtocolError as exc:
        return exc
    return obj if obj is not None else text


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(_decoder.decode(text), dict)
    except msgspec.DecodeError:
        return False


# --- the script a hook runs ------------------------------------------------------------------


def script_of(entry: HookEntry, root: Path) -> Path | None:
    """The file a hook's command executes itself (not through an interpreter named in the
    command), when it names one by a path: `./guard.sh`, `"$RELAY_PROJECT_DIR"/hooks/x`."""
    launch = prepare_launch(entry.command, entry.args, dict.fromkeys(PROJECT_VARS, str(root)))
    if launch.mode != "shell":
        program = launch.argv[0]
    else:  # `./guard.sh && …`: sh executes the first word as a program too
        try:
            words = shlex.split(launch.argv[-1])
        except ValueError:
            return None
        program = words[0] if words and "$" not in words[0] else ""
    if "/" not in program:
        return None  # found on PATH: not a file of the user's to check
    return Path(root, os.path.expanduser(entry.cwd or ""), os.path.expanduser(program))


def script_problems(script: Path, *, path_env: str | None = None) -> list[str]:
    """Why a hook's script would not run as its author meant, each with its fix: no execute
    bit, a #! line with text after the interpreter, an interpreter that is missing or not
    executable, or no #! line on a script in another language than sh's."""
    try:
        status = script.stat()
    except OSError:
        return []  # missing: the run's own error says "command not found"
    if not stat.S_ISREG(status.st_mode):
        return []
    problems: list[str] = []
    if not status.st_mode & 0o111:
        problems.append(
            f"{script} is not executable; every run would fail with permission denied "
            f"(to fix: chmod +x {shlex.quote(str(script))})"
        )
    try:
        with script.open("rb") as stream:
            head = stream.read(SNIFFED_BYTES)
    except OSError:
        return problems
    if head.startswith(b"\x7fELF"):
        return problems
    if head.startswith(b"#!"):
        problems.extend(_shebang_problems(script, head, path_env))
    else:
        problems.extend(_unannounced_language(script, head))
    return problems


def _shebang_problems(script: Path, head: bytes, path_env: str | None) -> list[str]:
    raw = head[2:SHEBANG_LIMIT].split(b"\n", 1)[0]
    line = os.fsdecode(raw).strip(" \t\r")
    shown = f"#!{line}"
    if not line:
        return [f"{script}: its #! line names no interpreter; write one, such as #!/bin/sh"]
    words = line.split(None, 1)
    program, rest = words[0], (words[1] if len(words) > 1 else "")
    problems: list[str] = []
    if "#" in rest:
        comment = rest[rest.index("#") :]
        kept = rest[: rest.index("#")].strip()
        problems.append(
            f"{script}: its #! line `{shown}` has text after the interpreter: the kernel hands "
            f"{rest!r} to {program} as one argument, so {program} tries to open "
            f"{comment!r} as the script and fails (sh: `cannot open {comment}`); put the "
            f"comment on a line of its own: `#!{program}{' ' + kept if kept else ''}`"
        )
    interpreter = Path(program)
    if not interpreter.is_absolute():
        return problems
    if not interpreter.exists():
        named = os.path.basename(program)
        found = shutil.which(named, path=path_env)
        fix = f"#!{found}" if found else f"#!/usr/bin/env {named}"
        problems.append(
            f"{script}: its #! line names {program}, which does not exist, so every run fails "
            f'("command not found" for the script itself); to fix: make its first line `{fix}`'
        )
        return problems
    if interpreter.is_dir() or not os.access(interpreter, os.X_OK):
        problems.append(
            f"{script}: its #! interpreter {program} is not an executable file, so every run "
            f"fails with permission denied; name the interpreter's real path (`command -v` prints it)"
        )
        return problems
    if os.path.basename(program) == "env" and rest and "#" not in rest:
        words = rest.split()
        if words[0] == "-S":
            words = words[1:]
        elif len(words) > 1 and not words[0].startswith("-"):
            problems.append(
                f"{script}: its #! line `{shown}` makes env look for one program named "
                f"{rest!r}; to pass options, write `#!{program} -S {rest}`"
            )
            return problems
        named = words[0] if words and not words[0].startswith("-") and "=" not in words[0] else ""
        if named and shutil.which(named, path=path_env) is None:
            problems.append(
                f"{script}: its #! line runs `env {named}`, and {named} is not on PATH, so "
                "every run fails (exit 127); install it, or name the interpreter by its path"
            )
    return problems


def _unannounced_language(script: Path, head: bytes) -> list[str]:
    """A script without a #! line runs under /bin/sh (as sh itself runs one): a warning when
    it is written in another language."""
    text = head.decode("utf-8", "replace")
    for language, (suffixes, interpreter, giveaway) in SCRIPT_LANGUAGES.items():
        if script.name.endswith(suffixes) or giveaway.search(text):
            return [
                f"{script} has no #! line, so it runs under /bin/sh, but it looks like "
                f"{language}: sh fails on its first line (such as `import: not found`); to fix: "
                f"make its first line `#!/usr/bin/env {interpreter}`, or register the command "
                f"as `{interpreter} {script.name}`"
            ]
    return []


def hook_script_problems(
    entry: HookEntry, root: Path, env: Mapping[str, str] | None = None
) -> list[str]:
    """script_problems for the script a hook's command runs, if it runs one by a path."""
    script = script_of(entry, root)
    if script is None:
        return []
    environ = dict(os.environ if env is None else env)
    environ.update(entry.env or {})
    return script_problems(script, path_env=environ.get("PATH"))

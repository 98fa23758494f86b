#!/usr/bin/env python3
"""format_on_write.py: after the agent writes a file, run the project's formatter and linter on it.

Event: AfterTool (Claude Code: PostToolUse), for the file-writing tools Write, Edit,
MultiEdit (Claude Code), write_file, replace (Gemini CLI); reads tool_input.file_path (or
path). Only files inside the project are touched.

Answer: when a tool changed the file or found problems, one JSON object: `systemMessage`,
a line for the user, and `hookSpecificOutput.additionalContext` (relay: inject), telling
the agent what changed and which problems to fix. No output when no tool applies, none is
installed, or all is clean.

Tools, by file type; each is looked for in the project's .venv/bin, venv/bin and
node_modules/.bin, then on PATH (never downloaded):
  .py .pyi                 ruff format (else black), then ruff check
  .go                      gofmt
  .js .ts .css .json .md … prettier
  .sh .bash                shfmt, then shellcheck
Each tool gets RELAY_FORMAT_TIMEOUT seconds (default 20) and is then killed with all its
children; keep the hook's own timeout above twice that. Standard library, Python 3.9+.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

TIMEOUT = float(os.environ.get("RELAY_FORMAT_TIMEOUT") or 20)
TAIL_LINES = 20
TAIL_CHARS = 2000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

Tool = tuple[str, list[str]]  # (name shown to people, command without the file)
Tools = tuple[list[Tool], list[Tool]]  # (formatters, linters): the first one found of each runs
RUFF_CHECK = ["ruff", "check", "--force-exclude", "--no-fix", "--output-format=concise", "--quiet"]
PYTHON: Tools = (
    [("ruff format", ["ruff", "format", "--force-exclude"]), ("black", ["black", "--quiet"])],
    [("ruff check", RUFF_CHECK)],
)
PRETTIER: Tools = ([("prettier", ["prettier", "--write"])], [])
SHELL: Tools = ([("shfmt", ["shfmt", "-w"])], [("shellcheck", ["shellcheck", "--format=gcc"])])
PRETTIER_TYPES = (
    ".js .jsx .mjs .cjs .ts .tsx .mts .cts .css .scss .less .html .vue .json .md .yaml .yml"
)
TOOLS: dict[str, Tools] = {
    ".py": PYTHON,
    ".pyi": PYTHON,
    ".go": ([("gofmt", ["gofmt", "-w"])], []),
    ".sh": SHELL,
    ".bash": SHELL,
    **dict.fromkeys(PRETTIER_TYPES.split(), PRETTIER),
}
LOCAL_BIN = (".venv/bin", "venv/bin", "node_modules/.bin")

RUNNING: list[subprocess.Popen[bytes]] = []  # for on_sigterm


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the tool's whole process group: its children must not outlive it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """relay's timeout: the tool runs in a session of its own, so take it down too."""
    for process in RUNNING:
        kill(process)
    sys.exit(128 + signum)


def find(program: str, root: Path) -> str | None:
    """The project's own copy of a tool first, then the one on PATH."""
    for folder in LOCAL_BIN:
        candidate = root / folder / program
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(program)


def first_available(tools: list[Tool], root: Path) -> Tool | None:
    """The first of `tools` installed, with the full path of its program."""
    for label, argv in tools:
        program = find(argv[0], root)
        if program is not None:
            return label, [program, *argv[1:]]
    return None


def run(argv: list[str], root: Path) -> tuple[int | None, str]:
    """Run a tool for at most TIMEOUT seconds: (exit code, or None on timeout; its output)."""
    try:
        process = subprocess.Popen(
            argv,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, to kill it with its children
        )
    except OSError as error:
        return 127, str(error)
    RUNNING.append(process)
    code: int | None
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
        code = process.returncode
    except subprocess.TimeoutExpired:
        kill(process)
        try:
            output, _ = process.communicate(timeout=2)
        except subprocess.TimeoutExpired:  # a grandchild escaped and holds the pipe
            output = b""
        code = None
    RUNNING.remove(process)
    return code, ANSI.sub("", output.decode(errors="replace"))


def tail(text: str) -> str:
    lines = text.strip().splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:] or "(no output)"


class Report:
    """What the tools did: one line each for the user, and what the agent should know."""

    def __init__(self) -> None:
        self.for_user: list[str] = []
        self.for_agent: list[str] = []

    def answer(self, event_name: str) -> dict[str, object] | None:
        if not self.for_user:
            return None
        answer: dict[str, object] = {
            "systemMessage": "format-on-write: " + "; ".join(self.for_user)
        }
        if self.for_agent:
            answer["hookSpecificOutput"] = {
                "hookEventName": event_name,
                "additionalContext": "\n\n".join(self.for_agent),
            }
        return answer


def format_file(tool: Tool, path: Path, relative: str, root: Path, report: Report) -> None:
    label, argv = tool
    before = path.read_bytes()
    code, output = run([*argv, relative], root)
    if code is None:
        report.for_user.append(f"{label} timed out after {TIMEOUT:g}s on {relative}")
    elif code != 0:
        report.for_user.append(f"{label} failed on {relative}")
        report.for_agent.append(
            f"{label} could not format {relative} (exit {code}):\n{tail(output)}"
        )
    elif path.read_bytes() != before:
        report.for_user.append(f"{label} reformatted {relative}")
        report.for_agent.append(
            f"{label} reformatted {relative} after your edit; read it again before editing it further."
        )


def lint_file(tool: Tool, relative: str, root: Path, report: Report) -> None:
    label, argv = tool
    code, output = run([*argv, relative], root)
    if code is None:
        report.for_user.append(f"{label} timed out after {TIMEOUT:g}s on {relative}")
    elif code != 0:
        report.for_user.append(f"{label} found problems in {relative}")
        report.for_agent.append(
            f"{label} reports problems in {relative}; fix them:\n{tail(output)}"
        )


def written_file(event: object) -> tuple[Path, Path] | None:
    """(the project root, the file the tool wrote), or None when there is no such file."""
    if not isinstance(event, dict) or not isinstance(event.get("tool_input"), dict):
        return None
    name = event["tool_input"].get("file_path") or event["tool_input"].get("path")
    if not isinstance(name, str) or not name:
        return None
    cwd = event.get("cwd") if isinstance(event.get("cwd"), str) else os.getcwd()
    variables = ("RELAY_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")
    project = next((os.environ[key] for key in variables if os.environ.get(key)), cwd)
    path = (Path(cwd) / name).resolve()
    return (Path(project).resolve(), path) if path.is_file() else None


def main() -> int:
    try:
        event = json.load(sys.stdin)
    except ValueError as error:
        print(f"format_on_write.py: the event is not JSON: {error}", file=sys.stderr)
        return 1
    found = written_file(event)
    if found is None:
        return 0
    root, path = found
    if not path.is_relative_to(root):
        return 0  # outside the project: not ours to format
    relative = str(path.relative_to(root))
    if relative.startswith("-"):
        relative = f"./{relative}"  # not to be read as an option
    formatters, linters = TOOLS.get(path.suffix.lower(), ([], []))
    report = Report()
    formatter = first_available(formatters, root)
    if formatter is not None:
        format_file(formatter, path, relative, root, report)
    linter = first_available(linters, root)
    if linter is not None:
        lint_file(linter, relative, root, report)
    answer = report.answer(event.get("hook_event_name") or "AfterTool")
    if answer is not None:
        print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    sys.exit(main())

"""Reading one hook's answer: exit code + stdout + stderr -> a normalized Answer (DESIGN §3, §4).

Pure: no I/O. Dialect differences (Claude's permissionDecision, updatedInput, legacy
approve/block) are folded into relay's meaning here, so the aggregator sees one shape.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import msgspec

from relay.protocol.decoding import JsonDecodeError, decode_json, json_type, split_validation_error
from relay.protocol.dialects import Dialect
from relay.protocol.output import (
    HOOK_OUTPUT_FIELDS,
    HOOK_SPECIFIC_FIELDS,
    HOST_SPECIFIC_FIELDS,
    Decision,
    HookOutput,
    ToolConfig,
)

PLAIN_TEXT_INJECTS: frozenset[str] = frozenset(
    {"SessionStart", "BeforeAgent", "MessageReceived", "Idle", "PatternMatch"}
)
"""Events whose plain-text stdout is `inject`; for the rest it is `systemMessage`."""

STDERR_LINES_IN_ERRORS = 5
STDERR_CHARS_IN_ERRORS = 2_000


class Answer(msgspec.Struct, kw_only=True):
    """One hook's answer in relay's meaning, ready to merge."""

    output: HookOutput | None = None
    decision: Decision | None = None
    reason: str | None = None
    inject: str | None = None
    stop: bool = False
    continue_: bool | None = None
    stopReason: str | None = None
    systemMessage: str | None = None
    suppressOutput: bool = False
    terminalSequence: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_input_replaces: bool = False
    llm_request: dict[str, Any] | None = None
    llm_response: dict[str, Any] | None = None
    toolConfig: ToolConfig | None = None
    clearContext: bool | None = None
    body: str | None = None
    extra_specific: dict[str, Any] = msgspec.field(default_factory=dict)
    error: str | None = None
    warnings: list[str] = msgspec.field(default_factory=list)


class ProtocolError(ValueError):
    """A hook's stdout that is JSON but not a valid answer; `path` names the field."""

    def __init__(self, message: str, path: str = "$") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path != "$" else message)


_NON_JSON_NUMBER = re.compile(rb"[:\[,]\s*-?(?:NaN|Infinity)\b")
_PYTHON_REPR = re.compile(rb"[{\[,:]\s*'|[:\[,]\s*(?:True|False|None)\b")
"""Single-quoted strings, or True/False/None: Python's repr of a dict, as print(dict) writes it."""


def first_lines(data: bytes | str, limit: int = STDERR_LINES_IN_ERRORS) -> str:
    """The first lines of a hook's stderr, for an error message."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    lines = text.strip().splitlines()
    shown = "\n".join(lines[:limit])
    if len(shown) > STDERR_CHARS_IN_ERRORS:  # one huge line is as bad as many
        return shown[:STDERR_CHARS_IN_ERRORS] + "…"
    return shown + ("\n…" if len(lines) > limit else "")


def decode_output(stdout: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """Split stdout into a JSON object or plain text; raise ProtocolError for other JSON."""
    text = stdout.strip()
    if not text:
        return None, None
    if text[:1] not in b'{["0123456789-tfn':
        return None, text.decode("utf-8", "replace")
    try:
        value = decode_json(text)
    except JsonDecodeError as exc:
        if exc.syntax and text[:1] not in b"{[":
            return None, text.decode("utf-8", "replace")  # not JSON: plain text
        # Text that opens like a JSON object or array was meant as one: reading it as
        # plain text would silently drop its decision (a failClosed guard would allow).
        raise ProtocolError(f"unreadable JSON: {exc}{_likely_cause(text, str(exc))}") from None
    if isinstance(value, str):
        # A JSON string whose content is a JSON object is decoded once more.
        with contextlib.suppress(JsonDecodeError):
            value = decode_json(value.encode())
    if not isinstance(value, dict):
        raise ProtocolError(f"hook output must be a JSON object, got {json_type(value)}")
    return value, None


def _likely_cause(text: bytes, message: str) -> str:
    """The usual mistake behind JSON that does not parse, and its fix ("" when none fits)."""
    if _PYTHON_REPR.search(text):
        return (
            "; this looks like Python's print(dict), which writes single quotes and "
            "True/False/None: print(json.dumps(answer)) writes JSON"
        )
    if "trailing comma" in message:
        return "; JSON allows no comma after the last member: remove it"
    if _NON_JSON_NUMBER.search(text):
        return "; JSON has no NaN or Infinity"
    return ""


def read_output(
    obj: dict[str, Any], *, dialect: Dialect, pass_through: bool
) -> tuple[HookOutput, dict[str, Any], list[str]]:
    """Validate a decoded JSON object as a HookOutput; unknown fields become warnings."""
    warnings = [
        f"unknown field $.{key} ignored{_meant(key, HOOK_OUTPUT_FIELDS, HOOK_SPECIFIC_FIELDS)}"
        for key in obj
        if key not in HOOK_OUTPUT_FIELDS
    ]
    extra: dict[str, Any] = {}
    specific = obj.get("hookSpecificOutput")
    if isinstance(specific, dict):
        for key in specific:
            if key not in HOOK_SPECIFIC_FIELDS:
                extra[key] = specific[key]
                # Claude's other events define their own fields: pass them on quietly.
                if not (dialect == "claude" and pass_through):
                    meant = _meant(key, HOOK_SPECIFIC_FIELDS, HOOK_OUTPUT_FIELDS, inside=True)
                    warnings.append(
                        f"unknown field $.hookSpecificOutput.{key} passed through{meant}"
                    )
    try:
        output = msgspec.convert(obj, HookOutput)
    except msgspec.ValidationError as exc:
        raise ProtocolError(*split_validation_error(exc)) from None
    return output, extra, warnings


def _meant(key: str, here: frozenset[str], there: frozenset[str], *, inside: bool = False) -> str:
    """What an unknown field probably meant: the same name one level up or down, or a
    close spelling here; "" when nothing is close."""
    if key in there and key != "hookSpecificOutput":
        if inside:
            return f" (it belongs at the top level: $.{key})"
        return f" (it belongs in hookSpecificOutput: $.hookSpecificOutput.{key})"
    import difflib

    close = difflib.get_close_matches(key, sorted(here), n=1, cutoff=0.75)
    if close:
        return f" (did you mean {close[0]!r}?)"
    close = difflib.get_close_matches(key, sorted(there), n=1, cutoff=0.75)
    if close and not inside:
        return f" (did you mean $.hookSpecificOutput.{close[0]}?)"
    if close:
        return f" (did you mean $.{close[0]}, at the top level?)"
    return ""


def normalize(output: HookOutput, extra: dict[str, Any], warnings: list[str]) -> Answer:
    """Fold dialect spellings into relay's meaning."""
    decision = _relay_decision(output.decision)
    reason = output.reason
    injects = [output.inject] if output.inject else []  # empty strings add nothing
    answer = Answer(
        output=output,
        stop=bool(output.stop),
        continue_=output.continue_,
        stopReason=output.stopReason,
        systemMessage=output.systemMessage,
        suppressOutput=bool(output.suppressOutput),
        terminalSequence=output.terminalSequence or None,
        extra_specific=extra,
        warnings=warnings,
    )
    specific = output.hookSpecificOutput
    if specific is not None:
        if specific.permissionDecision is not None:
            # Claude: permissionDecision takes precedence over the legacy top-level decision.
            decision = specific.permissionDecision
            if specific.permissionDecisionReason is not None:
                reason = specific.permissionDecisionReason
        if specific.additionalContext:
            injects.append(specific.additionalContext)
        if specific.updatedInput is not None:
            answer.tool_input = specific.updatedInput
            answer.tool_input_replaces = True
        elif specific.tool_input is not None:
            answer.tool_input = specific.tool_input
        answer.llm_request = specific.llm_request
        answer.llm_response = specific.llm_response
        answer.toolConfig = specific.toolConfig
        answer.clearContext = specific.clearContext
        answer.body = specific.body
        for name in HOST_SPECIFIC_FIELDS:
            value = getattr(specific, name)
            if value is not None:
                extra[name] = value
    answer.decision = decision
    answer.reason = reason
    answer.inject = "\n".join(injects) if injects else None
    return answer


def parse_answer(
    event: str,
    *,
    exit_code: int | None,
    stdout: bytes,
    stderr: bytes,
    dialect: Dialect = "relay",
    pass_through: bool = False,
) -> Answer:
    """Interpret a finished hook process (exit code 0 or 2) per DESIGN §3 and §4."""
    if exit_code not in (0, 2):
        detail = first_lines(stderr)
        what = f"hook exited with code {exit_code}"
        return Answer(error=f"{what}: {detail}" if detail else what)
    try:
        obj, text = decode_output(stdout)
        if obj is not None:
            answer = normalize(*read_output(obj, dialect=dialect, pass_through=pass_through))
        elif text is not None and exit_code == 0:
            if event in PLAIN_TEXT_INJECTS:
                answer = Answer(inject=text)
            else:
                answer = Answer(systemMessage=text)
        else:
            answer = Answer()
    except ProtocolError as exc:
        if exit_code == 2:
            # Exit 2 is authoritative even when stdout is unreadable.
            answer = Answer(warnings=[f"stdout ignored: {exc}"])
        else:
            return Answer(error=f"protocol error: {exc}")
    if exit_code == 2:
        answer.decision = "deny"
        stderr_text = stderr.decode("utf-8", "replace").strip()
        answer.reason = stderr_text or answer.reason or "hook exited with code 2"
    return answer


def _relay_decision(decision: str | None) -> Decision | None:
    if decision == "block":
        return "deny"
    if decision == "approve":
        return "allow"
    return decision  # type: ignore[return-value]


def answer_from_value(
    event: str, value: object, *, dialect: Dialect = "relay", pass_through: bool = False
) -> Answer:
    """Interpret what an in-process (Python) hook returned, by the same rules as stdout."""
    if value is None:
        return Answer()
    if isinstance(value, HookOutput):
        return normalize(value, {}, [])
    if isinstance(value, str):
        return parse_answer(
            event,
            exit_code=0,
            stdout=value.encode(),
            stderr=b"",
            dialect=dialect,
            pass_through=pass_through,
        )
    if isinstance(value, dict):
        try:
            return normalize(*read_output(value, dialect=dialect, pass_through=pass_through))
        except ProtocolError as exc:
            return Answer(error=f"protocol error: {exc}")
    kind = type(value).__name__
    return Answer(
        error=f"protocol error: a Python hook must return a dict, HookOutput, str or None, got {kind}"
    )

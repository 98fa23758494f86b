"""Warnings that teach: what a hook did that probably isn't what its author meant.

Pure functions over a HookTrace (what relay sent, what the hook printed, how it exited),
for `relay hooks test`. The engine's own warnings (unknown output fields) come with the
trace's report; these add the mistakes hook authors make most.
"""

from __future__ import annotations

import msgspec

from relay.config.model import MILLISECOND_SUSPECT
from relay.engine.trace import HookTrace
from relay.protocol.answers import PLAIN_TEXT_INJECTS

STALE_FIELDS: dict[str, str] = {
    "tool_result": "tool_response",
    "user_prompt": "prompt",
    "toolName": "tool_name",
    "toolInput": "tool_input",
}
"""Names from older Claude Code releases (or misremembered), and relay's current name."""

_decoder = msgspec.json.Decoder()


def diagnose(trace: HookTrace, event: str) -> list[str]:
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
        )
    if report.exit_code == 0 and stdout and not _is_json(stdout):
        field = "inject" if event in PLAIN_TEXT_INJECTS else "systemMessage"
        warnings.append(f"stdout is not JSON: relay read it as plain text, as `{field}`")
    if report.exit_code == 2 and stdout and not _is_json(stdout):
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


def _is_json(text: str) -> bool:
    try:
        _decoder.decode(text)
    except msgspec.DecodeError:
        return False
    return True


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(_decoder.decode(text), dict)
    except msgspec.DecodeError:
        return False

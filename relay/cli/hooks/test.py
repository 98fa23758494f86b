"""`relay hooks test`: try hooks on a realistic event and see exactly what relay saw and decided.

Exit codes: 0 when `--expect` holds (with no `--expect`: when no hook errored), 1 when it
does not, 2 on usage errors (unknown event, bad --set, unreadable --input, unknown --hook).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import click

from relay.cli.options import UsageError, cwd_option, settings_option
from relay.engine.trial import EXPECTATIONS
from relay.errors import did_you_mean
from relay.protocol.display import json_visible, visible

SHOWN_LINES = 12
SHOWN_CHARS = 1200


@click.command("test")
@click.argument("event")
@click.option(
    "--tool", help="Tool name for tool events (Bash, Write, Edit, Read, mcp__server__tool, …)."
)
@click.option(
    "--input",
    "input_file",
    type=click.File("rb"),
    help="JSON object merged onto the example event ('-': stdin).",
)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="PATH=JSON",
    help="Set a field: --set 'tool_input.command=\"ls\"'.",
)
@click.option("--hook", "hook_name", help="Run only the registered hook with this name.")
@click.option("--command", help="Run this command as an ad-hoc hook (not registered yet) instead.")
@click.option(
    "--expect", type=click.Choice(EXPECTATIONS), help="Exit 1 unless the merged result is this."
)
@click.option("--json", "as_json", is_flag=True, help="Print everything as one JSON object.")
@settings_option
@cwd_option
@click.pass_context
def test(
    ctx: click.Context,
    *,
    event: str,
    tool: str | None,
    input_file: IO[bytes] | None,
    assignments: tuple[str, ...],
    hook_name: str | None,
    command: str | None,
    expect: str | None,
    as_json: bool,
    settings_files: tuple[Path, ...],
    cwd: Path | None,
) -> None:
    """Try the hooks for EVENT on a realistic example event, and explain the outcome."""
    import msgspec

    from relay.engine.system import HookSystem
    from relay.engine.trial import holds, try_hooks
    from relay.protocol.codec import EventError, make_event
    from relay.protocol.dialects import UnknownEventError, canonical_name
    from relay.protocol.fixtures import PathError, example_event, set_path

    if hook_name and command:
        raise UsageError("--hook and --command are alternatives: give one")
    try:
        canonical = canonical_name(event)
    except UnknownEventError as exc:
        raise UsageError(str(exc), hint="EVENT") from None
    project = (cwd or Path.cwd()).resolve()
    payload = example_event(event, tool=tool, cwd=str(project))
    if input_file is not None:
        try:
            given = msgspec.json.decode(input_file.read())
        except msgspec.DecodeError as exc:
            raise UsageError(f"not JSON: {exc}", hint="--input") from None
        if not isinstance(given, dict):
            raise UsageError("must be a JSON object", hint="--input")
        payload.update(given)
    for assignment in assignments:
        path, sep, text = assignment.partition("=")
        if not sep or not path:
            raise UsageError(f"{assignment!r} is not PATH=JSON", hint="--set")
        try:
            set_path(payload, path, _json_or_text(text))
        except PathError as exc:
            raise UsageError(str(exc), hint="--set") from None
    payload.setdefault("cwd", str(project))
    try:
        envelope = make_event(canonical, payload)
    except EventError as exc:
        raise UsageError(str(exc), hint="--input/--set") from None

    system = HookSystem(cwd=project, settings=settings_files)
    if command is not None:
        # Registered under EVENT as given, so a Claude name tries it in the claude dialect.
        system.register_command(event, command, name="(--command)")
        hook_name = "(--command)"
    system.initialize()
    if hook_name is not None and not any(
        hook.name == hook_name and hook.canonical == canonical for hook in system.registry.hooks
    ):
        known = sorted({hook.name for hook in system.registry.hooks if hook.canonical == canonical})
        raise UsageError(
            f"no hook named {hook_name!r}{did_you_mean(hook_name, known)} for {canonical}; "
            f"known: {', '.join(known) or 'none'}",
            hint="--hook",
        )
    try:
        trial = try_hooks(system, envelope, only=hook_name)
    finally:
        system.close()
    ok = holds(trial.result, expect) if expect else not trial.errored  # type: ignore[arg-type]
    if as_json:
        answer = _as_json(trial)
        # The verdict, for a script that checks a hook: what was expected and whether it held.
        answer["expect"] = {"expected": expect, "held": ok} if expect else None
        answer["ok"] = ok
        answer["warnings"] = list(system.warnings())
        click.echo(json.dumps(answer, ensure_ascii=False))
    else:
        for warning in system.warnings():
            _say(f"relay: warning: {warning}", fg="yellow", err=True)
        _print_trial(trial, expect, ok)
    ctx.exit(0 if ok else 1)


def _json_or_text(text: str) -> Any:
    """A --set value: JSON when it parses, else the text itself (so PATH=ls works)."""
    import msgspec

    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _as_json(trial: Any) -> dict[str, Any]:
    import msgspec

    hooks = []
    for tried in trial.hooks:
        trace = tried.trace
        entry = msgspec.to_builtins(trace.report)
        entry["warnings"] = tried.warnings
        entry.update(
            stdin=trace.stdin,
            stdout=trace.stdout,
            stderr=trace.stderr,
            matcher=trace.matcher,
            matched=trace.matched,
            mode=trace.mode,
            argv=trace.argv,
        )
        hooks.append(entry)
    return {
        "event": trial.event,
        "hooks": hooks,
        "skipped": msgspec.to_builtins(trial.skipped),
        "result": msgspec.to_builtins(trial.result),
    }


def _print_trial(trial: Any, expect: str | None, ok: bool) -> None:
    result = trial.result
    _say(f"Event {result.hook_event_name}", bold=True)
    _say(_indent(json_visible(json.dumps(trial.event, indent=2, ensure_ascii=False))))
    if not trial.hooks:
        _say("\nNo hook ran.", fg="yellow")
    for tried in trial.hooks:
        _print_hook(tried)
    # Hooks left out by --hook or --command are one line, not a block each: they are
    # not what is being tried (--json lists each).
    unselected = [skipped for skipped in trial.skipped if skipped.reason.startswith("not selected")]
    for skipped in trial.skipped:
        if skipped in unselected:
            continue
        _say(f"\n○ {skipped.name}", fg="bright_black", bold=True)
        _say(f"  from {skipped.source} (registered under {skipped.registered_as})")
        _say(f"  not run: {skipped.reason}", fg="bright_black")
    if unselected:
        count = len(unselected)
        others = f"{count} other hook{'s' if count != 1 else ''}"
        _say(f"\n○ {others} of this event not run: only the one asked for runs", fg="bright_black")
    _say("\nResult", bold=True)
    colour = {"allow": "green", "ask": "yellow", "deny": "red"}[result.decision]
    line = click.style(result.decision, fg=colour, bold=True)
    click.echo(f"  decision: {line}" + (f"  ({visible(result.reason)})" if result.reason else ""))
    if not result.continue_:
        _say(f"  continue: false ({result.stopReason or 'no reason given'})", fg="red")
    for name in ("inject", "systemMessage", "stopped_by"):
        value = getattr(result, name)
        if value:
            _say(f"  {name}: " + _indent(_shorten(str(value)), 4).lstrip())
    if result.tool_input is not None:
        tool_input = json.dumps(result.tool_input, ensure_ascii=False)
        _say(f"  tool_input: {json_visible(tool_input)}")
    if result.suppressOutput:
        _say("  suppressOutput: true")
    for error in result.errors:
        _say(f"  error from {error.hook}: {error.message}", fg="red")
    for warning in result.warnings:
        _say(f"  warning: {warning}", fg="yellow")
    if expect:
        verdict = click.style(
            "holds" if ok else "does NOT hold", fg="green" if ok else "red", bold=True
        )
        click.echo(f"\nexpected {visible(expect)}: {verdict}")


def _print_hook(tried: Any) -> None:
    trace = _shown_launch(tried.trace)
    report = trace.report
    failed = report.error is not None
    _say(f"\n{'✗' if failed else '●'} {trace.name}", fg="red" if failed else "cyan", bold=True)
    _say(f"  from {trace.source} (registered under {trace.registered_as}, {trace.dialect} dialect)")
    _say(f"  matched: {trace.matched}")
    started = " ".join(trace.argv) if trace.mode != "shell" else trace.argv[-1]
    _say(f"  started: {trace.mode}: {started}" + (f"   [cwd {trace.cwd}]" if trace.cwd else ""))
    outcome = _exit_words(report)
    _say(f"  {outcome} in {report.duration_ms:.1f} ms (timeout {trace.timeout:g}s)")
    for label, text in (("stdin", trace.stdin), ("stdout", trace.stdout), ("stderr", trace.stderr)):
        _say(
            f"  {label}:" + (" (empty)" if not text.strip() else "\n" + _indent(_shorten(text), 4))
        )
    if report.output is not None:
        import msgspec

        _say(f"  answer: {json_visible(msgspec.json.encode(report.output).decode())}")
    if report.error:
        _say(f"  error: {report.error}", fg="red")
    for warning in tried.warnings:
        _say(f"  ⚠ {warning}", fg="yellow")


def _say(text: str, *, err: bool = False, **style: Any) -> None:
    """A line of the report: hooks' names, commands, output and answers are a project's or
    a hook's text, made visible before relay's own colours go on."""
    click.secho(visible(text), err=err, **style)


def _exit_words(report: Any) -> str:
    if report.timed_out:
        return "timed out"
    if report.signal:
        return f"killed by {report.signal}"
    if report.exit_code is None:
        return "returned" if report.error is None else "failed"
    return f"exit {report.exit_code}"


def _shorten(text: str) -> str:
    text = visible(text.rstrip("\n"))  # a hook's output must not act on the terminal
    lines = text.splitlines()
    cut = "\n".join(lines[:SHOWN_LINES])
    if len(cut) > SHOWN_CHARS:
        cut = cut[:SHOWN_CHARS]
    hidden = len(text) - len(cut)
    return cut + (f"\n… ({hidden} more characters)" if hidden > 0 else "")


def _indent(text: str, spaces: int = 2) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in text.splitlines()) if text else pad


def _shown_launch(trace: Any) -> Any:
    """The trace with its argv as shown: a pinned hook's argv holds its checked script's
    text or relay's bootstrap (protocol.md §9), which are shown by their size."""
    if trace.mode != "pinned":
        return trace
    import msgspec

    argv = [
        f"<{len(word.encode(errors='surrogateescape')):,} bytes>"
        if "\n" in word or len(word) > 200
        else word
        for word in trace.argv
    ]
    return msgspec.structs.replace(trace, argv=argv)

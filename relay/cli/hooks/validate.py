"""`relay hooks validate`: check settings files and print every error and warning."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
import msgspec

from relay.cli.options import cwd_option, settings_option
from relay.config.loader import render_path
from relay.protocol.display import visible

if TYPE_CHECKING:
    from relay.config.loader import SettingsReport
    from relay.config.model import ConfigWarning
    from relay.errors import SettingsError


class _Problem(msgspec.Struct):
    message: str
    path: str | None
    line: int | None
    column: int | None


class _FileResult(msgspec.Struct):
    file: str
    scope: str
    errors: list[_Problem]
    warnings: list[_Problem]


class _Output(msgspec.Struct):
    files: list[_FileResult]
    ok: bool


@click.command("validate")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@cwd_option
@settings_option
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.pass_context
def validate(
    ctx: click.Context,
    files: tuple[Path, ...],
    cwd: Path | None,
    settings_files: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Check settings files and print every error and warning.

    Without FILE, checks the settings files that apply here (system, user, project,
    project-local), and the --settings files. Also warns about a hook whose script is not
    executable. Exits 1 if any file has an error; warnings alone exit 0.
    """
    from relay.config.discovery import discover
    from relay.config.loader import check_settings_file
    from relay.config.model import Scope
    from relay.config.paths import find_project_root

    start = cwd or Path.cwd()
    discovered = discover(start)
    if files:
        # A file named on the command line keeps the scope it has here, if it is one of ours.
        scopes: dict[Path, Scope] = {path.resolve(): scope for path, scope in discovered}
        targets = [(path, scopes.get(path.resolve(), "settings")) for path in files]
    else:
        targets = discovered
    targets = [*targets, *((path, "settings") for path in settings_files)]
    root = find_project_root(start) or start
    reports: list[SettingsReport] = [check_settings_file(path, scope) for path, scope in targets]
    for report in reports:
        report.warnings.extend(_unrunnable_programs(report, root))
    errors = sum(len(report.errors) for report in reports)
    if as_json:
        output = _Output(files=[_file_result(report) for report in reports], ok=errors == 0)
        click.echo(msgspec.json.format(msgspec.json.encode(output), indent=2).decode())
    else:
        if not reports:
            click.echo(visible(f"no settings files apply in {start}"))
        for report in reports:
            _print_report(report)
        warnings = sum(len(report.warnings) for report in reports)
        click.echo(
            f"{_count(len(reports), 'file')}, {_count(errors, 'error')}, "
            f"{_count(warnings, 'warning')}"
        )
    ctx.exit(1 if errors else 0)


def _unrunnable_programs(report: SettingsReport, root: Path) -> list[ConfigWarning]:
    """A warning for each hook whose script would not run as meant: no execute bit (it
    would fail with "permission denied" on every event), a #! line with text after the
    interpreter, an interpreter that is missing, no #! line on a Python or Node script."""
    from relay.config.loader import locate
    from relay.config.model import ConfigWarning, HookEntry
    from relay.engine.diagnosis import hook_script_problems

    if report.settings is None:
        return []
    found: list[ConfigWarning] = []
    entries: list[tuple[tuple[str | int, ...], HookEntry]] = [
        (("hooks", event, group_index, "hooks", hook_index, "command"), entry)
        for event, groups in report.settings.hooks.items()
        for group_index, group in enumerate(groups)
        for hook_index, entry in enumerate(group.hooks)
    ]
    entries += [
        (("patterns", name, "command"), handler)
        for name, handler in report.settings.patterns.items()
        if isinstance(handler, HookEntry)
    ]
    text = None
    for path, entry in entries:
        for problem in hook_script_problems(entry, root):
            if text is None:
                text = Path(report.file).read_text(encoding="utf-8", errors="replace")
            line, _ = locate(text, path)
            found.append(
                ConfigWarning(file=report.file, path=render_path(path), message=problem, line=line)
            )
    return found


def _print_report(report: SettingsReport) -> None:
    if report.ok and not report.warnings:
        click.echo(f"{visible(report.file)}: {click.style('ok', fg='green')} ({report.scope})")
        return
    # A message may quote what the file says (a key, a matcher): made visible.
    for error in _in_file_order(report.errors):
        where = visible(_where(error.file, error.line, error.column))
        label = click.style("error:", fg="red", bold=True)
        click.echo(f"{where}: {label} {visible(_with_path(error.path, error.message))}")
    for warning in sorted(report.warnings, key=lambda warning: warning.line or 0):
        where = visible(_where(warning.file, warning.line, None))
        label = click.style("warning:", fg="yellow", bold=True)
        click.echo(f"{where}: {label} {visible(_with_path(warning.path, warning.message))}")


def _file_result(report: SettingsReport) -> _FileResult:
    return _FileResult(
        file=report.file,
        scope=report.scope,
        errors=[
            _Problem(error.message, error.path, error.line, error.column)
            for error in _in_file_order(report.errors)
        ],
        warnings=[
            _Problem(warning.message, warning.path or None, warning.line, None)
            for warning in sorted(report.warnings, key=lambda warning: warning.line or 0)
        ],
    )


def _in_file_order(errors: list[SettingsError]) -> list[SettingsError]:
    return sorted(errors, key=lambda error: (error.line or 0, error.column or 0))


def _where(file: str, line: int | None, column: int | None) -> str:
    """`file:line:column`, as compilers print it, so editors can jump there."""
    if line is None:
        return file
    return f"{file}:{line}" + (f":{column}" if column is not None else "")


def _with_path(path: str | None, message: str) -> str:
    return f"{path}: {message}" if path else message


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"

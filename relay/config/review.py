"""What changed in a hook since it was last trusted, as lines for a person to review (DESIGN §7).

`relay trust` shows, for each hook it is about to trust again, the files added, removed
and changed since the last trust, with a unified diff of each changed text file (from the
copy the trust store kept). Everything shown comes from the project, which is not trusted
yet: control and format characters are made visible, so a file cannot hide a line from
the reviewer with terminal escapes or bidirectional overrides.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from relay.config.trust import FileState, HookFingerprint, TrustManifest
from relay.protocol.display import visible

MAX_DIFF_LINES_PER_FILE = 120
"""Lines of unified diff shown for one changed file; the rest is counted, not shown."""
MAX_DIFF_LINES = 600
"""Lines of unified diff shown for one hook, over all its files."""


def changes(
    previous: TrustManifest,
    command: str,
    current: HookFingerprint,
    copy_of: Callable[[str], bytes | None],
) -> list[str]:
    """Lines that say what changed since `previous` was trusted; [] when nothing did.
    `copy_of(sha256)` gives the kept copy of a trusted text file."""
    lines: list[str] = []
    if previous.command != command:
        lines += [f"command was: {visible(previous.command, one_line=True)}"]
    if list(previous.tree) != list(current.tree):
        lines += [
            f"the whole tree: was {'yes' if previous.tree else 'no'}, now "
            f"{'yes' if current.tree else 'no'}"
        ]
    before, after = previous.files, current.files
    budget = [MAX_DIFF_LINES]
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old is None:
            lines.append(f"added    {visible(name, one_line=True)}")
        elif new is None:
            lines.append(f"removed  {visible(name, one_line=True)}")
        elif old.value != new.value:
            lines.append(f"changed  {visible(name, one_line=True)}")
            kept = copy_of(old.sha256) if old.text else None
            lines += _file_diff(name, (old, kept), (new, current.contents.get(name)), budget)
    return lines


def _file_diff(
    name: str,
    trusted: tuple[FileState, bytes | None],
    now: tuple[FileState, bytes | None],
    budget: list[int],
) -> list[str]:
    """The unified diff of one changed file, indented, within the hook's remaining budget.
    Each side: the file's state and its content, if relay has it."""
    (old, before), (new, after) = trusted, now
    if before is None or after is None:
        return [f"  ({_why_no_diff(old, new, before)})"]
    diff = list(
        difflib.unified_diff(
            before.decode().splitlines(),
            after.decode().splitlines(),
            f"{name} (trusted)",
            f"{name} (now)",
            lineterm="",
        )
    )
    shown = min(len(diff), MAX_DIFF_LINES_PER_FILE, budget[0])
    budget[0] -= shown
    lines = [f"  {visible(line, one_line=True)}" for line in diff[:shown]]
    if shown < len(diff):
        lines.append(f"  … {len(diff) - shown} more line(s) of diff not shown")
    return lines


def _why_no_diff(old: FileState, new: FileState, kept: bytes | None) -> str:
    if not old.sha256 or not new.sha256:
        return f"was: {visible(old.value, one_line=True)}; now: {visible(new.value, one_line=True)}"
    if not (old.text and new.text):
        return f"binary or over the copy limit: {old.size:,} bytes -> {new.size:,} bytes"
    if kept is None:
        return "no copy of the trusted version was kept"
    return "not readable now"

"""Compiling relay's small C programs with the machine's C compiler.

Two parts of relay are faster as native programs than as Python: the hook client that
a host runs for each event (relay.server.build, built by `relay install`) and the
output copier of `relay run` (relay.session.copier, built when the package is
installed). Both have a Python fallback where no compiler is found or the build fails.

Standard library only: the package's build hook (hatch_build.py) imports this module
before relay's dependencies are installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

COMPILE_TIMEOUT = 120.0


class BuildError(Exception):
    """A program could not be compiled; `output` holds the compiler's words."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def find_compiler() -> str | None:
    """$CC, else cc, gcc or clang on PATH."""
    configured = os.environ.get("CC", "").strip()
    if configured:
        return shutil.which(configured) or configured
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def compile_program(
    source: Path, target: Path, *, flags: Sequence[str] = (), static: bool = False
) -> Path:
    """Compile the C file `source` into the executable `target` (its folder is created);
    raise BuildError when there is no compiler or it fails. `static`: linked statically
    where the C library allows it (no dynamic loader at each start, about 0.1 ms),
    dynamically otherwise. The target is replaced, never overwritten in place: a process
    may be running the old one right now."""
    compiler = find_compiler()
    if compiler is None:
        raise BuildError("no C compiler found (cc, gcc or clang; or set $CC)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="relay-build-") as scratch:
        built = Path(scratch, target.name)
        command = [compiler, "-O2", "-std=c11", *flags, "-o", str(built), str(source)]
        attempts = ([*command, "-static"], command) if static else (command,)
        for attempt in attempts:
            try:
                done = subprocess.run(
                    attempt, capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BuildError(f"cannot run {compiler}: {exc}") from None
            if done.returncode == 0:
                break
        if done.returncode != 0:
            raise BuildError(f"{compiler} failed (exit {done.returncode})", done.stderr)
        staged = target.parent / f".{target.name}.{os.getpid()}"
        try:
            shutil.copyfile(built, staged)
            staged.chmod(0o755)
            staged.replace(target)
        except OSError:
            staged.unlink(missing_ok=True)
            raise
    return target

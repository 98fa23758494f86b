"""Compiling relay's small C programs with the machine's C compiler.

Two parts of relay are faster as native programs than as Python: the hook client that
a host runs for each event (relay.server.build, built by `relay install`) and the
output copier of `relay run` (relay.session.copier, built when the package is
installed). Both have a Python fallback where no compiler is found or the build fails.

Standard library only: the package's build hook (hatch_build.py) imports this module
before relay's dependencies are installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

COMPILE_TIMEOUT = 120.0
CACHE_FORMAT = b"relay-native-cache 1\n"


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
    source: Path,
    target: Path,
    *,
    flags: Sequence[str] = (),
    static: bool = False,
    generated: Mapping[str, str] | None = None,
    cached: bool = False,
) -> Path:
    """Compile the C file `source` into the executable `target` (its folder is created);
    raise BuildError when there is no compiler or it fails. `static`: linked statically
    where the C library allows it (no dynamic loader at each start, about 0.1 ms),
    dynamically otherwise. `generated`: header files (name: text) the source includes,
    written into a folder on the include path. The target is replaced, never overwritten
    in place: a process may be running the old one right now.

    `cached`: a program built before from the same source, headers, flags and compiler
    is copied from the user's cache (build_cache) instead of compiled again: half a
    second of CPU for the first `relay install`, none for the next."""
    compiler = find_compiler()
    if compiler is None:
        raise BuildError("no C compiler found (cc, gcc or clang; or set $CC)")
    target.parent.mkdir(parents=True, exist_ok=True)
    kept = _cached_build(compiler, source, flags, static, generated or {}) if cached else None
    if kept is not None and _ours(kept):
        with contextlib.suppress(OSError):  # then compiled, as without a cache
            return _copy(kept, target)
    with tempfile.TemporaryDirectory(prefix="relay-build-") as scratch:
        include = []
        if generated:
            for name, text in generated.items():
                Path(scratch, name).write_text(text)
            include = ["-I", scratch]
        built = Path(scratch, target.name)
        command = [compiler, "-O2", "-std=c11", *include, *flags, "-o", str(built), str(source)]
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
        _copy(built, target)
        if kept is not None:
            with contextlib.suppress(OSError):  # the next build compiles again without it
                _copy(built, kept)
    return target


def build_cache() -> Path | None:
    """The user's cache of built programs: $RELAY_CACHE/native where that is set, else
    $XDG_CACHE_HOME/agent-relay/native, else ~/.cache/agent-relay/native (None without a
    home)."""
    relay_cache = os.environ.get("RELAY_CACHE", "")
    if os.path.isabs(relay_cache):
        return Path(relay_cache, "native")
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base, "agent-relay", "native")


def _cached_build(
    compiler: str,
    source: Path,
    flags: Sequence[str],
    static: bool,
    generated: Mapping[str, str],
) -> Path | None:
    """Where the build of these inputs is cached (it may not be there yet), or None when
    there is no private cache folder. The key covers everything the program is made
    from: the compiler's file (path, size, time), the source and the folder it includes
    from, the generated headers, the flags."""
    folder = build_cache()
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        facts = folder.stat()
        real = os.path.realpath(shutil.which(compiler) or compiler)
        made_by = os.stat(real)
        digest = hashlib.sha256(CACHE_FORMAT)
        for part in (real, str(made_by.st_size), str(made_by.st_mtime_ns), str(static)):
            digest.update(part.encode() + b"\0")
        for flag in flags:
            digest.update(b"flag\0" + flag.encode() + b"\0")
        for name, text in sorted(generated.items()):
            digest.update(b"generated\0" + name.encode() + b"\0" + text.encode() + b"\0")
        for path in sorted(source.parent.iterdir()):
            if path.is_file() and path.suffix in (".c", ".h"):
                data = path.read_bytes()
                digest.update(path.name.encode() + b"\0" + str(len(data)).encode() + b"\0")
                digest.update(data)
    except OSError:
        return None
    if facts.st_uid != os.getuid() or facts.st_mode & 0o077:
        return None  # a cache others can write to is no cache of ours
    return folder / f"{source.stem}-{digest.hexdigest()[:32]}"


def _ours(path: Path) -> bool:
    """Whether `path` is a regular file of this user's that only they can write."""
    try:
        facts = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(facts.st_mode) and facts.st_uid == os.getuid() and not facts.st_mode & 0o022


def _copy(built: Path, target: Path) -> Path:
    """Copy the program `built` to `target` through a staged file renamed over it."""
    staged = target.parent / f".{target.name}.{os.getpid()}"
    try:
        shutil.copyfile(built, staged)
        staged.chmod(0o755)
        staged.replace(target)
    except OSError:
        staged.unlink(missing_ok=True)
        raise
    return target

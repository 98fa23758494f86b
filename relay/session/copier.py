"""The output copier of `relay run`: the program that copies the agent's output to the
human's terminal (relay.session.pump runs it), in its two forms.

- Native: native/copier.c, compiled when the package is installed (hatch_build.py) into
  `native/relay-copier-<hash of the source>` next to it. The name holds the source's
  hash, so a build from another version of the source is never run.
- Python: COPIER, the same loop on `python -I -S`, where there is no native one (no C
  compiler at install, a failed build) or it does not run here (checked once per
  process: `native_copier_status`).

The native copier spends no interpreter time between the read and the write the human
waits on. On a 2-core machine, where the copy shares the cores with the agent, the
terminal and relay's loop, that was 0.04-0.09x more of the direct throughput and a
keystroke round trip 6-17% shorter (tests/perf/bench_session.py runs both; figures in
spec/session.md).

Standard library only: hatch_build.py imports this module to build the native copier
before relay's dependencies are installed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path

from relay.native import compile_program

NATIVE_SOURCE = Path(__file__).resolve().parent / "native" / "copier.c"
NATIVE_PREFIX = "relay-copier-"


def native_name(source: bytes) -> str:
    """The file name of the copier built from `source`."""
    return NATIVE_PREFIX + hashlib.sha256(source).hexdigest()[:16]


def build_native_copier(folder: Path | None = None) -> Path:
    """Compile native/copier.c into `folder` (default: next to the source) under its
    hashed name, and remove copiers built from other sources there; raise
    relay.native.BuildError when there is no compiler or it fails. Linked statically
    where the C library allows it, so that a wheel built on one Linux runs on another."""
    folder = NATIVE_SOURCE.parent if folder is None else folder
    target = folder / native_name(NATIVE_SOURCE.read_bytes())
    compile_program(NATIVE_SOURCE, target, static=True)
    for stale in folder.glob(NATIVE_PREFIX + "*"):
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


PROBE_TIMEOUT = 5.0


@functools.cache
def native_copier_status() -> tuple[str | None, str]:
    """The native copier built from this install's source, if it runs here, and else
    None and why not. It runs once without arguments, and must refuse them as it does
    (exit 2, nothing printed): a binary that starts and then fails (a dynamic loader
    missing a library version) would otherwise leave the session showing nothing."""
    try:
        target = NATIVE_SOURCE.parent / native_name(NATIVE_SOURCE.read_bytes())
    except OSError as exc:
        return None, f"cannot read {NATIVE_SOURCE}: {exc.strerror or exc}"
    if not os.access(target, os.X_OK):
        return None, f"none was built for this source (no C compiler at install?): {target}"
    try:
        done = subprocess.run(
            [str(target)],
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{target} cannot run here: {exc}"
    if (done.returncode, done.stdout, done.stderr) != (2, b"", b""):
        said = done.stderr.decode(errors="replace").strip()[:200]
        return (
            None,
            f"{target} does not run here (exit {done.returncode}){': ' + said if said else ''}",
        )
    return str(target), ""


def native_copier() -> str | None:
    """The native copier, if one built from this install's source runs here."""
    return native_copier_status()[0]


COPIER = r"""
import errno, os, select, signal, sys, time
master, terminal, sink, lifeline = map(int, sys.argv[1:5])
batch, quiet_ms, most = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
for number in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE"):
    signal.signal(getattr(signal, number), signal.SIG_IGN)
poller = select.poll()
poller.register(master, select.POLLIN)
poller.register(lifeline, select.POLLIN)
read, write, clock = os.read, os.write, time.monotonic
held, size, since = [], 0, 0.0

def write_all(fd, data):
    while data:
        data = data[write(fd, data):]

def hand_over():  # the gathered output to relay's loop; False once relay stopped reading
    global held, size
    try:
        write_all(sink, b"".join(held))
    except OSError:  # EPIPE: the session ended (stop() or relay's death)
        return False
    held, size = [], 0
    return True

while True:
    try:
        data = read(master, 65536)
    except BlockingIOError:
        if held:
            wait = max(0, min(quiet_ms, int((since + most - clock()) * 1000)))
            ready = poller.poll(wait)
            if not ready:
                if not hand_over():  # the output paused: the loop sees it now
                    break
                continue
        else:
            ready = poller.poll()
        if any(fd == lifeline for fd, _ in ready):
            break  # relay is gone, or stopped the copy
        continue
    except OSError as exc:
        if exc.errno in (errno.EIO, errno.EBADF):
            break  # every slave fd is closed: the agent's output has ended
        raise
    if not data:
        break
    # One write per read, as `script` does. Gathering what else the PTY held into one
    # large write was slower: with the loop doing nothing, the copy alone reached 0.61x
    # direct that way and 0.78-0.87x without. While the copy waits on a long write to
    # the terminal, nobody reads the agent's side.
    if terminal >= 0:
        try:
            write_all(terminal, data)
        except OSError:  # EIO / EPIPE: the terminal is gone; the loop still sees output
            terminal = -1
    if not held:
        since = clock()
    held.append(data)
    size += len(data)
    if (size >= batch or clock() - since >= most) and not hand_over():
        break
if held:
    hand_over()
"""

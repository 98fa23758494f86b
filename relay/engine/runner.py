"""Running one command hook as a real process (DESIGN §6, §9, §10).

Why not `anyio.open_process`: relay's budget is 1.6x the C posix_spawn floor per hook
(DESIGN §10), and asyncio's subprocess transports cost a protocol, a transport, stream
readers and a child watcher per process. Here the spawn is `subprocess.Popen` (vfork, the
child's PATH, cwd, close_fds, default SIGPIPE), the pipes are plain non-blocking fds on the
event loop's selector, and the exit is a pidfd on the same selector. `os.posix_spawn` would
be a little faster still, but on 3.11 it cannot set the child's cwd. tests/perf/
bench_engine.py prints this path, anyio's, and the floor. Everything is asyncio; anyio
callers use its asyncio backend.

Guarantees: own process group; stdin written then closed (EPIPE ignored); stdout and
stderr drained concurrently, each capped, the rest read and discarded; on timeout the
group gets `kill_signal`, then SIGKILL after `grace`; once the hook's own process has
exited, what the pipes hold is taken within `exit_drain` even if descendants keep them
open, then what is left of the group is SIGKILLed; cancelling kills the group too. Every
failure is a field of the result, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping

import msgspec

from relay.engine.command import SHELL, Launch

_READ_SIZE = 1 << 16
_FINAL_READS = 16  # at most 1 MiB taken per pipe once the drain window is over
_KILLED_EXIT_WAIT = 0.25  # seconds close() blocks for a SIGKILLed hook to become a zombie


class ProcessResult(msgspec.Struct, kw_only=True):
    """How one hook process ran: exit, signal, timeout or spawn failure, and its output."""

    launch: Launch
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    spawn_error: str | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    pid: int | None = None


async def run_process(
    launch: Launch,
    *,
    stdin: bytes,
    env: Mapping[str, str],
    cwd: str | None,
    timeout: float,
    kill_signal: int = signal.SIGTERM,
    grace: float = 2.0,
    output_cap: int = 1 << 20,
    exit_drain: float = 0.5,
) -> ProcessResult:
    """Run one hook process to completion; every failure is a field of the result, never an exception."""
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    try:
        hook = _HookProcess(launch, env, cwd, output_cap, loop)
    except _SpawnError as exc:
        return ProcessResult(
            launch=exc.launch,
            spawn_error=exc.message,
            duration_ms=(time.perf_counter() - started) * 1000,
        )
    try:
        hook.start(stdin)
        await hook.wait(timeout, kill_signal, grace, exit_drain)
    finally:
        hook.close()  # also on cancellation: SIGKILL the group, reap, no orphan
    return hook.result((time.perf_counter() - started) * 1000)


def install_child_watcher() -> None:
    """On Python 3.11, make asyncio use PidfdChildWatcher (idempotent; a no-op where unavailable or on 3.12+)."""
    if sys.version_info >= (3, 12) or not _pidfd_supported():
        return
    policy = asyncio.get_event_loop_policy()
    if isinstance(policy.get_child_watcher(), asyncio.PidfdChildWatcher):
        return
    # asyncio's default ThreadedChildWatcher starts a thread per process: slower.
    policy.set_child_watcher(asyncio.PidfdChildWatcher())


class _SpawnError(Exception):
    def __init__(self, launch: Launch, message: str) -> None:
        super().__init__(message)
        self.launch = launch
        self.message = message


class _Pipe:
    """One output pipe of the hook, drained into a buffer capped at `cap` bytes."""

    __slots__ = ("cap", "data", "fd", "truncated")

    def __init__(self, fd: int, cap: int) -> None:
        self.fd: int | None = fd
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def read(self) -> int:
        """Take what the pipe holds now: bytes read, 0 at end of file, -1 when empty."""
        assert self.fd is not None
        try:
            chunk = os.read(self.fd, _READ_SIZE)
        except BlockingIOError:
            return -1
        except OSError:
            return 0
        room = self.cap - len(self.data)
        if len(chunk) > room:
            # The cap keeps memory bounded; the rest is read and dropped so the hook
            # never blocks on a full pipe.
            self.truncated = True
            self.data += chunk[: max(room, 0)]
        else:
            self.data += chunk
        return len(chunk)


class _HookProcess:
    """One spawned hook: its pipes and exit watched by the event loop's selector."""

    def __init__(
        self,
        launch: Launch,
        env: Mapping[str, str],
        cwd: str | None,
        output_cap: int,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._loop = loop
        self._popen, self.launch, stdin_fd, stdout_fd, stderr_fd = _spawn(launch, env, cwd)
        self.pid = self._popen.pid
        self._stdin_fd: int | None = stdin_fd
        self._stdin_left = memoryview(b"")
        self._stdout = _Pipe(stdout_fd, output_cap)
        self._stderr = _Pipe(stderr_fd, output_cap)
        self._open_pipes = 2
        self._exited = False  # the hook's own process has exited (a zombie until reaped)
        self._reaped = False
        self._timed_out = False
        self._waker: asyncio.Future[None] | None = None
        self._pidfd: int | None = None

    def start(self, stdin: bytes) -> None:
        """Watch the pipes and the exit, and feed stdin (inside run_process's try/finally)."""
        loop = self._loop
        for pipe in (self._stdout, self._stderr):
            assert pipe.fd is not None
            os.set_blocking(pipe.fd, False)
            loop.add_reader(pipe.fd, self._on_readable, pipe)
        self._pidfd = open_pidfd(self.pid)
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self._on_exit)
        else:
            _watch_exit_in_thread(self.pid, loop, self._on_exit)
        self._feed(stdin)

    # ---- stdin

    def _feed(self, data: bytes) -> None:
        """Write `data` to the hook's stdin, then close it; a hook that never reads is fine."""
        assert self._stdin_fd is not None
        if not data:
            self._close_stdin()
            return
        os.set_blocking(self._stdin_fd, False)
        self._stdin_left = memoryview(data)
        self._write_stdin()
        if self._stdin_fd is not None:
            self._loop.add_writer(self._stdin_fd, self._write_stdin)

    def _write_stdin(self) -> None:
        if self._stdin_fd is None:
            return
        try:
            written = os.write(self._stdin_fd, self._stdin_left)
        except BlockingIOError:
            return
        except OSError:
            # EPIPE: the hook closed stdin or exited without reading it, which is allowed.
            written = len(self._stdin_left)
        self._stdin_left = self._stdin_left[written:]
        if not self._stdin_left:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin_fd is not None:
            self._loop.remove_writer(self._stdin_fd)
            os.close(self._stdin_fd)
            self._stdin_fd = None
            self._stdin_left = memoryview(b"")

    # ---- events from the selector

    def _on_readable(self, pipe: _Pipe) -> None:
        if pipe.read() == 0:
            self._close_pipe(pipe)
            self._open_pipes -= 1
            if self._open_pipes == 0:
                self._wake()

    def _on_exit(self) -> None:
        if self._exited or self._reaped:
            return
        self._exited = True
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
        self._close_stdin()
        self._wake()

    def _wake(self) -> None:
        if self._waker is not None and not self._waker.done():
            self._waker.set_result(None)

    async def _until(self, condition: Callable[[], bool], deadline: float) -> bool:
        """Wait until `condition()` holds (True) or the loop clock reaches `deadline` (False)."""
        loop = self._loop
        while not condition():
            if loop.time() >= deadline:
                return False
            self._waker = waker = loop.create_future()
            timer = loop.call_at(deadline, self._wake)
            try:
                await waker
            finally:
                timer.cancel()
                self._waker = None
        return True

    # ---- the run

    async def wait(self, timeout: float, kill_signal: int, grace: float, exit_drain: float) -> None:
        """Wait for the hook's exit, enforcing the timeout, then for its pipes."""

        def exited() -> bool:
            return self._exited

        def finished() -> bool:
            return self._exited and self._open_pipes == 0

        loop = self._loop
        if not await self._until(exited, loop.time() + timeout):
            self._timed_out = True
            self._signal_group(kill_signal)
            if not await self._until(exited, loop.time() + grace):
                # SIGKILL after grace: a hook may ignore SIGTERM.
                self._signal_group(signal.SIGKILL)
        # Descendants may hold the pipes open forever: take what is there within exit_drain
        # (after a SIGKILL, this also lets the hook's own process finish dying).
        await self._until(finished, loop.time() + exit_drain)
        for pipe in (self._stdout, self._stderr):
            self._read_final(pipe)

    def _read_final(self, pipe: _Pipe) -> None:
        """Take what is left in a pipe that is still open, without waiting for more."""
        for _ in range(_FINAL_READS):
            if pipe.fd is None:
                return
            taken = pipe.read()
            if taken == 0:
                self._close_pipe(pipe)
            if taken <= 0:
                return

    def close(self) -> None:
        """Kill what is left of the process group, reap the hook, release every fd."""
        if not self._reaped:
            # The leader is not reaped yet, so its pid still names this group: no risk of
            # signalling an unrelated group that reused the number.
            self._signal_group(signal.SIGKILL)
            self._reap()
        self._close_stdin()
        for pipe in (self._stdout, self._stderr):
            self._close_pipe(pipe)

    def _reap(self) -> None:
        pidfd = self._pidfd
        if pidfd is not None and not self._exited:
            self._loop.remove_reader(pidfd)
            if not _poll_readable(pidfd, _KILLED_EXIT_WAIT):
                # Still alive after SIGKILL (stuck in the kernel): reap it when it exits.
                self._reap_later(pidfd)
                return
        self._popen.wait()  # a zombie by now, or (without a pidfd) SIGKILLed: no long wait
        self._reaped = True
        if pidfd is not None:
            os.close(pidfd)
            self._pidfd = None

    def _reap_later(self, pidfd: int) -> None:
        popen, loop = self._popen, self._loop
        self._reaped = True  # from now on the event loop, not this object, owns the process
        self._pidfd = None

        def reap() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            popen.wait()

        loop.add_reader(pidfd, reap)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def _close_pipe(self, pipe: _Pipe) -> None:
        if pipe.fd is not None:
            self._loop.remove_reader(pipe.fd)
            os.close(pipe.fd)
            pipe.fd = None

    def result(self, duration_ms: float) -> ProcessResult:
        """The finished run as a ProcessResult."""
        returncode = self._popen.returncode
        exit_code = signal_name = None
        if returncode is not None:
            if returncode < 0:
                signal_name = _signal_name(-returncode)
            elif not self._timed_out:
                exit_code = returncode
        return ProcessResult(
            launch=self.launch,
            exit_code=exit_code,
            signal=signal_name,
            timed_out=self._timed_out,
            stdout=bytes(self._stdout.data),
            stderr=bytes(self._stderr.data),
            stdout_truncated=self._stdout.truncated,
            stderr_truncated=self._stderr.truncated,
            duration_ms=duration_ms,
            pid=self.pid,
        )


def _spawn(
    launch: Launch, env: Mapping[str, str], cwd: str | None
) -> tuple[subprocess.Popen[bytes], Launch, int, int, int]:
    """Start the hook in its own process group with three pipes; raise _SpawnError."""
    if not launch.argv:
        raise _SpawnError(launch, "empty command")
    fds: list[int] = []
    try:
        for _ in range(3):
            fds.extend(os.pipe())
    except OSError as exc:  # EMFILE under a wide fan-out is a result too
        for fd in fds:
            os.close(fd)
        raise _SpawnError(launch, f"cannot create pipes: {exc.strerror or exc}") from None
    stdin_read, stdin_write, stdout_read, stdout_write, stderr_read, stderr_write = fds
    child_fds = (stdin_read, stdout_write, stderr_write)
    try:
        try:
            popen = _popen(launch, child_fds, env, cwd)
        except OSError as exc:
            if not (exc.errno == errno.ENOEXEC and launch.mode == "direct"):
                raise
            # A script without a #! line: sh runs it as a shell script, so relay does too.
            launch = Launch(argv=(SHELL, "-c", shlex.join(launch.argv)), mode="shell")
            popen = _popen(launch, child_fds, env, cwd)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        for fd in (stdin_write, stdout_read, stderr_read):
            os.close(fd)
        raise _SpawnError(launch, describe_spawn_error(exc, launch.argv[0], cwd)) from None
    finally:
        for fd in child_fds:
            os.close(fd)
    return popen, launch, stdin_write, stdout_read, stderr_read


def _popen(
    launch: Launch, child_fds: tuple[int, int, int], env: Mapping[str, str], cwd: str | None
) -> subprocess.Popen[bytes]:
    stdin, stdout, stderr = child_fds
    return subprocess.Popen(
        launch.argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=env,
        cwd=cwd,
        process_group=0,
    )


def describe_spawn_error(exc: BaseException, program: str, cwd: str | None) -> str:
    """Why `program` could not be started, in words (for hooks and wrapped agents alike)."""
    if not isinstance(exc, OSError):
        return f"cannot run {program}: {exc}"
    if cwd is not None and exc.filename == cwd and exc.filename != program:
        reasons = {
            errno.ENOENT: "working directory not found",
            errno.ENOTDIR: "working directory is not a directory",
            errno.EACCES: "working directory not accessible",
        }
        return f"{reasons.get(exc.errno or 0, 'cannot enter working directory')}: {cwd}"
    reasons = {
        errno.ENOENT: "command not found",
        errno.EACCES: "permission denied",
        errno.ENOEXEC: "exec format error",
    }
    reason = reasons.get(exc.errno or 0)
    if reason is None:
        return f"cannot run {program}: {exc.strerror or exc}"
    return f"{reason}: {program}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@functools.cache
def _pidfd_supported() -> bool:
    fd = open_pidfd(os.getpid())
    if fd is None:
        return False
    os.close(fd)
    return True


def open_pidfd(pid: int) -> int | None:
    """A pidfd for `pid` (readable when it exits), or None where pidfds are unavailable."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except OSError:  # ENOSYS on old kernels, EPERM under some seccomp filters
        return None
    return fd


def _watch_exit_in_thread(
    pid: int, loop: asyncio.AbstractEventLoop, on_exit: Callable[[], None]
) -> None:
    """Without pidfds: a thread waits for the exit, leaving the zombie to be reaped."""

    def watch() -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(on_exit)

    threading.Thread(target=watch, name=f"relay-hook-{pid}", daemon=True).start()


def _poll_readable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))

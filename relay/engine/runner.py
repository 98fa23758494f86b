"""Running command hooks as real processes (DESIGN §6, §9, §10).

One state machine per hook process (`_HookProcess`) and two drivers for it:

- `run_processes`: synchronous, any number of hooks in one `poll()` loop on the calling
  thread. What `relay hooks run` and `relay serve` use: no event loop, no asyncio import
  (a host pays for every import on every event).
- `run_process`: one hook inside a running asyncio loop (its selector watches the same
  fds), for the session runtime and `HookSystem.fire`.

Why not `anyio.open_process`: relay's budget is 1.6x the C posix_spawn floor per hook
(DESIGN §10), and asyncio's subprocess transports cost a protocol, a transport, stream
readers and a child watcher per process. Here the spawn is what `subprocess.Popen` does
(vfork, the child's PATH, cwd, close_fds, default SIGPIPE) through CPython's own primitive
where its arguments are known (3.11 to 3.13; Popen elsewhere), the pipes are plain
non-blocking fds, and the exit is a pidfd watched with them. `os.posix_spawn` cannot set
the child's cwd before 3.13. tests/perf/bench_engine.py prints this path, anyio's, and
the floor.

Guarantees: own process group; stdin written then closed (EPIPE ignored); stdout and
stderr drained concurrently, each capped, the rest read and discarded; on timeout the
group gets `kill_signal`, then SIGKILL after `grace`; once the hook's own process has
exited, what the pipes hold is taken within `exit_drain` even if descendants keep them
open, then what is left of the group is SIGKILLed; cancelling (or an exception in the
caller) kills the group too. Every failure is a field of the result, never an exception.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import os
import select
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from relay.engine.command import SHELL, Launch

if TYPE_CHECKING:
    import asyncio

_READ_SIZE = 1 << 16
_FINAL_READS = 16  # at most 1 MiB taken per pipe once the drain window is over
_KILLED_EXIT_WAIT = 0.25  # seconds close() blocks for a SIGKILLed hook to become a zombie

DEFAULT_GRACE = 2.0
DEFAULT_OUTPUT_CAP = 1 << 20
DEFAULT_EXIT_DRAIN = 0.5


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


class ProcessSpec(msgspec.Struct, kw_only=True, frozen=True):
    """One hook process to run: what, with which input, environment and limits."""

    launch: Launch
    stdin: bytes
    env: Mapping[str, str]
    cwd: str | None
    timeout: float
    kill_signal: int = signal.SIGTERM
    grace: float = DEFAULT_GRACE
    output_cap: int = DEFAULT_OUTPUT_CAP
    exit_drain: float = DEFAULT_EXIT_DRAIN


class _Loop(Protocol):
    """What a hook process needs from the loop that watches it (asyncio's loop has it all)."""

    def time(self) -> float: ...
    def add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> None: ...
    def remove_reader(self, fd: int) -> bool: ...
    def add_writer(self, fd: int, callback: Callable[..., object], *args: Any) -> None: ...
    def remove_writer(self, fd: int) -> bool: ...
    def call_soon_threadsafe(self, callback: Callable[[], object]) -> Any: ...


# ---- the synchronous driver ------------------------------------------------------------


def run_processes(
    specs: Sequence[ProcessSpec],
    *,
    max_parallel: int = 32,
    meanwhile: Callable[[], None] | None = None,
) -> list[ProcessResult]:
    """Run hook processes on this thread, at most `max_parallel` at once; results in order.

    `meanwhile` is called once, on this thread, as soon as the first hooks have started:
    the caller's work that does not need their results, done while they run instead of
    after them (with no hook to start, before returning). It must not raise: an exception
    ends the run and kills the hooks."""
    loop = _PollLoop()
    results: list[ProcessResult | None] = [None] * len(specs)
    waiting = collections.deque(enumerate(specs))
    running: dict[int, tuple[_HookProcess, float]] = {}
    started_pids = _started_pids()
    mark = len(started_pids)
    try:
        while waiting or running:
            while waiting and len(running) < max_parallel:
                index, spec = waiting.popleft()
                started = time.perf_counter()
                try:
                    hook = _HookProcess(spec, loop)
                except _SpawnError as exc:
                    results[index] = exc.result(started)
                    continue
                running[index] = (hook, started)
                started_pids.remove(hook.pid)  # held by `running` from now on
                hook.start()
            if meanwhile is not None:
                later, meanwhile = meanwhile, None
                later()
            now = loop.time()
            for index, (hook, started) in list(running.items()):
                if hook.advance(now):
                    del running[index]
                    hook.close()
                    results[index] = hook.result((time.perf_counter() - started) * 1000)
            if waiting and len(running) < max_parallel:
                continue  # a slot has just been freed: fill it before waiting
            if running:
                deadline = min(hook.deadline for hook, _ in running.values())
                loop.run_once(max(deadline - loop.time(), 0.0))
    finally:
        held = {hook.pid for hook, _ in running.values()}
        for hook, _ in running.values():  # an exception or an interrupt: no orphans
            hook.close()
        for pid in started_pids[mark:]:
            if pid not in held:  # started, then interrupted before `running` held it
                _kill_started(pid)
        loop.close()
    if meanwhile is not None:  # no hook was given
        meanwhile()
    return [result for result in results if result is not None]


class _PollLoop:
    """The few loop methods a hook process uses, over select.poll on the calling thread."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._readers: dict[int, tuple[Callable[..., object], tuple[Any, ...]]] = {}
        self._writers: dict[int, tuple[Callable[..., object], tuple[Any, ...]]] = {}
        self._registered: set[int] = set()
        self._wakeup: tuple[int, int] | None = None
        self._soon: collections.deque[Callable[[], object]] = collections.deque()

    def time(self) -> float:
        return time.monotonic()

    def add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> None:
        self._readers[fd] = (callback, args)
        self._update(fd)

    def remove_reader(self, fd: int) -> bool:
        found = self._readers.pop(fd, None) is not None
        self._update(fd)
        return found

    def add_writer(self, fd: int, callback: Callable[..., object], *args: Any) -> None:
        self._writers[fd] = (callback, args)
        self._update(fd)

    def remove_writer(self, fd: int) -> bool:
        found = self._writers.pop(fd, None) is not None
        self._update(fd)
        return found

    def call_soon_threadsafe(self, callback: Callable[[], object]) -> None:
        """Run `callback` on the loop's thread (for the exit-watching thread without pidfds)."""
        self._soon.append(callback)
        if self._wakeup is not None:
            with contextlib.suppress(OSError):
                os.write(self._wakeup[1], b"\0")

    def enable_wakeup(self) -> None:
        """Let other threads interrupt a wait (created only when a watcher thread needs it)."""
        if self._wakeup is None:
            read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._wakeup = (read_end, write_end)
            self.add_reader(read_end, self._drain_wakeup)

    def _drain_wakeup(self) -> None:
        assert self._wakeup is not None
        with contextlib.suppress(OSError):
            while os.read(self._wakeup[0], 512):
                pass

    def _update(self, fd: int) -> None:
        mask = (select.POLLIN if fd in self._readers else 0) | (
            select.POLLOUT if fd in self._writers else 0
        )
        if mask:
            self._poll.register(fd, mask)  # registers, or modifies the mask
            self._registered.add(fd)
        elif fd in self._registered:
            self._registered.discard(fd)
            self._poll.unregister(fd)

    def run_once(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for activity and run the callbacks it calls for."""
        if not self._soon:
            try:
                events = self._poll.poll(max(0, int(timeout * 1000) + 1))
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
                events = []
            for fd, mask in events:
                # A callback may have removed this fd (or another one) meanwhile: look again.
                if mask & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    reader = self._readers.get(fd)
                    if reader is not None:
                        reader[0](*reader[1])
                if mask & (select.POLLOUT | select.POLLHUP | select.POLLERR):
                    writer = self._writers.get(fd)
                    if writer is not None:
                        writer[0](*writer[1])
        while self._soon:
            self._soon.popleft()()

    def close(self) -> None:
        """Release the wakeup pipe, if one was made."""
        if self._wakeup is not None:
            self.remove_reader(self._wakeup[0])
            for fd in self._wakeup:
                os.close(fd)
            self._wakeup = None


# ---- the asyncio driver -----------------------------------------------------------------


async def run_process(
    launch: Launch,
    *,
    stdin: bytes,
    env: Mapping[str, str],
    cwd: str | None,
    timeout: float,
    kill_signal: int = signal.SIGTERM,
    grace: float = DEFAULT_GRACE,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    exit_drain: float = DEFAULT_EXIT_DRAIN,
) -> ProcessResult:
    """Run one hook process inside the running asyncio loop; every failure is a field of
    the result, never an exception."""
    spec = ProcessSpec(
        launch=launch,
        stdin=stdin,
        env=env,
        cwd=cwd,
        timeout=timeout,
        kill_signal=kill_signal,
        grace=grace,
        output_cap=output_cap,
        exit_drain=exit_drain,
    )
    return await run_spec(spec)


async def run_spec(spec: ProcessSpec) -> ProcessResult:
    """`run_process` for a ProcessSpec."""
    return await start_spec(spec).wait()


def start_spec(spec: ProcessSpec) -> StartedProcess:
    """Spawn a hook now, watched by the running asyncio loop; `wait()` (or `close()`) on the
    result is then the caller's to call. Several hooks of one event are all spawned this way
    before any is waited on, so the last starts as early as the spawns allow."""
    import asyncio  # already loaded: the caller is running in its loop

    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    try:
        hook = _HookProcess(spec, loop)
    except _SpawnError as exc:
        return StartedProcess(None, exc.result(started), started)
    with contextlib.suppress(ValueError):
        _started_pids().remove(hook.pid)  # the StartedProcess holds it
    try:
        hook.start()
    except BaseException:
        hook.close()
        raise
    return StartedProcess(hook, None, started)


class StartedProcess:
    """A hook spawned by `start_spec` (or its spawn failure): `wait` for its result, or
    `close` it unwaited (it is killed and reaped; idempotent, also after `wait`)."""

    def __init__(self, hook: _HookProcess | None, failed: ProcessResult | None, started: float):
        self._hook = hook
        self._failed = failed
        self._started = started

    async def wait(self) -> ProcessResult:
        """Run the hook to its end (exit, timeout, or cancellation: the group is killed)."""
        hook = self._hook
        if hook is None:
            assert self._failed is not None
            return self._failed
        import asyncio

        loop = asyncio.get_running_loop()
        try:
            while not hook.advance(loop.time()):
                waker: asyncio.Future[None] = loop.create_future()
                hook.on_change = functools.partial(_wake, waker)
                timer = loop.call_at(hook.deadline, _wake, waker)
                try:
                    await waker
                finally:
                    timer.cancel()
                    hook.on_change = None
        finally:
            hook.close()  # also on cancellation: SIGKILL the group, reap, no orphan
        return hook.result((time.perf_counter() - self._started) * 1000)

    def close(self) -> None:
        if self._hook is not None:
            self._hook.close()


def _wake(waker: asyncio.Future[None]) -> None:
    if not waker.done():
        waker.set_result(None)


def install_child_watcher() -> None:
    """On Python 3.11, make asyncio use PidfdChildWatcher (idempotent; a no-op where unavailable or on 3.12+)."""
    if sys.version_info >= (3, 12) or not _pidfd_supported():
        return
    import asyncio

    policy = asyncio.get_event_loop_policy()
    if isinstance(policy.get_child_watcher(), asyncio.PidfdChildWatcher):
        return
    # asyncio's default ThreadedChildWatcher starts a thread per process: slower.
    policy.set_child_watcher(asyncio.PidfdChildWatcher())


# ---- one hook process -------------------------------------------------------------------


class _SpawnError(Exception):
    def __init__(self, launch: Launch, message: str) -> None:
        super().__init__(message)
        self.launch = launch
        self.message = message

    def result(self, started: float) -> ProcessResult:
        return ProcessResult(
            launch=self.launch,
            spawn_error=self.message,
            duration_ms=(time.perf_counter() - started) * 1000,
        )


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


_RUNNING, _TERMINATING, _DRAINING, _DONE = range(4)


class _HookProcess:
    """One spawned hook: its pipes and exit watched by a loop, its lifetime a state machine.

    Phases: running (until exit or the timeout), terminating (kill_signal sent; until exit
    or the grace period, then SIGKILL), draining (exited or killed; until both pipes
    close or exit_drain passes), done. `advance(now)` moves through them; the loop's
    callbacks only record what happened and call `on_change`.
    """

    def __init__(self, spec: ProcessSpec, loop: _Loop) -> None:
        self._spec = spec
        self._loop = loop
        self._popen, self.launch, stdin_fd, stdout_fd, stderr_fd = _spawn(
            spec.launch, spec.env, spec.cwd
        )
        self.pid = self._popen.pid
        self.on_change: Callable[[], None] | None = None
        self.phase = _RUNNING
        self.deadline = loop.time() + spec.timeout
        self._stdin_fd: int | None = stdin_fd
        self._stdin_left = memoryview(b"")
        self._stdout = _Pipe(stdout_fd, spec.output_cap)
        self._stderr = _Pipe(stderr_fd, spec.output_cap)
        self._open_pipes = 2
        self._exited = False  # the hook's own process has exited (a zombie until reaped)
        self._reaped = False
        self._timed_out = False
        self._pidfd: int | None = None

    def start(self) -> None:
        """Watch the pipes and the exit, and feed stdin (call within a try/finally close())."""
        loop = self._loop
        for pipe in (self._stdout, self._stderr):
            assert pipe.fd is not None
            os.set_blocking(pipe.fd, False)
            loop.add_reader(pipe.fd, self._on_readable, pipe)
        self._pidfd = open_pidfd(self.pid)
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self._on_exit)
        else:
            if isinstance(loop, _PollLoop):
                loop.enable_wakeup()
            _watch_exit_in_thread(self.pid, loop, self._on_exit)
        self._feed(self._spec.stdin)

    def advance(self, now: float) -> bool:
        """Move through the phases as far as what happened and the clock allow; True when done."""
        spec = self._spec
        while True:
            if self.phase == _RUNNING:
                if self._exited:
                    self._enter(_DRAINING, now + spec.exit_drain)
                elif now >= self.deadline:
                    self._timed_out = True
                    self._signal_group(spec.kill_signal)
                    self._enter(_TERMINATING, now + spec.grace)
                else:
                    return False
            elif self.phase == _TERMINATING:
                if self._exited:
                    self._enter(_DRAINING, now + spec.exit_drain)
                elif now >= self.deadline:
                    # SIGKILL after grace: a hook may ignore SIGTERM. Draining then also
                    # lets the hook's own process finish dying.
                    self._signal_group(signal.SIGKILL)
                    self._enter(_DRAINING, now + spec.exit_drain)
                else:
                    return False
            elif self.phase == _DRAINING:
                # Descendants may hold the pipes open forever: take what is there by the
                # deadline and stop waiting.
                if (self._exited and self._open_pipes == 0) or now >= self.deadline:
                    for pipe in (self._stdout, self._stderr):
                        self._read_final(pipe)
                    self.phase = _DONE
                return self.phase == _DONE
            else:
                return True

    def _enter(self, phase: int, deadline: float) -> None:
        self.phase, self.deadline = phase, deadline

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

    # ---- what the loop reports

    def _on_readable(self, pipe: _Pipe) -> None:
        if pipe.read() == 0:
            self._close_pipe(pipe)
            self._open_pipes -= 1
            if self._open_pipes == 0:
                self._changed()

    def _on_exit(self) -> None:
        if self._exited or self._reaped:
            return
        self._exited = True
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
        self._close_stdin()
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

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

    # ---- the end

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
                # Still alive after SIGKILL (stuck in the kernel): reap it when it exits,
                # on a thread, so no loop has to outlive this run for it.
                self._pidfd = None
                self._reaped = True
                _reap_in_thread(self._popen, pidfd)
                return
        self._popen.wait()  # a zombie by now, or (without a pidfd) SIGKILLed: no long wait
        self._reaped = True
        if pidfd is not None:
            os.close(pidfd)
            self._pidfd = None

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


_started = threading.local()


def _started_pids() -> list[int]:
    """The hooks this thread started and has not closed yet, by pid (run_processes kills
    those it did not get hold of when an interrupt cut in between the start and its record:
    the hook's process group would otherwise run on, relay having forgotten it)."""
    pids: list[int] | None = getattr(_started, "pids", None)
    if pids is None:
        pids = _started.pids = []
    return pids


def _kill_started(pid: int) -> None:
    """End a hook started on this thread that no one holds (its group killed, it reaped)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    with contextlib.suppress(ValueError):
        _started_pids().remove(pid)


def _spawn(
    launch: Launch, env: Mapping[str, str], cwd: str | None
) -> tuple[subprocess.Popen[bytes] | _Child, Launch, int, int, int]:
    """Start the hook in its own process group with three pipes; raise _SpawnError."""
    if launch.refusal is not None:
        raise _SpawnError(launch, launch.refusal)
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
) -> subprocess.Popen[bytes] | _Child:
    stdin, stdout, stderr = child_fds
    argv, executable = list(launch.argv), None
    copies: list[int] = []
    try:
        if launch.sealed is not None:
            copy = _sealed_copy(launch.sealed)
            copies.append(copy)
            if launch.sealed_word == 0:
                executable = f"/proc/self/fd/{copy}"  # argv[0] stays the script's name
            else:
                argv[launch.sealed_word] = f"/dev/fd/{copy}"
        if launch.template:
            # A pinned shell command: its scripts read their copies by descriptor path,
            # from 10 up so that the command's own redirections (0-9) cannot touch them.
            copies.extend(_sealed_copy(data, lowest=10) for data in launch.copies)
            argv[launch.template_word] = "".join(
                part if isinstance(part, str) else f"/dev/fd/{copies[part]}"
                for part in launch.template
            )
        if _FORK_EXEC is None:
            popen = subprocess.Popen(
                argv,
                executable=executable,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=env,
                cwd=cwd,
                process_group=0,
                pass_fds=tuple(copies),
            )
            _started_pids().append(popen.pid)
            return popen
        return _fork_exec(argv, executable, child_fds, env=env, cwd=cwd, pass_fds=tuple(copies))
    finally:
        for copy in copies:
            os.close(copy)


class _Child:
    """A hook process started by `_fork_exec`: what the runner used of a Popen."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self) -> int:
        """Reap the process (blocking until it exits); its exit code, -N for signal N."""
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped elsewhere: as Popen.wait says then
                status = 0
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _fork_exec(
    argv: list[str],
    executable: str | None,
    child_fds: tuple[int, int, int],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    pass_fds: tuple[int, ...],
) -> _Child:
    """What `subprocess.Popen` does for the runner's one way of starting a hook (vfork,
    the child's PATH, cwd, close_fds, default signals, its own process group), without
    its general machinery: about 50 us less per hook, on the path every guard takes.
    Raises OSError as Popen does (the filename the cwd when the child failed before its
    exec), ValueError for an `=` in a variable's name."""
    assert _FORK_EXEC is not None
    stdin, stdout, stderr = child_fds
    encoding, errors = _FS_ENCODING
    env_list = _environment_list(env, encoding, errors)
    program = os.fsencode(executable or argv[0])
    if os.path.dirname(program):
        executables: tuple[bytes, ...] = (program,)
    else:
        executables = tuple(
            os.path.join(os.fsencode(folder), program) for folder in os.get_exec_path(env)
        )
    errpipe_read, errpipe_write = os.pipe2(os.O_CLOEXEC)
    try:
        try:
            pid = _FORK_EXEC(
                argv, executables, True, tuple(sorted({*pass_fds, errpipe_write})),
                cwd, env_list, stdin, -1, -1, stdout, -1, stderr,
                errpipe_read, errpipe_write, True, False, 0, None, None, None, -1, None,
                getattr(subprocess, "_USE_VFORK", True),
            )  # fmt: skip
            _started_pids().append(pid)
        finally:
            os.close(errpipe_write)
        failure = bytearray()
        while len(failure) <= 50_000:
            part = os.read(errpipe_read, 50_000)
            if not part:
                break
            failure += part
    finally:
        os.close(errpipe_read)
    child = _Child(pid)
    if failure:
        child.wait()
        _started_pids().remove(pid)
        name, _, rest = bytes(failure).partition(b":")
        number, _, message = rest.partition(b":")
        if name != b"OSError" or not number:
            raise OSError(f"cannot start: {bytes(failure)[:200]!r}")
        code = int(number, 16)
        # "noexec": the child failed before its exec (at the cwd): Popen names the cwd.
        filename = cwd if message == b"noexec" else (executable or argv[0])
        raise OSError(code, os.strerror(code) if code else message.decode(), filename)
    return child


def _environment_list(env: Mapping[str, str], encoding: str, errors: str) -> list[bytes]:
    """`NAME=value` for each variable, encoded: as one string, with no Python step per
    variable (a client's environment is dozens, on the path of every hook started).
    ValueError for an `=` in a name, or a NUL anywhere, as Popen raises."""
    if not env:
        return []
    if "=" in "\0".join(env):
        raise ValueError("illegal environment variable name")
    env_list = "\0".join(map("=".join, env.items())).encode(encoding, errors).split(b"\0")
    if len(env_list) != len(env):
        raise ValueError("embedded null byte")
    return env_list


def _find_fork_exec() -> Callable[..., int] | None:
    """CPython's own spawn primitive, where its arguments are the ones known here (3.11
    to 3.13: `_fork_exec` above passes them), else None (Popen starts the hooks)."""
    if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13):
        return None
    try:
        import _posixsubprocess
    except ImportError:
        return None
    found: Callable[..., int] | None = getattr(_posixsubprocess, "fork_exec", None)
    return found


_FORK_EXEC = _find_fork_exec()
_FS_ENCODING = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _sealed_copy(data: bytes, *, lowest: int = 0) -> int:
    """A read-only descriptor (`lowest` or above) of a sealed memfd holding `data`:
    nothing can change it, and no descriptor open for writing stops it from being
    executed (ETXTBSY)."""
    import fcntl

    if not hasattr(os, "memfd_create"):
        raise OSError(errno.ENOSYS, "this system has no sealed memory files (memfd)")
    writable = os.memfd_create("relay-hook", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(writable, view) :]
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(writable, fcntl.F_ADD_SEALS, seals)
        readable = os.open(f"/proc/self/fd/{writable}", os.O_RDONLY | os.O_CLOEXEC)
        if readable >= lowest:
            return readable
        try:
            return fcntl.fcntl(readable, fcntl.F_DUPFD_CLOEXEC, lowest)
        finally:
            os.close(readable)
    finally:
        os.close(writable)


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
    if exc.errno == errno.EACCES and _is_unexecutable_file(program, cwd):
        return f"{reason}: {program} is not executable (to fix: chmod +x {shlex.quote(program)})"
    return f"{reason}: {program}"


def _is_unexecutable_file(program: str, cwd: str | None) -> bool:
    """Whether `program` names a regular file that lacks the execute bit."""
    path = os.path.join(cwd or "", program) if "/" in program else None
    if path is None:
        return False
    try:
        status = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(status.st_mode) and not status.st_mode & 0o111


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


def _watch_exit_in_thread(pid: int, loop: _Loop, on_exit: Callable[[], None]) -> None:
    """Without pidfds: a thread waits for the exit, leaving the zombie to be reaped."""

    def watch() -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(on_exit)

    threading.Thread(target=watch, name=f"relay-hook-{pid}", daemon=True).start()


def _reap_in_thread(popen: subprocess.Popen[bytes] | _Child, pidfd: int) -> None:
    def reap() -> None:
        popen.wait()
        os.close(pidfd)

    threading.Thread(target=reap, name=f"relay-reap-{popen.pid}", daemon=True).start()


def _poll_readable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))

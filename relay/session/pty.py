"""The wrapped agent on the slave side of a new pseudo-terminal; relay holds the master.

The agent is a session leader with the PTY as its controlling terminal, so it sees a
real terminal (isatty, window size, SIGWINCH, job-control signals) exactly as when the
human runs it directly. Its process group is its own pid.

Guarantees: reads and writes never block the event loop (non-blocking master, anyio's
`wait_readable` / `wait_writable`); the exit is watched through a pidfd where the kernel
has one; `terminate` ends with SIGKILL after the grace; `close` SIGKILLs. When the agent
has exited, whatever is left of its process group and session is SIGKILLed before the
agent is reaped (as for hooks, DESIGN §6), so no process is left behind; a descendant
that wants to outlive the agent starts a session of its own with `setsid`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType

import anyio

from relay.engine.runner import describe_spawn_error, open_pidfd
from relay.errors import RelayError

_EOF = b"\x04"  # Ctrl-D: VEOF of a terminal in its default (canonical) mode
_CLOSE_REAP_WAIT = 1.0  # seconds close() blocks for a SIGKILLed agent to be reaped
_EXITED_WRITE_POLL = 0.1  # seconds between exit checks while the PTY input is full


class AgentSpawnError(RelayError):
    """The agent could not be started: names the command, the reason and the directory."""

    def __init__(self, message: str, *, argv: Sequence[str], cwd: str | None = None) -> None:
        self.message = message
        self.argv = tuple(argv)
        self.cwd = cwd
        super().__init__(message)


class AgentExitedError(RelayError):
    """Input was written to an agent that has already exited."""

    def __init__(self, pid: int, exit_code: int | None) -> None:
        self.pid = pid
        self.exit_code = exit_code
        super().__init__(f"agent (pid {pid}) has exited; its input is closed")


class AgentPty:
    """An agent process on the slave side of a new PTY; relay holds the master."""

    def __init__(self, popen: subprocess.Popen[bytes], master_fd: int) -> None:
        """Adopt a started agent; use `AgentPty.spawn`."""
        self._popen = popen
        self.pid: int = popen.pid
        self.master_fd: int = master_fd
        self._closed = False
        self._pidfd = open_pidfd(self.pid)
        self._wait_lock: anyio.Lock | None = None
        self._input_lock: anyio.Lock | None = None
        self._input_owner: int | None = None
        self.size: tuple[int, int] = (24, 80)
        """The window size relay last gave the PTY, as (rows, cols)."""

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        rows: int = 24,
        cols: int = 80,
    ) -> AgentPty:
        """Start `argv` on a new PTY of `rows` x `cols`; raise AgentSpawnError when it cannot start."""
        argv = tuple(argv)
        if not argv or not argv[0]:
            raise AgentSpawnError("empty command", argv=argv, cwd=cwd)
        master_fd, slave_fd = os.openpty()  # both close-on-exec
        try:
            _set_window_size(slave_fd, rows, cols)
            popen = subprocess.Popen(
                argv,
                stdin=slave_fd,
                stdout=slave_fd,
                stderr=slave_fd,
                env=env,
                cwd=cwd,
                close_fds=True,
                start_new_session=True,
                # Popen cannot make the PTY the controlling terminal by itself; this runs
                # after setsid and after the slave is dup'ed onto 0, 1 and 2. It is one
                # ioctl, nothing that could wait on a lock another thread held at fork
                # time (the hazard of preexec_fn); os.fork + login_tty would need a
                # fork of the whole interpreter, which 3.12 warns about under threads.
                preexec_fn=_take_controlling_terminal,  # noqa: PLW1509
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            os.close(master_fd)
            raise AgentSpawnError(
                f"cannot start agent: {describe_spawn_error(exc, argv[0], cwd)}", argv=argv, cwd=cwd
            ) from None
        finally:
            os.close(slave_fd)  # the agent holds the slave now; its exit brings EOF
        os.set_blocking(master_fd, False)
        agent = cls(popen, master_fd)
        agent.size = (rows, cols)
        return agent

    # ---- I/O on the master

    async def read(self, max_bytes: int = 65536) -> bytes:
        """The agent's next output bytes; b"" at EOF (the agent closed its terminal or exited).

        A PTY hands out at most about 4 KiB per read: what is already there is taken in
        the same call, up to `max_bytes`, so a fast writer costs one loop turn (and one
        pass of the output's consumers) per 64 KiB rather than per 4 KiB."""
        while not self._closed:
            try:
                data = os.read(self.master_fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self.master_fd)
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # Linux: every slave fd is closed
                    return b""
                raise
            return self.read_more(data, max_bytes) if data else data
        return b""

    def read_more(self, data: bytes, max_bytes: int) -> bytes:
        """`data` (just read) and whatever more the agent has written meanwhile, up to
        `max_bytes`, without waiting."""
        parts = [data]
        size = len(data)
        while size < max_bytes:
            try:
                more = os.read(self.master_fd, max_bytes - size)
            except OSError:  # nothing more yet, or EIO: the next read reports it
                break
            if not more:
                break
            parts.append(more)
            size += len(more)
        return data if len(parts) == 1 else b"".join(parts)

    async def write(self, data: bytes) -> None:
        """Write all of `data` to the agent's input; raise AgentExitedError if the agent is gone."""
        owner = self._input_owner
        if owner is not None and owner == anyio.get_current_task().id:
            await self._write_all(data)
            return
        async with self._input():
            await self._write_all(data)

    def write_nowait(self, data: bytes) -> int:
        """Write what the agent's input takes now, when nobody holds or waits for it (see
        `exclusive_input`): how many bytes were written (0 when it is held, full, or the
        agent is gone; `write` then does the rest, or says what went wrong)."""
        lock = self._input_lock
        if self._closed or (lock is not None and lock.locked()):
            return 0
        try:
            return os.write(self.master_fd, data)
        except OSError:
            return 0

    @contextlib.asynccontextmanager
    async def exclusive_input(self) -> AsyncIterator[None]:
        """Hold the agent's input: writes from other tasks wait until the block ends.

        The Injector holds it for a whole delivery, so keys the human types meanwhile
        reach the agent after the injected Enter instead of in the middle of the text.
        """
        async with self._input():
            self._input_owner = anyio.get_current_task().id
            try:
                yield
            finally:
                self._input_owner = None

    def _input(self) -> anyio.Lock:
        if self._input_lock is None:
            self._input_lock = anyio.Lock()
        return self._input_lock

    async def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            # Reaped (its leftovers killed with it): the input goes nowhere. Fail now, not
            # once the PTY's buffer is full: a full run of the suite once saw 100 KiB taken.
            if self._closed or self._popen.returncode is not None:
                raise AgentExitedError(self.pid, self.exit_code)
            try:
                written = os.write(self.master_fd, view)
            except BlockingIOError:
                # A dead agent's PTY input fills up and stays full: check for the exit
                # instead of waiting for room forever.
                if self._reap_if_exited():
                    raise AgentExitedError(self.pid, self.exit_code) from None
                with anyio.move_on_after(_EXITED_WRITE_POLL):
                    await anyio.wait_writable(self.master_fd)
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:
                    raise AgentExitedError(self.pid, self.exit_code) from None
                raise
            view = view[written:]

    def resize(self, rows: int, cols: int) -> None:
        """Set the PTY's window size; the kernel sends SIGWINCH to the agent when it changes."""
        if not self._closed:
            _set_window_size(self.master_fd, rows, cols)
            self.size = (rows, cols)

    def window_size(self) -> tuple[int, int]:
        """The PTY's window size as (rows, cols)."""
        packed = fcntl.ioctl(self.master_fd, termios.TIOCGWINSZ, b"\0" * 8)
        rows, cols, _, _ = struct.unpack("HHHH", packed)
        return rows, cols

    def line_mode(self) -> bool:
        """Whether the agent reads its terminal a line at a time (canonical mode: the kernel
        edits the line and a CR or LF submits it), as a shell's child or a plain REPL does;
        False for an agent that reads key by key (raw mode: editors, TUIs, readline while
        it edits). Read from the PTY pair's termios; True when it cannot be read."""
        if self._closed:
            return True
        try:
            return bool(termios.tcgetattr(self.master_fd)[3] & termios.ICANON)
        except termios.error:
            return True

    def owns_terminal(self) -> bool | None:
        """Whether the agent's own process group is the PTY's foreground group now: False
        while another group has it (a job the agent runs in a group of its own, as a shell
        does), None once the PTY is closed. One ioctl on the master."""
        if self._closed:
            return None
        try:
            # A group outside relay's PID namespace reads as 0: not the agent's either.
            return os.tcgetpgrp(self.master_fd) == self.pid
        except OSError:
            return None

    # ---- the process

    @property
    def exit_code(self) -> int | None:
        """The exit code once the agent has been reaped (128+N for signal N), else None."""
        return _exit_code(self._popen.returncode)

    @property
    def exit_status(self) -> int | None:
        """How the agent ended once reaped: its exit code, or -N for signal N (None before)."""
        return self._popen.returncode

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the agent's process group (nothing once the agent is reaped)."""
        if self._popen.returncode is None:
            # Not reaped yet, so the pid still names this group, never a reused one.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    async def wait(self) -> int:
        """Wait for the agent to exit, without blocking the loop; its exit code (128+N for a signal)."""
        if self._wait_lock is None:
            self._wait_lock = anyio.Lock()
        async with self._wait_lock:  # one task at a time on the pidfd
            while not self._reap_if_exited():
                if self._pidfd is not None:
                    await anyio.wait_readable(self._pidfd)
                else:
                    await anyio.sleep(0.05)  # no pidfd (old kernel, seccomp): poll
        code = self.exit_code
        assert code is not None
        return code

    async def terminate(self, *, eof_first: bool = True, grace: float = 2.0) -> int:
        """End the agent: Ctrl-D, then SIGTERM, then SIGKILL, each after `grace` seconds; its exit code.

        Worst case 2 x `grace` with `eof_first`. Keep reading the agent's output meanwhile
        (a pump), or an agent blocked on a full terminal cannot exit gracefully.
        """
        if eof_first and not self._reap_if_exited() and not self._closed:
            with contextlib.suppress(OSError):  # a full input queue: go on to SIGTERM
                os.write(self.master_fd, _EOF)
            await self._wait_at_most(grace)
        if not self._reap_if_exited():
            self.send_signal(signal.SIGTERM)
            await self._wait_at_most(grace)
        if not self._reap_if_exited():
            # SIGKILL after grace: an agent may ignore SIGTERM.
            self.send_signal(signal.SIGKILL)
        return await self.wait()

    async def _wait_at_most(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self.wait()

    def close(self) -> None:
        """SIGKILL the agent and what is left of its session, reap it, release the master."""
        if self._popen.returncode is None:
            self.send_signal(signal.SIGKILL)
            if self._pidfd is None or _poll_readable(self._pidfd, _CLOSE_REAP_WAIT):
                self._reap_if_exited(block=self._pidfd is None)
            # else: stuck in the kernel after SIGKILL; subprocess reaps it later.
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if not self._closed:
            self._closed = True
            os.close(self.master_fd)

    def _reap_if_exited(self, *, block: bool = False) -> bool:
        """Reap the agent if it has exited, SIGKILLing what is left of its session first; True once reaped."""
        if self._popen.returncode is not None:
            return True
        options = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
        try:
            exited = os.waitid(os.P_PID, self.pid, options)
        except ChildProcessError:  # reaped behind our back (a SIGCHLD handler's waitpid(-1))
            exited = None
        else:
            if exited is None:
                return False
            # The zombie still holds its pid, so the group and session ids cannot have
            # been reused: these kills reach only the agent's own leftovers.
            self._kill_leftovers()
        self._popen.wait()
        return True

    def _kill_leftovers(self) -> None:
        """SIGKILL every process still in the agent's process group or session."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for pid in _session_members(self.pid):
            if pid != self.pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    async def __aenter__(self) -> AgentPty:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _take_controlling_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _set_window_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _exit_code(returncode: int | None) -> int | None:
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


def _session_members(sid: int) -> list[int]:
    """Pids whose session is `sid`, from /proc (Linux); empty where /proc is missing."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:  # gone meanwhile
            continue
        # After "(comm)": state, ppid, pgrp, session.
        if len(fields) > 3 and int(fields[3]) == sid:
            members.append(int(entry))
    return members


def _poll_readable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))

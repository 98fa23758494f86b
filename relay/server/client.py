"""The call protocol between hook clients and `relay serve`, and the Python hook client.

Standard library only (and relay.config.sockets, as light), loaded in a few milliseconds
by the launcher `relay install` writes (`python3 -I -S …/relay-hook.py`): the fallback
client where no C compiler built the native one (relay/server/native/relay-hook.c speaks
the same protocol). Either client forwards one `relay hooks run` call (its arguments,
working directory, environment and stdin) to the user's server over a private Unix
socket, prints the answer and exits with its code; when no server answers in time it
runs the call in-process, exactly as `relay hooks run` would, and starts a server for the
next call.

Protocol (all integers big-endian; str = u32 length + bytes):

    request  = "RELAY-CALL 2\\n" str(identity) u32(argc) str*argc str(cwd)
               str(environment) str(stdin)
               (environment: the "KEY=VALUE" entries joined by NULs, split at once by
               the server; the clients put the call's RELAY_CALL_ID last, unless it
               replaces one inherited, and the server keeps the rest decoded; "RELAY-CALL
               1\\n" clients, built before, send u32(envc) str("KEY=VALUE")*envc in its
               place, and are answered too)
    reply    = frame*   ;  frame = u8(kind) u32(length) payload
    kind "A" = accepted: payload u32(ms): the result follows within that many milliseconds
    kind "R" = result:   payload i32(exit code) str(stdout) str(stderr)
    kind "F" = fall back: payload is the reason; the client runs the call itself

A call the server accepted is never run again by the client: its hooks may have run, in
part. When the server stops before the result (killed, say), the client kills what is
left of the call's hooks (the processes in the server's session that carry the call's
RELAY_CALL_ID, which the client puts in the environment it forwards) and answers with
relay's failure: `relay hooks run` with RELAY_CALL_LOST set to the reason renders it
(a deny where the settings ask relay to fail closed). When the client runs a call
itself, a watcher process of its own does the same if the client is killed.

The socket lives in a directory only its user can enter; both ends check that, and each
checks the other's uid (SO_PEERCRED).
"""

from __future__ import annotations

import os
import struct
import sys
import time

from relay.config.sockets import (
    APP,
    SOCKET_NAME_LIMIT,
    fnv1a64,
    identity,
    make_private_dir,
    peer_uid,
    private_dir_ok,
    state_base,
)

TYPE_CHECKING = False  # not typing's: this module must load in a few milliseconds
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Mapping
    from typing import NoReturn

MAGIC = b"RELAY-CALL 2\n"
MAGIC_V1 = b"RELAY-CALL 1\n"
CONTROL = b"RELAY-CTRL 1\n"
"""A control request: CONTROL str(command), answered with one "R" frame whose stdout is
JSON (`status`: the server's state; `stop`: stops it after answering)."""
ACK_TIMEOUT = 2.0
"""Seconds a client waits for the server to accept a call before running it itself."""
RESULT_SLACK = 2.0
"""Seconds a client waits past the server's own deadline before running the call itself."""
MAX_STRING = 64 << 20
MAX_ITEMS = 65_536
READ_CHUNK = 1 << 16
"""Bytes a server asks for at a time while it reads a request."""
DYING_WAIT = 3.0
"""Seconds a client gives a server whose connection closed mid-call to be seen gone (a
loaded machine can take more than one)."""
SPAWN_INTERVAL = 5.0
"""A client starts a server at most this often (a server that cannot start must not cost
every call a fork)."""
CALL_ID_VARIABLE = "RELAY_CALL_ID"
"""In every hook's environment when a host's client made the call: the call's id, by which
relay finds the hooks left running when the process that ran them died."""
LOST_VARIABLE = "RELAY_CALL_LOST"
"""Set for `relay hooks run` by a client whose server stopped in the middle of the call:
why. relay then runs no hook and answers with its failure."""


class Call:
    """One `relay hooks run` call as a client forwards it."""

    __slots__ = ("argv", "caller", "cwd", "env", "stdin")

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        stdin: bytes,
        caller: int | None = None,
    ) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.stdin = stdin
        self.caller = caller
        """The pid of the process that made the call, as the kernel tells the server
        (SO_PEERCRED); None for a call this process makes. What proves that a call comes
        from inside an agent's own session, where its environment only claims it."""


class Reply:
    """What to print and how to exit."""

    __slots__ = ("exit_code", "later", "sent", "stderr", "stdout")

    def __init__(self, exit_code: int, stdout: bytes, stderr: bytes) -> None:
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.sent: Callable[[], None] | None = None
        """What to do once the answer has been returned (written to the client or to
        stdout): the agent channel acknowledges the mail the answer carries."""
        self.later: Callable[[], None] | None = None
        """What to do once the answer has gone out or failed to (see `finished`): work
        the answer does not wait for, such as the hook log's record."""

    def returned(self) -> None:
        """The answer has been returned: run `sent` (its failure only loses the
        acknowledgement; the message then counts as handed, not taken in)."""
        sent, self.sent = self.sent, None
        if sent is not None:
            try:
                sent()
            except Exception:  # the answer is out; there is no one to tell
                return

    def finished(self) -> None:
        """The answer has been sent, or could not be: run `later` (once)."""
        later, self.later = self.later, None
        if later is not None:
            later()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reply):
            return NotImplemented
        return (self.exit_code, self.stdout, self.stderr) == (
            other.exit_code,
            other.stdout,
            other.stderr,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Reply(exit_code={self.exit_code!r}, stdout={self.stdout!r}, stderr={self.stderr!r})"
        )


class Lost:
    """A call the server accepted and did not answer: not to be run again."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class ProtocolViolation(Exception):
    """A request or reply that does not follow the protocol."""


# ---- where the server listens -----------------------------------------------------------


def socket_path(env: Mapping[str, str] | None = None, install: str | None = None) -> str:
    """The server's socket for this environment and install.

    `$RELAY_HOME/state/run/`, else `$XDG_RUNTIME_DIR/agent-relay/run/`, else the user state
    dir's `run/`; `serve-<hash of the install>.sock`. A path too long for a Unix socket
    moves to `/tmp/agent-relay-<uid>/` under a hash of the whole path.
    """
    env = os.environ if env is None else env
    tag = fnv1a64((install or identity()).encode())
    path = os.path.join(state_base(env), "run", f"serve-{tag}.sock")
    if len(path.encode()) <= SOCKET_NAME_LIMIT:
        return path
    return os.path.join(f"/tmp/{APP}-{os.getuid()}", f"serve-{fnv1a64(path.encode())}.sock")


# ---- framing ----------------------------------------------------------------------------


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def encode_call(call: Call, install: str | None = None) -> bytes:
    """A call as the request bytes."""
    parts = [MAGIC, _string((install or identity()).encode())]
    parts.append(struct.pack(">I", len(call.argv)))
    parts.extend(_string(os.fsencode(arg)) for arg in call.argv)
    parts.append(_string(os.fsencode(call.cwd)))
    parts.append(
        _string(b"\0".join(os.fsencode(f"{key}={value}") for key, value in call.env.items()))
    )
    parts.append(_string(call.stdin))
    return b"".join(parts)


def read_request(read: Callable[[int], bytes]) -> tuple[str, Call] | str:
    """Read one request: the client's install identity and its call, or a control command.

    `read(size)` returns from 1 to `size` bytes as they arrive (as `recv` does), b"" at the
    end; it is asked for more than it may hold (the bytes after the request are dropped: a
    client sends nothing more), and called only while the request needs more bytes.
    """
    request = _Request(read)
    magic = request.take(len(MAGIC))
    if magic == CONTROL:
        return request.string().decode("utf-8", "replace")
    if magic not in (MAGIC, MAGIC_V1):
        raise ProtocolViolation("not a relay call")
    install = request.string().decode("utf-8", "replace")
    # os.fsdecode's own work, without a Python call per string (a client's environment is
    # dozens of them, decoded on the server's hot path).
    encoding, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    argv = [request.string().decode(encoding, errors) for _ in range(request.count())]
    cwd = request.string().decode(encoding, errors)
    if magic == MAGIC:
        env = _environment(request.string(), encoding, errors)
    else:
        items = request.strings(request.count())
        env = _variables([item.decode(encoding, errors) for item in items])
    return install, Call(argv=argv, cwd=cwd, env=env, stdin=request.string())


_ENVIRONMENTS: dict[bytes, dict[str, str]] = {}
"""Environments already decoded, by their block as sent: a host sends the same one with
each of its events, so a server decodes it once (a copy of it is each call's own)."""
KEPT_ENVIRONMENTS = 16
KEPT_ENVIRONMENT_SIZE = 256 << 10
"""The environments kept at most, and the largest kept: a client with a new environment for
each call, or a huge one, holds no more than 4 MB here."""


_CALL_ENTRY = b"\0" + CALL_ID_VARIABLE.encode() + b"="


def _environment(block: bytes, encoding: str, errors: str) -> dict[str, str]:
    """The environment of a block of NUL-separated `NAME=value` strings. The call's own id,
    when it comes last (as clients send it), is set on a copy of the rest: the rest is what
    a host sends with each of its events, decoded once."""
    rest, entry, call_id = block.rpartition(_CALL_ENTRY)
    if not entry or b"\0" in call_id:
        return _kept_environment(block, encoding, errors).copy()
    env = _kept_environment(rest, encoding, errors).copy()
    env[CALL_ID_VARIABLE] = call_id.decode(encoding, errors)
    return env


def _kept_environment(block: bytes, encoding: str, errors: str) -> dict[str, str]:
    """The environment of a block, decoded once (see KEPT_ENVIRONMENTS); not to be changed."""
    env = _ENVIRONMENTS.get(block)
    if env is None:
        env = _variables(block.decode(encoding, errors).split("\0") if block else [])
        if len(block) <= KEPT_ENVIRONMENT_SIZE:
            if len(_ENVIRONMENTS) >= KEPT_ENVIRONMENTS:
                _ENVIRONMENTS.clear()
            _ENVIRONMENTS[block] = env
    return env


def _variables(variables: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for variable in variables:
        key, _, value = variable.partition("=")
        if key:
            env[key] = value
    return env


class _Request:
    """A request's bytes, taken from `read` a chunk at a time and parsed in place: a
    client's environment is dozens of strings, each read on the server's hot path."""

    __slots__ = ("_at", "_data", "_read")

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self._data = b""
        self._at = 0

    def take(self, size: int) -> bytes:
        end = self._at + size
        if end > len(self._data):
            self._fill(size)
            end = size
        chunk = self._data[self._at : end]
        self._at = end
        return chunk

    def count(self) -> int:
        count = int.from_bytes(self.take(4), "big")
        if count > MAX_ITEMS:
            raise ProtocolViolation(f"too many items ({count})")
        return count

    def string(self) -> bytes:
        size = int.from_bytes(self.take(4), "big")
        if size > MAX_STRING:
            raise ProtocolViolation(f"string too long ({size} bytes)")
        return self.take(size)

    def strings(self, count: int) -> list[bytes]:
        """`count` strings (`string` in a loop of its own: an environment is dozens)."""
        found: list[bytes] = []
        data, at = self._data, self._at
        for _ in range(count):
            if at + 4 > len(data):
                self._at = at
                self._fill(4)
                data, at = self._data, 0
            size = int.from_bytes(data[at : at + 4], "big")
            if size > MAX_STRING:
                raise ProtocolViolation(f"string too long ({size} bytes)")
            at += 4
            if at + size > len(data):
                self._at = at
                self._fill(size)
                data, at = self._data, 0
            found.append(data[at : at + size])
            at += size
        self._at = at
        return found

    def _fill(self, size: int) -> None:
        """Have at least `size` bytes from the current position on (the position becomes 0)."""
        parts = [self._data[self._at :]]
        have = len(parts[0])
        while have < size:
            chunk = self._read(max(size - have, READ_CHUNK))
            if not chunk:
                raise ProtocolViolation("connection closed mid-message")
            parts.append(chunk)
            have += len(chunk)
        self._data = b"".join(parts)
        self._at = 0


def frame(kind: bytes, payload: bytes) -> bytes:
    """One reply frame."""
    return kind + struct.pack(">I", len(payload)) + payload


def accepted_frame(deadline_ms: int) -> bytes:
    """ "The result follows within `deadline_ms`"."""
    return frame(b"A", struct.pack(">I", max(0, min(deadline_ms, 0xFFFFFFFF))))


def result_frame(reply: Reply) -> bytes:
    """The result of a call."""
    return frame(
        b"R", struct.pack(">i", reply.exit_code) + _string(reply.stdout) + _string(reply.stderr)
    )


def fallback_frame(reason: str) -> bytes:
    """ "Run it yourself", and why."""
    return frame(b"F", reason.encode("utf-8", "replace"))


def _exactly(read: Callable[[int], bytes], size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = read(left)
        if not chunk:
            raise ProtocolViolation("connection closed mid-message")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ---- the client -------------------------------------------------------------------------


def request(path: str, call: Call, *, ack_timeout: float = ACK_TIMEOUT) -> Reply | Lost | None:
    """Send a call to the server at `path`; its reply, None when the caller must run the
    call itself (no server, not ours, not accepted in time, or asked to), or Lost when
    the server accepted it and gave no result (gone mid-call, or past its deadline)."""
    import socket

    if not private_dir_ok(os.path.dirname(path)):
        return None
    accepted = False
    server: tuple[int, int, int | None] | None = None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(ack_timeout)
            sock.connect(path)
            uid = peer_uid(sock)
            if uid is not None and uid != os.getuid():
                return None
            server = _peer_process(sock)
            sock.sendall(encode_call(call))
            sock.shutdown(socket.SHUT_WR)
            # recv itself, not a makefile() reader: a reader left open keeps the socket's
            # fd after close(), and an error's traceback can leave both to the collector.
            read = sock.recv
            deadline = time.monotonic() + ack_timeout
            while True:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                kind = _exactly(read, 1)
                payload = _exactly(read, _read_count_any(read))
                if kind == b"A":
                    accepted = True
                    (milliseconds,) = struct.unpack(">I", payload[:4])
                    deadline = time.monotonic() + milliseconds / 1000 + RESULT_SLACK
                elif kind == b"R":
                    return _parse_result(payload)
                else:
                    return None
    except (OSError, ProtocolViolation, struct.error):
        if not accepted:
            return None
    return _lost(server, call.env.get(CALL_ID_VARIABLE, ""))


def _lost(server: tuple[int, int, int | None] | None, call_id: str) -> Lost:
    """The server accepted a call and gave no result: kill what is left of the call's hooks
    (nothing will read them; a server gone mid-call leaves them orphaned, and a living one
    past its deadline would kill them too), and say why."""
    if server is None:  # no SO_PEERCRED: neither its pid nor its session is known
        return Lost(_NO_RESULT.format(killed=0))
    gone = _ends(server[0], server[2])
    killed = kill_call(call_id, server[1]) if call_id else 0
    if gone:
        return Lost(
            f"relay's server (pid {server[0]}) stopped in the middle of this call "
            f"(killed {killed} of its hook processes); its hooks may have run in part, "
            "so relay does not run them again"
        )
    return Lost(_NO_RESULT.format(killed=killed))


_NO_RESULT = (
    "relay's server accepted this call and gave no result in time (killed {killed} of its "
    "hook processes); its hooks may have run in part, so relay does not run them again"
)


def _peer_process(sock: socket.socket) -> tuple[int, int, int | None] | None:
    """The server's pid, session and start time (SO_PEERCRED; None where unsupported)."""
    import socket

    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    credentials = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    pid = int(struct.unpack("3i", credentials)[0])
    try:
        return pid, os.getsid(pid), _start_ticks(pid)
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot); -1 for a zombie; None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            fields = stat_file.read().rsplit(b")", 1)[1].split()
        return -1 if fields[0] == b"Z" else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _ends(pid: int, started: int | None) -> bool:
    """Whether the server has ended, or does within a second (its socket closes as a
    killed process begins to exit, before it is done)."""
    deadline = time.monotonic() + DYING_WAIT
    while _alive(pid, started):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _alive(pid: int, started: int | None) -> bool:
    """Whether `pid` still runs and is the process that started at `started`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process now: the pid was reused
    ticks = _start_ticks(pid)
    return ticks != -1 and (started is None or ticks is None or ticks == started)


def kill_call(call_id: str, session: int) -> int:
    """SIGKILL the processes of this user in `session` whose environment holds the call's
    id (a hook and what it started, and not what went to a session of its own to outlive
    it); how many. Linux only (/proc); elsewhere nothing is found."""
    import signal

    marker = f"\0{CALL_ID_VARIABLE}={call_id}\0".encode()
    me, uid = os.getpid(), os.getuid()
    signalled: set[int] = set()  # one still dying is seen again: not killed or counted twice
    for _ in range(3):  # a hook may fork while it is being killed
        found = 0
        try:
            names = os.listdir("/proc")
        except OSError:
            return len(signalled)
        for name in names:
            if not name.isdigit() or int(name) == me:
                continue
            pid = int(name)
            if pid in signalled:
                continue
            try:
                if os.stat(f"/proc/{name}").st_uid != uid or os.getsid(pid) != session:
                    continue
                with open(f"/proc/{name}/environ", "rb") as environ:
                    if marker not in b"\0" + environ.read():
                        continue
                if _start_ticks(pid) == -1:
                    continue  # a zombie: it has ended, and is not to be counted again
                os.kill(pid, signal.SIGKILL)
                signalled.add(pid)
                found += 1
            except OSError:
                continue  # gone meanwhile, or not ours to read
        if not found:
            break
    return len(signalled)


def control(path: str, command: str, *, timeout: float = ACK_TIMEOUT) -> bytes | None:
    """Send a control command (`status`, `stop`) to the server at `path`; its JSON answer,
    or None when no server of ours answers there."""
    import socket

    if not private_dir_ok(os.path.dirname(path)):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            uid = peer_uid(sock)
            if uid is not None and uid != os.getuid():
                return None
            sock.sendall(CONTROL + _string(command.encode()))
            sock.shutdown(socket.SHUT_WR)
            kind = _exactly(sock.recv, 1)
            payload = _exactly(sock.recv, _read_count_any(sock.recv))
            return _parse_result(payload).stdout if kind == b"R" else None
    except (OSError, ProtocolViolation, struct.error):
        return None


STOP_WAIT = 10.0
"""Seconds `stop_server` waits for the server's process to end after it agreed to stop."""


def stop_server(path: str, *, wait: float = STOP_WAIT) -> tuple[int | None, bool]:
    """Ask the server at `path` to stop and wait until its process has ended: (its pid,
    True) once gone, (its pid, False) if it still runs after `wait` seconds, (None, True)
    when no server of ours answers there."""
    import json

    status = control(path, "status")
    if status is None:
        return None, True
    pid = json.loads(status).get("pid")
    started = _start_ticks(pid) if isinstance(pid, int) else None
    if control(path, "stop") is None:
        return (pid if isinstance(pid, int) else None), True  # it ended meanwhile
    if not isinstance(pid, int):
        return None, True
    deadline = time.monotonic() + wait
    # The pid, not the socket: the socket goes first, while the server still flushes its log.
    while _alive(pid, started):
        if time.monotonic() > deadline:
            return pid, False
        time.sleep(0.02)
    return pid, True


def _read_count_any(read: Callable[[int], bytes]) -> int:
    (size,) = struct.unpack(">I", _exactly(read, 4))
    if size > 2 * MAX_STRING:
        raise ProtocolViolation(f"frame too long ({size} bytes)")
    return int(size)


def _parse_result(payload: bytes) -> Reply:
    (code,) = struct.unpack(">i", payload[:4])
    position = 4
    texts: list[bytes] = []
    for _ in range(2):
        (size,) = struct.unpack(">I", payload[position : position + 4])
        texts.append(payload[position + 4 : position + 4 + size])
        position += 4 + size
    return Reply(exit_code=code, stdout=texts[0], stderr=texts[1])


def start_server(path: str, python: str | None = None) -> None:
    """Start `relay serve` for `path`, fully detached (own session, no inherited stdio), at
    most once per SPAWN_INTERVAL, and not under a file size limit; never waits for it."""
    if file_size_limited():
        return
    folder = os.path.dirname(path)
    if not make_private_dir(folder):
        return
    stamp = path + ".spawned"
    try:
        if time.time() - os.stat(stamp).st_mtime < SPAWN_INTERVAL:
            return
    except OSError:
        pass
    try:
        with open(stamp, "wb"):
            pass
        os.utime(stamp)
        pid = os.fork()
    except OSError:
        return
    if pid:
        os.waitpid(pid, 0)  # the first child exits at once; the server is its orphan
        return
    try:  # the child: no return from here
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 65536)
        os.environ.pop(CALL_ID_VARIABLE, None)  # this call's, not the server's
        executable = python or sys.executable
        os.execv(executable, [executable, "-I", "-m", "relay", "serve", "--socket", path])
    finally:
        os._exit(127)


def main(argv: list[str]) -> int:
    """The Python hook client: forward the call, or run it here when no server answers."""
    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    os.environ[CALL_ID_VARIABLE] = os.urandom(16).hex()  # the hooks of this call carry it
    call = Call(argv=argv, cwd=_cwd(), env=dict(os.environ), stdin=stdin)
    path = socket_path()
    reply = request(path, call)
    if isinstance(reply, Lost):
        start_server(path)
        os.environ[LOST_VARIABLE] = reply.reason
        run_in_process(argv, stdin)
    if reply is None:
        start_server(path)
        watch_call(os.environ[CALL_ID_VARIABLE])
        run_in_process(argv, stdin)
    sys.stdout.buffer.write(reply.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(reply.stderr)
    sys.stderr.flush()
    return reply.exit_code


def watch_call(call_id: str) -> None:
    """Start a watcher for the call this process is about to run itself: when this process
    ends, however (the host may kill it), it kills what is left of the call's hooks in
    this process's session (nothing, when relay ended as it should). Detached: no host
    waits on it."""
    session = os.getsid(0)
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
    except OSError:
        return
    if pid:
        os.close(read_end)
        os.set_inheritable(write_end, True)  # held by the relay exec'd here, until it ends
        os.waitpid(pid, 0)
        return
    try:  # the child: no return from here
        os.setsid()  # signals to the host's process group do not reach it
        if os.fork() == 0:
            os.chdir("/")  # holds no folder of the host's
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, read_end)
            os.closerange(read_end + 1, 65536)
            while os.read(read_end, 1):
                continue
            kill_call(call_id, session)
    finally:
        os._exit(0)


def run_in_process(argv: list[str], stdin: bytes) -> NoReturn:
    """Become `python -I -m relay hooks run ARGV`, the event on stdin again (as the native
    client does): the answer is then exactly relay's in-process one. Never returns."""
    if stdin:
        fd = _event_input(stdin)
        if fd is not None:
            os.dup2(fd, 0)
            os.close(fd)
    flags = ["-B"] if file_size_limited() else []
    command = [sys.executable, "-I", *flags, "-m", "relay", "hooks", "run", *argv]
    try:
        os.execv(sys.executable, command)
    except OSError as exc:
        import json

        # relay cannot run at all: say so where the user sees it, and fail open.
        message = f"relay: cannot run {sys.executable} ({exc}); reinstall relay"
        sys.stdout.write(json.dumps({"systemMessage": message}) + "\n")
        sys.stdout.flush()
        os._exit(0)


def file_size_limited() -> bool:
    """Whether this process may write only so much to a file (`ulimit -f`): then no server
    is started (it would keep the limit for every later call, its hook log cut short) and
    Python writes no bytecode (CPython writes a .pyc cut short at the limit and replaces the
    good one with it: every later import of that module fails)."""
    import resource

    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def _event_input(data: bytes) -> int | None:
    """A descriptor that reads as `data` from its start: a memfd or a temporary file, else
    (the file size limit reached, a full disk) a pipe; None when there is none at all."""
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("relay-event")
        else:
            import tempfile

            fd, name = tempfile.mkstemp(prefix="relay-event-")
            os.unlink(name)
    except OSError:
        return _event_pipe(data)
    try:
        _write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:  # EFBIG past `ulimit -f` (Python ignores SIGXFSZ), ENOSPC
        os.close(fd)
        return _event_pipe(data)
    return fd


def _event_pipe(data: bytes) -> int | None:
    """The read end of a pipe that a detached process of its own fills with `data` (so
    the relay that execs here has no child it did not start)."""
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
    except OSError:
        return None
    if pid:
        os.close(write_end)
        os.waitpid(pid, 0)
        return read_end
    try:  # the child: no return from here
        os.close(read_end)
        if os.fork() == 0:
            _write_all(write_end, data)
    finally:
        os._exit(0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return ""  # deleted: the event's cwd or --cwd must say where the project is


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))

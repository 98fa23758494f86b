"""`relay logs NAME`: a session's clean text, from its transcript (what `relay run` records:
the agent's output lines, what relay typed in, relay's own notices), across restarts and
the transcript's rotation; `--follow` waits for more."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from relay.errors import RelayError

FOLLOW_POLL = 0.1
"""Seconds between looks at a followed transcript."""
MAX_LINE = 1 << 20
"""A transcript line longer than this is not one relay wrote: skipped."""


class Entry(msgspec.Struct):
    time: str
    kind: str
    text: str


@dataclass
class Transcript:
    """Where a session's transcript is, and whether it exists."""

    name: str
    path: Path

    @property
    def rotated(self) -> Path:
        return self.path.with_name(self.path.name + ".1")


def transcript_of(name: str) -> Transcript:
    from relay.session.sessions import sessions_dir

    return Transcript(name, sessions_dir() / f"{name}.transcript.jsonl")


class NoLogs(RelayError):
    """No transcript for the name asked for."""


def check_exists(transcript: Transcript, known: list[str]) -> None:
    if transcript.path.exists() or transcript.rotated.exists():
        return
    from relay.errors import did_you_mean

    hint = did_you_mean(transcript.name, known)
    raise NoLogs(
        f"no transcript for {transcript.name!r}{hint} (relay run writes one per session "
        f"name unless session.transcript is false); with transcripts: {', '.join(known) or 'none'}"
    )


def names_with_logs() -> list[str]:
    from relay.session.sessions import sessions_dir

    folder = sessions_dir()
    if not folder.is_dir():
        return []
    return sorted(
        {path.name.split(".transcript.jsonl")[0] for path in folder.glob("*.transcript.jsonl*")}
    )


def _decode(line: bytes) -> Entry | None:
    try:
        return msgspec.json.decode(line, type=Entry)
    except msgspec.DecodeError:
        return None


def read(transcript: Transcript, *, since: str | None = None) -> Iterator[Entry]:
    """Every entry, oldest first: the rotated file's, then the current one's."""
    yield from _read_file(transcript.rotated, since)
    yield from _read_file(transcript.path, since)


def _read_file(path: Path, since: str | None) -> Iterator[Entry]:
    """A transcript file's entries (none when it does not exist); lines that are not
    whole entries (cut short by a crash or a full disk, or not relay's) are skipped."""
    try:
        with path.open("rb") as stream:
            for line in stream:
                entry = _decode(line) if line.strip() and len(line) <= MAX_LINE else None
                if entry is not None and (since is None or entry.time >= since):
                    yield entry
    except FileNotFoundError:
        return


def follow(
    transcript: Transcript, *, since: str | None = None, stop: Callable[[], bool] = lambda: False
) -> Iterator[Entry]:
    """The entries so far, then each new one as it is written, until `stop()` (rotation
    and a transcript that starts anew after a restart are followed)."""
    yield from _read_file(transcript.rotated, since)
    path = transcript.path
    position, identity = 0, _position(path)[1]
    pending = b""
    while not stop():
        size, now_identity = _position(path)
        if now_identity != identity or size < position:  # rotated or replaced
            position, identity, pending = 0, now_identity, b""
        if size > position:
            with path.open("rb") as stream:
                stream.seek(position)
                chunk = stream.read(size - position)
            position += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                entry = _decode(line) if line.strip() else None
                if entry is not None and (since is None or entry.time >= since):
                    yield entry
            if len(pending) > MAX_LINE:
                pending = b""
        else:
            time.sleep(FOLLOW_POLL)


def _position(path: Path) -> tuple[int, tuple[int, int] | None]:
    try:
        stat = path.stat()
    except OSError:
        return 0, None
    return stat.st_size, (stat.st_dev, stat.st_ino)

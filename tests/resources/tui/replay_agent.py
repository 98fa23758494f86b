"""A fake full-screen agent: writes a recorded TUI stream (tests/fixtures/tui) frame by
frame, as the host wrote it, then waits and exits.

usage: replay_agent.py STREAM.bin HOST [SECONDS_BETWEEN_FRAMES] [SECONDS_AT_END]
"""

from __future__ import annotations

import os
import re
import sys
import time

FRAMES = {
    # Claude Code wraps each frame in synchronized-output marks.
    "claude": re.compile(rb"(?<=\x1b\[\?2026l)"),
    # Gemini CLI (Ink) starts a frame by erasing its live area from the bottom up.
    "gemini": re.compile(rb"(?<!\x1b\[1A)(?=(?:\x1b\[2K\x1b\[1A)+\x1b\[2K\x1b\[G)"),
}


def frames(data: bytes, host: str) -> list[bytes]:
    return [part for part in FRAMES[host].split(data) if part]


def main() -> None:
    path, host = sys.argv[1], sys.argv[2]
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01
    end = float(sys.argv[4]) if len(sys.argv) > 4 else 1.5
    with open(path, "rb") as stream:
        data = stream.read()
    for frame in frames(data, host):
        os.write(1, frame)
        time.sleep(pause)
    time.sleep(end)


if __name__ == "__main__":
    main()

"""Memories as JSON Lines: one Memory object per line, for export and import."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO

import msgspec

from relay.errors import RelayError
from relay.services.memory.model import Memory

__all__ = ["MemoryFileError", "read_jsonl", "write_jsonl"]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Memory)


class MemoryFileError(RelayError):
    """A line of a memories file that is not a memory: names the file and the line."""

    def __init__(self, message: str, *, source: str, line: int) -> None:
        self.message = message
        self.source = source
        self.line = line
        super().__init__(f"{source}:{line}: {message}")


def write_jsonl(memories: Iterable[Memory], stream: IO[str]) -> int:
    """Write memories to a text stream, one JSON object per line; return how many."""
    count = 0
    for memory in memories:
        stream.write(_encoder.encode(memory).decode())
        stream.write("\n")
        count += 1
    return count


def read_jsonl(stream: Iterable[str], *, source: str | None = None) -> Iterator[Memory]:
    """The memories in a JSON Lines text stream; blank lines are skipped.

    Raises MemoryFileError naming `source` (default: the stream's name) and the line.
    """
    name = source if source is not None else str(getattr(stream, "name", "<input>"))
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield _decoder.decode(line)
        except msgspec.DecodeError as exc:
            # msgspec says what and where inside the line ("Expected `str`, got `int` - at
            # `$.id`"); the line number is ours to add.
            raise MemoryFileError(f"not a memory: {exc}", source=name, line=number) from None

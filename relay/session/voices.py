"""Where an agent speaks on its screen: which lines of its output are its own words.

A directive counts only where the agent itself speaks (DESIGN §8): a file the agent
reads and displays must not be able to fire one. Plain agents print their answers at
column 0. The full-screen hosts draw the assistant's text after a marker and indent its
continuation lines, and draw tool output inside blocks of their own (Claude Code's `⎿`,
Gemini CLI's boxes, Codex's `└`), deeper-indented. A `Voice` says how one agent draws, and a
`Speaking` follows one stream's lines to answer "is this line the agent's own words?".
See spec/directives.md §3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

BLANKS = " \t\u00a0"  # no-break space: TUIs print it where a space must not wrap


@dataclass(frozen=True)
class Voice:
    """How one kind of agent draws its own text."""

    name: str
    markers: str
    """Characters drawn at column 0 before the assistant's text (Claude Code `●`/`⏺`)."""
    indent: int
    """The column the assistant's text starts at after a marker; its continuation lines
    start there too. 0: no continuation lines (a plain agent)."""
    column_zero: bool
    """Whether a line that starts at column 0 is the agent's own (a plain agent's)."""
    tool_starts: str = ""
    """First characters of a line that opens or frames tool output (`⎿`, a box)."""
    turn_marks: str = ""
    """Characters drawn at column 0 before the human's turn (Gemini CLI `>`): its own
    continuation lines are indented like the assistant's, so it ends the assistant's text."""
    tool_call: re.Pattern[str] | None = None
    """A marker line whose text is a tool call (`● Bash(ls)`), not the assistant's words."""
    busy: re.Pattern[str] | None = None
    """Text on its screen while it is still answering (its interrupt hint): rows on the
    screen may still change, so a screen reader does not read them yet (relay.session.screen)."""
    turn_state: re.Pattern[bytes] | None = None
    """An escape sequence by which the agent announces its turn's state (group 1): while
    the last one said `working`, rows may still change, as with `busy`."""
    code_colours: frozenset[str] = frozenset()
    """Foreground colours (pyte's hex form) of code blocks drawn at the text's own indent:
    displayed content, told apart from the assistant's words only by colour."""
    state_chars: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_chars", self.markers + self.tool_starts + self.turn_marks)

    def displayed_lead(self, column: int, char: str) -> bool:
        """Whether a row that begins with `char` at `column` is displayed content (tool
        output, or deeper than the assistant's text), in a voice that follows blocks."""
        return self.follows_blocks and (char in self.tool_starts or column > self.indent)

    @property
    def follows_blocks(self) -> bool:
        """Whether lines without an `@` matter (they open or close the assistant's text)."""
        return self.indent > 0


PLAIN = Voice("plain", markers="●⏺✦", indent=0, column_zero=True)
CLAUDE = Voice(
    "claude",
    markers="●⏺",
    indent=2,
    column_zero=False,
    tool_starts="⎿",
    # U+276F (`> ` in older versions) before the human's turn, its further lines at 2;
    # Claude Code 2.1 under relay ran `@deploy:prod` typed on a prompt's second line.
    turn_marks="\u276f>",
    # `● Bash(ls)`, `● Read(a.py)`, `● relay - send_message (MCP)(to: "Bob")`
    tool_call=re.compile(r"[A-Za-z_][\w.:-]*(?: - [\w.-]+(?: \(MCP\))?)?\("),
    busy=re.compile(r"\besc to interrupt\b"),
    code_colours=frozenset({"b1b9f9"}),  # Claude Code 2.1's code block colour (fixtures/tui)
)
GEMINI = Voice(
    "gemini",
    markers="✦",
    indent=2,
    column_zero=False,
    tool_starts="│╭╰┌└",
    turn_marks=">",  # `> Read the notes`; a line the human typed after it: `  @deploy:…`
    busy=re.compile(r"\besc to cancel\b"),
)
CODEX = Voice(
    "codex",
    markers="•",
    indent=2,
    column_zero=False,
    tool_starts="└│",  # `  └ ` opens a tool's output, its later lines 4 deep
    turn_marks="\u203a",  # a right angle quote before the human's line, then rows indented 2
    # Codex 0.169 heads a tool's block with a bullet and a verb: `• Ran ls`, `• Explored`,
    # `• Edited a.py (+1 -0)`, `• Called relay.send_message(…)`; `• Working (3s • esc to
    # interrupt)` is its status row. `Worked for 5s` ends a turn, at the text's indent.
    tool_call=re.compile(
        r"(?:Ran|Running|Explored|Exploring|Edited|Editing|Added|Deleted|Called|Calling"
        r"|Waited|Waiting|Working|Searched|Searching|Updated Plan|Viewed Image)(?:\s|\(|\Z)"
    ),
    busy=re.compile(r"\besc to interrupt\b"),
    # OSC 7501: `state=working:app=codex` when a turn starts, `state=done:…` when it ends;
    # while it works, its spinner redraws the title, but a stalled process draws nothing.
    turn_state=re.compile(rb"\x1b\]7501;state=([a-z_-]+)[:;\x07\x1b]"),
)
VOICES: dict[str, Voice] = {voice.name: voice for voice in (PLAIN, CLAUDE, GEMINI, CODEX)}
STYLES = ("auto", *VOICES)


def voice_for(command: list[str] | tuple[str, ...], style: str = "auto") -> Voice:
    """The voice of `style`, or for "auto" the one the command's program name suggests."""
    if style != "auto":
        return VOICES[style]
    program = Path(command[0]).name if command else ""
    if program in ("claude", "claude-code"):
        return CLAUDE
    if program == "gemini":
        return GEMINI
    if program == "codex":
        return CODEX
    return PLAIN


class Speaking:
    """Follows a stream line by line: does a directive's lead (what precedes its `@`)
    put it where the agent speaks?"""

    __slots__ = ("assistant", "voice")

    def __init__(self, voice: Voice) -> None:
        self.voice = voice
        self.assistant = False  # inside the assistant's text (after its marker line)

    def observe(self, text: str) -> None:
        """A line the voice's state characters may concern (see Voice.state_chars)."""
        voice = self.voice
        if not voice.follows_blocks:
            return
        body = text.lstrip(BLANKS)
        if not body:
            return
        first = body[0]
        if first in voice.markers and len(body) == len(text):
            words = body[1:].lstrip(BLANKS)
            self.assistant = voice.tool_call is None or voice.tool_call.match(words) is None
        elif first in voice.tool_starts or (first in voice.turn_marks and len(body) == len(text)):
            self.assistant = False

    def speaks(self, lead: str) -> bool:
        """Whether text after `lead` (a line's start) is the agent's own words."""
        voice = self.voice
        if not lead:
            return voice.column_zero
        if lead[0] in voice.markers:
            rest = lead[1:]
            width = voice.indent or 2
            return bool(rest) and len(lead) <= width and not rest.strip(BLANKS)
        if voice.indent and len(lead) == voice.indent and not lead.strip(BLANKS):
            return self.assistant
        return False

"""The one search for the escape sequences relay acts on (relay.session.escapes): whatever
the injector's mode scan or the screen test finds, it finds, so that a chunk it passes
over needs neither."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from relay.session.escapes import acted_on
from relay.session.injector import _PRIVATE_MODE, Injector
from relay.session.screen import draws_screen

FRAGMENTS = [
    b"\x1b",
    b"[",
    b"?",
    b"c",
    b";",
    b"0",
    b"1",
    b"2004",
    b"1049",
    b"47",
    b"h",
    b"l",
    b"m",
    b"H",
    b"A",
    b"r",
    b"f",
    b"d",
    b"K",
    b"text ",
    b"\r\n",
]


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40))
def test_whatever_either_reader_acts_on_is_found(parts: list[bytes]) -> None:
    data = b"".join(parts)
    if draws_screen(data) or _PRIVATE_MODE.search(data) is not None:
        assert acted_on(data)


def test_colour_codes_and_line_edits_are_passed_over() -> None:
    assert not acted_on(b"\x1b[1;31mred\x1b[0m \x1b[5Gcol\r\x1b[Kagain\x1b[38;5;196mx\r\n")
    for sequence in (b"\x1b[?2004h", b"\x1b[?2004l", b"\x1bc", b"\x1b[3;1H", b"\x1b[2A"):
        assert acted_on(b"before " + sequence + b" after")


def test_a_mode_split_across_chunks_is_followed_when_the_second_has_none_of_its_own() -> None:
    async def write(data: bytes) -> None:
        pass

    injector = Injector(write)
    injector.observe_output(b"\x1b[?20", modes=acted_on(b"\x1b[?20"))
    assert not injector.bracketed_paste
    injector.observe_output(b"04h> ", modes=acted_on(b"04h> "))  # nothing whole in it alone
    assert injector.bracketed_paste
    injector.observe_output(b"\x1b[0m plain", modes=False)
    assert injector.bracketed_paste

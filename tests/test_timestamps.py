"""relay's one written form of a time (relay.timestamps): the same text the strftime form
gave, for every moment a store may hold."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from relay.timestamps import iso_millis, utc_millis


@given(st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)))
def test_the_form_is_the_strftime_one(moment: datetime) -> None:
    moment = moment.replace(tzinfo=UTC)
    expected = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    assert iso_millis(moment) == expected


def test_now_sorts_as_text_and_moves_by_its_offset() -> None:
    earlier, first, second = utc_millis(-90), utc_millis(), utc_millis()
    assert len(first) == 24 and first.endswith("Z") and earlier < first <= second
    seconds = datetime.fromisoformat(first) - datetime.fromisoformat(earlier)
    assert 89.9 < seconds.total_seconds() < 91

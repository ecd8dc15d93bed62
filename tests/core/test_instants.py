"""One parser for the instants people type: --at, --end, --start, TALLY_COUNT_FROM, countFrom, --count-from."""

import pytest

from tally.core.instants import InvalidInstant, parse_instant
from tally.core.settings import Settings, SettingsError, parse_count_from
from tally.core.windows import InvalidWindow
from tally.core.windows import parse_instant as window_end

T = 1_795_000_000_000  # 2026-11-18T11:06:40Z


@pytest.mark.parametrize(
    "text", ["1795000000", " 1795000000 ", "2026-11-18T11:06:40Z", "2026-11-18T12:06:40+01:00", "2026-11-18T11:06:40.000Z"]
)
def test_every_place_an_instant_is_typed_reads_it_alike(text):
    assert parse_instant(text) == window_end(text) == parse_count_from(text) == T
    assert Settings.from_env({"TALLY_COUNT_FROM": text}).count_from_ms == T


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("yesterday", "must be epoch seconds or ISO-8601 with a UTC offset (2026-11-23T10:00Z): not an ISO-8601 time"),
        ("2026-11-18T11:06:40", "without a UTC offset"),
        ("-5", "not an ISO-8601 time"),
        ("1795000000000", "after the year 9999 (epoch seconds, not milliseconds?)"),
        ("1969-12-31T23:59:59Z", "before the epoch"),
    ],
)
def test_what_names_no_instant_says_which_forms_do(text, message):
    with pytest.raises(InvalidInstant, match=None) as caught:
        parse_instant(text)
    assert message in str(caught.value)
    with pytest.raises(InvalidWindow):
        window_end(text)
    with pytest.raises(SettingsError, match="TALLY_COUNT_FROM"):
        Settings.from_env({"TALLY_COUNT_FROM": text})


def test_a_window_end_may_fall_inside_a_second_a_count_from_may_not():
    assert window_end("2026-11-18T11:06:40.500Z") == T + 500
    with pytest.raises(ValueError, match="whole second"):
        parse_count_from("2026-11-18T11:06:40.500Z")

import pytest
from freezegun import freeze_time

from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.windows import InvalidWindow, Window, now_ms, parse_instant, parse_length

AT = parse_instant("2024-03-28T13:17:42.5Z")


def test_a_24h_window_covers_1440_minutes_ending_with_the_minute_of_at():
    window = Window.ending(AT)
    assert window.minutes == 1440
    assert window.last_minute == AT // MINUTE_MS
    assert window.end_ms == parse_instant("2024-03-28T13:18:00Z")
    assert window.start_ms == parse_instant("2024-03-27T13:18:00Z")
    assert str(window) == "[2024-03-27T13:18Z, 2024-03-28T13:18Z)"


@pytest.mark.parametrize(
    ("instant", "inside"),
    [
        ("2024-03-27T13:17:59.999Z", False),
        ("2024-03-27T13:18:00Z", True),
        ("2024-03-28T13:17:59.999Z", True),  # after AT, but in AT's minute
        ("2024-03-28T13:18:00Z", False),
    ],
)
def test_events_count_by_their_minute(instant, inside):
    assert Window.ending(AT).covers(parse_instant(instant)) is inside


@pytest.mark.parametrize(
    ("text", "ms"),
    [("90m", 90 * MINUTE_MS), ("24h", DAY_MS), ("7d", 7 * DAY_MS), (" 1h ", HOUR_MS), ("1d12h", 36 * HOUR_MS), ("2h30m", 150 * MINUTE_MS)],
)
def test_lengths(text, ms):
    assert parse_length(text) == ms


@pytest.mark.parametrize("text", ["", "1w", "1.5h", "-1h", "h", "24", "24 hours", "1h1d", "m"])
def test_bad_lengths_say_what_is_expected(text):
    with pytest.raises(InvalidWindow, match="90m, 24h, 7d or 1d12h"):
        parse_length(text)


@pytest.mark.parametrize("text", ["0m", "0h", "0d", " 00m ", "0d0h0m"])
def test_an_empty_window_is_refused_as_empty_not_as_misspelt(text):
    with pytest.raises(InvalidWindow, match=f"must be at least a minute, got {text!r}"):
        parse_length(text)


@pytest.mark.parametrize("text", ["2024-03-28T13:17", "yesterday", "-5", "1711631825000000"])
def test_bad_instants_are_invalid_windows(text):
    with pytest.raises(InvalidWindow):
        parse_instant(text)


@pytest.mark.parametrize(("at", "length"), [(AT, 0), (AT, 90_000), (-1, DAY_MS), (HOUR_MS, DAY_MS)])
def test_windows_that_cannot_exist(at, length):
    with pytest.raises(InvalidWindow):
        Window.ending(at, length)


@freeze_time("2024-03-28T13:17:42.5Z")
def test_now_is_the_utc_clock():
    assert now_ms() == AT

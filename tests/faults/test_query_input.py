"""Bad query input: the parsers raise ValueError subclasses that say what is wrong, and the
query command answers anything with status 0, or status 2 and one line on stderr."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from datetime import timedelta
from pathlib import Path
from unittest import mock

import boto3
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from moto import mock_aws
from tally.dynamo.tables import create_tables
from tally.query import validate_query_counter
from tally.core.units import MINUTE_MS
from tally.core.windows import QueryError, Window, parse_instant, parse_length
from tally.reader import read_options

from . import profiles
from .harness import STATS

QUERY_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "query_window.py"

any_text = st.text(st.characters(exclude_categories=()), max_size=30)
lengths = st.one_of(
    any_text,
    st.builds(
        lambda n, unit, pad: f"{pad}{n}{pad}{unit}",
        st.integers(-5, 10**12),
        st.sampled_from("mhdsMH"),
        st.sampled_from(["", " ", "\t"]),
    ),
    st.sampled_from(["24h", "0m", "1m", "７m", "1.5h", "1e3m", "-1h", "90", "h", "", " 2d "]),
)
instants = st.one_of(
    any_text,
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())).map(lambda moment: moment.isoformat()),
    st.sampled_from(
        [
            "2026-03-29T00:00Z",
            "2026-03-29T00:00:00+14:00",
            "0001-01-01T00:00:00+00:00",
            "9999-12-31T23:59:59-12:00",
            "1970-01-01T00:00Z",
            "now",
            "1774742400000",
        ]
    ),
)
counters = st.one_of(
    any_text,
    st.sampled_from(
        ["page-views", "#rejected#late_event", "#rejected#not_insert", "#rejected#", "#segment#1", "x" * 256, "\ud800"]
    ),
)


def assert_clear_value_error(call, *args) -> object:
    """``call(*args)`` returns, or raises a ValueError subclass with a message; nothing else."""
    try:
        return call(*args)
    except ValueError as error:
        assert type(error) is not ValueError, f"{call.__name__}{args!r} raised a bare ValueError: {error}"
        assert str(error).strip(), f"{call.__name__}{args!r} raised {type(error).__name__} without a message"
        return None


@profiles.for_test(weight=5)
@given(text=lengths)
def test_window_lengths_parse_or_say_why(text: str) -> None:
    length_ms = assert_clear_value_error(parse_length, text)
    if length_ms is not None:
        assert length_ms > 0 and length_ms % MINUTE_MS == 0


@profiles.for_test(weight=5)
@given(text=instants)
def test_instants_parse_or_say_why(text: str) -> None:
    at_ms = assert_clear_value_error(parse_instant, text)
    if at_ms is not None:
        assert at_ms >= 0


@profiles.for_test(weight=5)
@given(at_ms=st.integers(-(10**15), 10**16), minutes=st.integers(-10, 10**9))
def test_windows_cover_exactly_their_minutes_or_say_why(at_ms: int, minutes: int) -> None:
    window = assert_clear_value_error(Window.ending, at_ms, minutes * MINUTE_MS)
    if window is not None:
        assert window.minutes == minutes and window.covers(at_ms - 1)
        assert not window.covers(window.start_ms - 1) and not window.covers(window.end_ms)
        assert window.end_ms - MINUTE_MS < at_ms <= window.end_ms  # an end on a minute boundary is exclusive


choices = st.one_of(st.none(), any_text, st.sampled_from(["minute", "hour", "HOUR", " none ", "batch", "range", "auto", "true", "0", "yes"]))
python_lengths = st.one_of(lengths, st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(days=400)))
python_ends = st.one_of(instants, st.datetimes(timezones=st.one_of(st.none(), st.timezones())), st.none())


@profiles.for_test(weight=5)
@given(window=python_lengths, at=python_ends, series=choices, plan=choices, align=st.one_of(choices, st.booleans()))
def test_read_options_parse_or_say_why(window, at, series, plan, align) -> None:
    """The one parser of every edge: Python values or text in, ReadOptions or a QueryError naming the fix out."""
    try:
        options = read_options(window=window, at=at, series=series, plan=plan, align=align)
    except QueryError as error:
        assert str(error).strip()
        return
    assert options.window > timedelta(0) and options.window % timedelta(minutes=1) == timedelta(0)
    assert options.at is None or options.at.utcoffset() == timedelta(0)


@profiles.for_test(weight=5)
@given(name=counters)
def test_query_counters_validate_or_say_why(name: str) -> None:
    accepted = assert_clear_value_error(validate_query_counter, name)
    if accepted is not None:
        assert accepted == name and (not name.startswith("#") or name.startswith("#rejected#"))


def load_query_command():
    spec = importlib.util.spec_from_file_location("query_window_under_fuzz", QUERY_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def query_command():
    if not QUERY_SCRIPT.exists():
        pytest.skip("scripts/query_window.py is not there")
    return load_query_command()


def run_command(module, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = module.main(argv)
        except SystemExit as stop:
            status = stop.code
    return status, out.getvalue(), err.getvalue()


@st.composite
def query_arguments(draw) -> list[str]:
    """Arguments shaped as the command takes them (values glued with '=', so a value may start with '-')."""
    argv = [name for name in draw(st.lists(counters, min_size=1, max_size=3)) if not name.startswith("-")] or ["c"]
    if draw(st.booleans()):
        argv.append(f"--window={draw(lengths)}")
    if draw(st.booleans()):
        argv.append(f"--at={draw(instants)}")
    if draw(st.booleans()):
        argv.append(f"--plan={draw(st.sampled_from(['batch', 'range']))}")
    if draw(st.booleans()):
        argv.append(f"--series={draw(st.sampled_from(['minute', 'hour']))}")
    argv += draw(st.lists(st.sampled_from(["--json", "--consistent", "--align"]), max_size=3))
    return argv


@profiles.for_test(weight=1.5)
@given(argv=query_arguments())
@example(argv=["c", "--window=20000d", "--at=2026-03-29T00:00Z"])
# Found by this test: a window ending in the last minute of 9999 counted, then crashed printing its end.
@example(argv=["c", "--window=1m", "--at=9999-12-31T23:59Z"])
def test_the_query_command_answers_or_fails_in_one_line(query_command, argv: list[str]) -> None:
    with mock_aws(), mock.patch.dict(os.environ, {"COUNTS_TABLE": "fuzz-counts", "EVENTS_TABLE": "fuzz-events"}):
        create_tables(boto3.client("dynamodb", region_name="us-east-1"), "fuzz-events", "fuzz-counts")
        status, out, err = run_command(query_command, argv)
    STATS.add("fuzzed_queries")
    assert status in (0, 2), (argv, status, err)
    if status == 2:
        assert out == "" and len(err.strip().splitlines()) == 1, (argv, err)
    else:  # an answer, and on stderr at most a note per counter saying why a 0 is one
        assert out and all(line.startswith("note: ") for line in err.splitlines()), (argv, err)
        assert len(err.splitlines()) <= len(argv) + 1, (argv, err)  # + the note of an aligned window


@pytest.mark.parametrize(
    "argv", [["c", "--plan=nearest"], ["c", "--no-such-option"], []], ids=["bad-choice", "unknown-option", "no-counter"]
)
def test_argument_errors_exit_2_naming_the_problem(query_command, argv: list[str]) -> None:
    status, out, err = run_command(query_command, argv)
    assert status == 2 and out == ""
    assert ": error: " in err.strip().splitlines()[-1], err

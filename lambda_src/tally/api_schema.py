"""What the HTTP read API takes and answers, as types: the routes of `tally.http_api` declare their query
parameters and answers with these, and Powertools' resolver turns them into the OpenAPI document
(``GET /openapi.json``).

The answers are the objects the routes build (``WindowCount.as_json``, the error bodies), written out
field by field: ``extra="forbid"`` makes every object closed, so a field a route adds without adding it
here fails the test that checks the routes' real answers against the document. A field that is present
only for some counters (a summing rule's ``sum``) is optional; one that may be ``null`` says so.
No I/O.
"""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

# A field the answer leaves out rather than setting to null (the schema says: optional, never null).
Absent = SkipJsonSchema[None]
Hour = str  # an hour's start, ISO-8601 in UTC: "2026-11-22T13:00Z"
DecimalText = str  # a decimal number as text, so no JSON parser rounds it: "12.5"


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Bounds(Closed):
    """The lowest and highest value a histogram counter's window may hold (its bins' edges)."""

    low: DecimalText | None
    high: DecimalText | None


class SeriesPoint(Closed):
    """One minute or hour of the window."""

    start: str = Field(description="the point's start, ISO-8601 in UTC")
    count: int
    sum: DecimalText | Absent = Field(None, description="summing counters: the point's exact sum")
    average: DecimalText | None = Field(None, description="summing counters: sum / count, null when count is 0")
    distinct: int | Absent = Field(None, description="distinct counters: distinct values in the point")
    quantiles: dict[str, DecimalText | None] | Absent = Field(
        None, description="histogram counters, when quantiles are asked: each quantile as written -> its value"
    )


class Count(Closed):
    """One counter over one window: what `scripts/query_window.py --json` prints for it."""

    counter: str
    start: str = Field(description="the window answered: its first minute, ISO-8601 in UTC")
    end: str = Field(description="the window's end, exclusive")
    total: int = Field(description="events (or items) counted in the window")
    sum: DecimalText | Absent = Field(None, description="summing counters: the exact sum in the window")
    average: DecimalText | None = Field(None, description="summing counters: sum / total, null when total is 0")
    distinct: int | Absent = Field(None, description="distinct counters: distinct values in the window")
    distinct_exact: bool | Absent = Field(
        None, description="distinct counters: true while the count is exact, false when it is an estimate (1.625 %)"
    )
    quantiles: dict[str, DecimalText | None] | Absent = Field(
        None, description="histogram counters, when quantiles are asked: each as written -> its value (null: empty)"
    )
    bounds: Bounds | Absent = None
    aligned: bool = Field(description="the window answered holds the one asked, moved out to whole hours")
    plan: Literal["batch", "range"]
    keys: int = Field(description="bucket items the plan reads for this counter")
    requests: int = Field(description="DynamoDB requests the answer took (shared by the counters of one request)")
    items_read: int = Field(description="bucket items DynamoDB returned for this counter")
    by_hour: dict[Hour, int] = Field(description="each hour the window touches -> its count in the window")
    sum_by_hour: dict[Hour, DecimalText] | Absent = None
    average_by_hour: dict[Hour, DecimalText | None] | Absent = None
    distinct_by_hour: dict[Hour, int] | Absent = None
    quantiles_by_hour: dict[Hour, dict[str, DecimalText | None]] | Absent = None
    series: list[SeriesPoint] | Absent = Field(None, description="when series is asked: every minute or hour, in order")
    unresolved: list[str] | Absent = Field(
        None,
        description="only when the total is not exact: buckets read that an overlap left unresolved (their records "
        "had left the stream), each with what it may lack ('<=3' events); scripts/audit.py COUNTER --repair "
        "recounts them from the events table",
    )
    retired: str | None = Field(
        description="when every rule that can write the counter was retired (retiredAt), ISO-8601 in UTC to the "
        "second: it counts no more events, and its buckets stay readable until they expire; null while a rule counts it"
    )


class CountsAnswer(Closed):
    counts: list[Count] = Field(description="one per counter asked, in the order asked")
    notes: list[str] = Field(description="lines to show beside the answer: an aligned window, why a 0 is a 0")


class CountersAnswer(Closed):
    counters: list[Count] = Field(description="a page of the counters under the prefix, by name")
    cursor: str | None = Field(description="give it as cursor= for the next page; null after the last page")
    notes: list[str]


class TopEntry(Closed):
    rank: int
    counter: str
    total: int = Field(description="the counter's exact count over the window (what /counts answers)")
    previous: int | Absent = Field(None, description="rising: its count over the previous window")
    increase: int | Absent = Field(None, description="rising: total minus previous, what the list ranks by")
    retired: str | Absent = Field(
        None, description="only for a counter whose rules are all retired: when, ISO-8601 in UTC to the second"
    )


class TopList(Closed):
    prefix: str
    start: str = Field(description="the window answered, ISO-8601 in UTC")
    end: str = Field(description="its end, exclusive")
    exact: bool = Field(description="true: the list is the true top n")
    bound: int | None = Field(description="inexact: the largest total any counter left out can have; null when exact")
    rising: bool | Absent = None
    previous_start: str | Absent = Field(None, description="rising: the start of the window compared with")
    top: list[TopEntry] = Field(description="ranked by total (rising: increase), descending, ties by name")


class CalendarPoint(Closed):
    """One day, week or month of a calendar series, in the series' zone."""

    start: str = Field(description="the period's first instant, local time with its offset: 2026-11-01T00:00:00-04:00")
    end: str = Field(description="the next period's first instant, excluded (a DST day is 23 or 25 hours long)")
    count: int
    sum: DecimalText | Absent = Field(None, description="summing counters: the period's exact sum")
    average: DecimalText | None = Field(None, description="summing counters: sum / count, null when count is 0")
    distinct: int | Absent = Field(None, description="distinct counters: distinct values in the period")
    quantiles: dict[str, DecimalText | None] | Absent = Field(
        None, description="histogram counters, when quantiles are asked: each quantile as written -> its value"
    )


class CalendarSeries(Closed):
    """One counter's days, weeks or months over the range asked: what `scripts/query_window.py --series day|week|month
    --json` prints for it."""

    counter: str
    period: Literal["day", "week", "month"]
    tz: str = Field(description="the IANA zone of the periods: America/New_York, UTC")
    start: str = Field(description="the first period's start (from, at local midnight), with its offset")
    end: str = Field(description="the last period's end (to, at local midnight), excluded")
    total: int = Field(description="events counted in the range: the sum of the points' counts")
    points: list[CalendarPoint] = Field(
        description="every period of the range, in order, zero where nothing was counted; the first and the last "
        "cut to the range"
    )
    plan: Literal["range"] = Field(
        description="calendar reads query each counter's buckets by range: its closed months and days where it "
        "keeps them, hours for the rest"
    )
    requests: int = Field(
        description="DynamoDB requests this counter's series took; the first counter keeping days also counts the "
        "zone's progress GetItem, when it was read (a reader holds it a minute)"
    )
    items_read: int = Field(description="bucket items (hours, days, months) DynamoDB returned for this counter")
    unresolved: list[str] | Absent = Field(
        None, description="only when a count is not exact: as in /counts, buckets an overlap left unresolved"
    )
    retired: str | None = Field(
        description="when every rule that can write the counter was retired, ISO-8601 in UTC to the second; null "
        "while a rule counts it"
    )


class CalendarAnswer(Closed):
    series: list[CalendarSeries] = Field(description="one per counter asked, in the order asked")
    notes: list[str] = Field(description="lines to show beside the answer: settings that differ, counts not exact, "
                             "retired counters")


class AlertStatus(Closed):
    """Where one alert stands on one counter: what `scripts/query_window.py --alerts --json` prints for it."""

    alert: str
    rule: str
    counter: str
    state: Literal["ALARM", "OK"]
    since: str = Field(description="when it took this state, ISO-8601 in UTC, to the second")
    window: str = Field(description="the alert's window length, as the rule writes it: 10m")
    start: str = Field(description="the window that made the change: its first minute, ISO-8601 in UTC")
    end: str = Field(description="that window's end, exclusive")
    total: int = Field(description="the count in that window")
    threshold: int = Field(description="the level crossed: the alert's threshold for ALARM, its clear level for OK")
    transitions: int = Field(description="how many times the state changed, this one included")


class AlertsAnswer(Closed):
    alerts: list[AlertStatus] = Field(description="every counter that ever crossed an alert asked, by alert and counter")


class Problem(Closed):
    """A request tally does not answer: the message says the fix, in one line."""

    message: str
    parameter: str | Absent = Field(None, description="the query parameter at fault, when one is")


# The query parameters, as the routes declare them. Text, parsed by the CLI's own parser (`tally.read_options`).
Counters = Annotated[
    list[str], Query(description="a counter name; repeat the parameter for more (at most 100)", examples=[["page-views"]])
]
Prefix = Annotated[str | Absent, Query(description="list the counters whose names start with this")]
TopN = Annotated[str | Absent, Query(description="how many counters to rank: 1 to 1000 (default 10)")]
Rising = Annotated[str | Absent, Query(description="true or 1: rank by the increase over the previous window")]
Cursor = Annotated[str | Absent, Query(description="the cursor of the previous page: the listing goes on after it")]
Window = Annotated[
    str | Absent,
    Query(
        description="the window's length: 90m, 24h, 7d, 1d12h (default 24h); /counts also takes month-to-date: "
        "this month so far in tz, exact up to now"
    ),
]
Zone = Annotated[
    str | Absent,
    Query(description="an IANA time zone whose offsets are whole hours: America/New_York, Europe/Paris (default UTC)"),
]
MonthZone = Annotated[
    str | Absent,
    Query(
        description="with window=month-to-date: the zone whose month it is, an IANA name whose offsets are whole "
        "hours (default UTC)"
    ),
]
PeriodOption = Annotated[
    Literal["day", "week", "month"] | Absent, Query(description="the calendar period of each point (default day)")
]
FirstDay = Annotated[
    str,
    Query(alias="from", description="the range's first day, YYYY-MM-DD, in tz", examples=["2026-11-01"]),
]
DayAfter = Annotated[
    str,
    Query(alias="to", description="the day after the range's last, YYYY-MM-DD (excluded)", examples=["2026-12-01"]),
]
WeekStart = Annotated[
    Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"] | Absent,
    Query(description="period=week: the day each week begins (default monday)"),
]
At = Annotated[
    str | Absent,
    Query(description="the window's end (exclusive): ISO-8601 with an offset (write + as %2B), or now (the default)"),
]
SeriesOption = Annotated[
    Literal["minute", "hour", "none"] | Absent, Query(description="also answer every minute or hour of the window")
]
Plan = Annotated[
    Literal["batch", "range"] | Absent, Query(description="read exact bucket keys (batch, default) or key ranges")
]
Align = Annotated[
    Literal["true", "false", "auto"] | Absent,
    Query(description="move the window out to whole hours: auto (default) does when it reaches past minute retention"),
]
Consistent = Annotated[Literal["true", "false"] | Absent, Query(description="strongly consistent reads (default false)")]
Quantiles = Annotated[
    str | Absent, Query(description="histogram counters: quantiles from 0 to 1, comma-separated", examples=["0.5,0.99"])
]
AllowTransient = Annotated[
    Literal["true", "false"] | Absent,
    Query(
        description="the fast path (default false): fewer keys read, but a read while a commit is in flight may "
        "answer a count the table never held"
    ),
]
AlertName = Annotated[str | Absent, Query(description="one alert of the rules, by name (default: all of them)")]
AlertState = Annotated[
    Literal["ALARM", "OK"] | Absent, Query(description="only the counters in this state (default: both)")
]

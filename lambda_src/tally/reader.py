"""Read counts from your own code: the one read API behind the CLI, the HTTP API and the dashboard.

    from datetime import timedelta
    from tally import Reader

    reader = Reader("tally-counts")               # or Reader.from_stack("Tally"); settings from the environment
    views = reader.count("page-views", window="24h")
    views.total, views.start, views.end           # the count, and the window answered (aware UTC datetimes)
    views.retired                                 # epoch ms its rules were all retired at (retiredAt), else None
    reader.count_many(["a", "b"], window=timedelta(days=7), series="hour")
    reader.alerts(state="ALARM")                  # the counters in alarm, of every alert of the rules
    reader.calendar(["sign-ups"], "day", tz="America/New_York", start="2026-11-01", end="2026-12-01")
    reader.calendar(["orders/acme"], "month", start="2025-01-01", end="2027-01-01")  # closed months, past hours too
    reader.month_to_date(["api-calls/acme"], tz="Europe/Paris")     # this month so far, exact up to now

Every option may be given as its Python value or as text, and ``read_options``
is the one parser of both: the command line and the HTTP API hand it their
text, so every edge reads the same window for the same words.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from tally.alerting import AlertStates
from tally.core.alerts import STATES, Alert, alerts_of
from tally.core.buckets import iso_minute, iso_second
from tally.core.histograms import InvalidQuantile, parse_quantile
from tally.core.plans import PlanKind, Series
from tally.core.rules import ENV_RULES
from tally.core.settings import (
    ENV_BUCKET_LANES,
    ENV_HOUR_RETENTION_DAYS,
    ENV_MAX_CLOCK_SKEW_SECONDS,
    ENV_MINUTE_RETENTION_HOURS,
    ENV_RANKED_PREFIXES,
    Settings,
)
from tally.core.windows import (
    DEFAULT_LENGTH_MS,
    ParameterRefused,
    QueryError,
    Window,
    end_ms_of,
    instant_of,
    length_ms_of,
    now_ms,
    utc_of,
)
from tally.core.directory import RESERVED_PREFIX, after_cursor, cursor_of, days_between
from tally.core.plans import align_to_retention, make_plan
from tally.core.ranking import (
    LADDER,
    MAX_TOP,
    CountExactly,
    Ranked,
    ReadRanks,
    TopBudget,
    TopResult,
    prefix_is_ranked,
    top_steps,
    whole_hours,
    window_hours,
)
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.ranking import RankIndex
from tally.dynamo.settings import PublishedSettings
from tally.core.calendar import CalendarError, Period, Span, day_of, month_so_far, spans, weekday_of, zone_of
from tally.query import (
    CalendarSeries,
    WindowCount,
    answered_window,
    calendar_series,
    count_windows,
    retired_at,
    validate_query_counter,
)
from tally.stack_outputs import table_names_from_stack

COUNTS_TABLE_OUTPUT = "CountsTableName"
PUBLISHED_SETTINGS_SECONDS = 60  # how long a Reader trusts the published settings it read
# The published settings a read depends on: which items hold a bucket, which are alive, which counters sum,
# which are ranked.
READ_VARIABLES = (
    ENV_BUCKET_LANES,
    ENV_MINUTE_RETENTION_HOURS,
    ENV_HOUR_RETENTION_DAYS,
    ENV_MAX_CLOCK_SKEW_SECONDS,
    ENV_RULES,
    ENV_RANKED_PREFIXES,
)
RETIRED_NAMES_SHOWN = 3  # a note on retired counters names this many of them, and how many more
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class ReadOptions:
    """How to read: window length, end (None: now), series, plan, alignment (None: auto), consistency, fast path."""

    window: timedelta = timedelta(milliseconds=DEFAULT_LENGTH_MS)
    at: datetime | None = None
    series: Series | None = None
    plan: PlanKind = PlanKind.BATCH
    align: bool | None = None
    consistent: bool = False
    quantiles: tuple[str, ...] = ()  # as written ("0.99"): the results of histogram counters answer them
    allow_transient: bool = False  # fewer keys, but a read during a commit may answer a count never held

    def as_kwargs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def aligns(self) -> bool:
        """Auto alignment aligns a window that ends now, and refuses an explicit end that needs it."""
        return self.at is None if self.align is None else self.align


def read_options(
    *,
    window: timedelta | str | None = None,
    at: datetime | str | None = None,
    series: Series | str | None = None,
    plan: PlanKind | str | None = None,
    align: bool | str | None = None,
    consistent: bool | str | None = None,
    quantiles: Sequence[str] | str | None = None,
    allow_transient: bool | str | None = None,
) -> ReadOptions:
    """Options given as Python values or as text (a command line, a query string) -> ReadOptions.

    window: timedelta or "90m" / "24h" / "7d" / "1d12h"; at: aware datetime,
    ISO-8601 with an offset, or "now"; series: "minute" / "hour" / "none";
    plan: "batch" / "range"; align: True / False / None or "true" / "false" /
    "auto"; consistent: bool or "true" / "false"; quantiles: "0.5,0.99" or a list
    of them, each from 0 to 1, kept as written; allow_transient: bool or "true" /
    "false", the fast path that may subtract minutes still being applied from
    their hour (fewer keys; a read during a commit may then answer a count the
    table never held). None or "" means the default.
    Raises QueryError naming the fix; no I/O.
    """
    length_ms = DEFAULT_LENGTH_MS if _unset(window) else length_ms_of(window)
    end = None if _unset(at) or _is(at, "now") else instant_of(at)
    if end is not None:
        end_ms_of(end)  # refuses an end outside the keys' years now, not at the first read
    return ReadOptions(
        window=timedelta(milliseconds=length_ms),
        at=end,
        series=None if _unset(series) or _is(series, "none") else _choice(Series, series, "series"),
        plan=PlanKind.BATCH if _unset(plan) else _choice(PlanKind, plan, "plan"),
        align=None if _unset(align) or _is(align, "auto") else _flag(align, "align", "auto"),
        consistent=False if _unset(consistent) else _flag(consistent, "consistent"),
        quantiles=() if _unset(quantiles) else _quantiles(quantiles),
        allow_transient=False if _unset(allow_transient) else _flag(allow_transient, "allow_transient"),
    )


@dataclass(frozen=True)
class CalendarOptions:
    """A calendar read: the periods (``spans``) of ``period`` over the local days ``start`` to ``end`` (excluded)
    in ``zone``, weeks beginning on ``week_start``."""

    period: Period
    zone: str
    start: Any
    end: Any
    spans: tuple[Span, ...]


def calendar_options(
    *, period: Period | str | None = None, tz: str | None = None, start: Any = None, end: Any = None,
    week_start: str | None = None,
) -> CalendarOptions:
    """A calendar read given as Python values or text (a command line, a query string): period "day" / "week" /
    "month" (default day), tz an IANA zone (default UTC), start and end dates (YYYY-MM-DD, end excluded),
    week_start a weekday's name (default monday). Raises QueryError naming the fix; no I/O."""
    try:
        kind = Period.DAY if _unset(period) else _choice(Period, period, "period")
    except QueryError as error:
        raise CalendarError(str(error), "period") from None
    zone = zone_of(None if _unset(tz) else str(tz))
    if _unset(start) or _unset(end):
        raise CalendarError(
            "a calendar read needs its first day and the day after its last (from and to, YYYY-MM-DD)",
            "from" if _unset(start) else "to",
        )
    first, last = day_of(start, "from"), day_of(end, "to")
    weekday = weekday_of(None if _unset(week_start) else str(week_start))
    if weekday and kind is not Period.WEEK:
        raise CalendarError("a week start goes with weekly periods (period week)", "week_start")
    return CalendarOptions(kind, zone.key, first, last, tuple(spans(kind, first, last, zone, weekday)))


class InvalidTop(ParameterRefused):
    """A top N asked wrongly: its N, or its prefix."""


@dataclass(frozen=True)
class TopAnswer:
    """The top N counters of a prefix over a window, certified (``core/ranking.py``).

    ``top`` ranks by total (or, ``rising``, by the increase over the previous
    window of the same length), descending, ties by name; every total is the
    exact count ``count`` answers. ``exact``: the list is the true top N.
    Otherwise ``bound`` is the largest value any counter left out can have,
    and the list holds every counter whose value exceeds it.
    """

    prefix: str
    n: int
    window: Window
    entries: tuple[Ranked, ...]
    exact: bool
    bound: int | None
    rising: bool = False
    previous: Window | None = None  # the window the increases are measured from, when rising
    aligned: bool = False
    asked: Window | None = None
    requests: int = 0  # every request the answer made: rank records, directory, counts
    rank_records: int = 0
    counted: int = 0  # counters counted exactly
    retired: Mapping[str, int] = field(default_factory=dict)  # listed counter -> when its rules were all retired

    @property
    def start(self) -> datetime:
        return utc_of(self.window.start_ms)

    @property
    def end(self) -> datetime:
        return utc_of(self.window.end_ms)

    def as_json(self) -> dict[str, object]:
        """One object: what the CLI prints on one line with --json and GET /top answers."""
        answer: dict[str, object] = {
            "prefix": self.prefix,
            "start": iso_minute(self.window.start_ms),
            "end": iso_minute(self.window.end_ms),
            "exact": self.exact,
            "bound": self.bound,
        }
        if self.rising:
            assert self.previous is not None
            answer["rising"] = True
            answer["previous_start"] = iso_minute(self.previous.start_ms)
        answer["top"] = [
            {"rank": rank, "counter": entry.counter, "total": entry.total}
            | ({"previous": entry.previous, "increase": entry.value} if self.rising else {})
            | ({"retired": iso_second(self.retired[entry.counter])} if entry.counter in self.retired else {})
            for rank, entry in enumerate(self.entries, start=1)
        ]
        return answer


class CounterListing(list[WindowCount]):
    """A listing's counters (a list), and ``cursor``: where its next page starts, None after the last page."""

    def __init__(self, counters: Sequence[WindowCount], cursor: str | None) -> None:
        super().__init__(counters)
        self.cursor = cursor
@dataclass(frozen=True)
class AlertStatus:
    """Where one alert stands on one counter: its state since ``since``, and the window that put it there."""

    alert: Alert
    counter: str
    state: str
    transitions: int
    since: datetime
    start: datetime
    end: datetime
    total: int

    def as_json(self) -> dict[str, object]:
        return {
            "alert": self.alert.name,
            "rule": self.alert.rule,
            "counter": self.counter,
            "state": self.state,
            "since": _iso_second(self.since),
            "window": self.alert.window,
            "start": iso_minute(_ms(self.start)),
            "end": iso_minute(_ms(self.end)),
            "total": self.total,
            "threshold": self.alert.level(self.state),
            "transitions": self.transitions,
        }


class Reader:
    """Counts from one counts table: ``count``, ``count_many``, ``list_counters``, each with the options above.

    ``read_options`` lists the options; an end on a minute boundary is exclusive.
    """

    def __init__(self, table_name: str | None = None, *, client: Any = None, settings: Settings | None = None) -> None:
        """``table_name`` defaults to COUNTS_TABLE (else tally-counts); ``settings`` to the environment's
        (bucket lanes, counter rules, retentions and clock skew shape every read); ``client`` to boto3's
        DynamoDB client, which follows AWS_ENDPOINT_URL, AWS_REGION and the usual credential chain."""
        self.settings = Settings.from_env() if settings is None else settings
        self.table_name = table_name or self.settings.counts_table
        if client is None:
            import boto3

            client = boto3.client("dynamodb")
        self.table = CountsTable(client, self.table_name, self.settings)
        self.directory = CounterDirectory(client, self.table_name, self.settings)
        self.ranks = RankIndex(client, self.table_name)
        self.top_budget = TopBudget()  # how far a top N reads before it answers with a bound
        self.rank_ladder = LADDER  # the levels commits record (a bench compares others)
        self._published: PublishedSettings | None = None
        self._published_read_at: float | None = None

    @classmethod
    def from_outputs(cls, outputs: Mapping[str, str], *, client: Any = None, settings: Settings | None = None) -> Reader:
        """From a deployed stack's outputs (``cdk deploy --outputs-file``, or describe-stacks): its CountsTableName."""
        if not outputs.get(COUNTS_TABLE_OUTPUT):
            raise QueryError(f"the stack outputs lack {COUNTS_TABLE_OUTPUT}: is it a tally stack, fully deployed?")
        return cls(outputs[COUNTS_TABLE_OUTPUT], client=client, settings=settings)

    @classmethod
    def from_stack(
        cls, stack_name: str, *, client: Any = None, cloudformation: Any = None, settings: Settings | None = None
    ) -> Reader:
        """From a deployed tally stack, by name (CloudFormation describe-stacks; for code outside the stack)."""
        import boto3

        outputs = table_names_from_stack(stack_name, cloudformation or boto3.client("cloudformation"))
        return cls.from_outputs(outputs, client=client, settings=settings)

    def count(self, counter: str, **options: Any) -> WindowCount:
        """One counter over one window (default: the 24 h ending now)."""
        if not isinstance(counter, str):
            raise QueryError(f"count takes one counter name, got {counter!r}: for several, use count_many")
        return self.count_many([counter], **options)[0]

    def count_many(self, counters: Sequence[str], **options: Any) -> list[WindowCount]:
        """Several counters over the same window, in the order given (the batch plan shares their requests)."""
        names = self._names(counters, "count_many", ": for one, use count")
        return self._count(names, read_options(**options), now_ms())

    def calendar(
        self,
        counters: Sequence[str],
        period: Period | str = Period.DAY,
        *,
        tz: str | None = None,
        start: Any = None,
        end: Any = None,
        week_start: str | None = None,
        quantiles: Sequence[str] | str | None = None,
        consistent: bool | str | None = None,
    ) -> list[CalendarSeries]:
        """Each counter's series of days, weeks or months over the local days ``start`` to ``end`` (excluded)
        in ``tz`` (an IANA zone, DST included; default UTC), every period in the range answered, zero where
        nothing was counted, in zones whose offsets are whole hours.

        A counter of the calendar prefixes, in UTC or a kept zone, takes its closed months and days from their
        items (a Query of each run, within the day and month retentions) and the days since the last close from
        hours; any other counter, or zone, takes the whole range from hours, so within the hour retention. The
        zone's progress is one GetItem, held a minute. QueryError (a CalendarError naming the parameter) for a
        range that reaches before what is kept, saying what is."""
        names = self._names(counters, "calendar")
        asked = calendar_options(period=period, tz=tz, start=start, end=end, week_start=week_start)
        chosen = read_options(quantiles=quantiles, consistent=consistent)
        return calendar_series(
            self.table, names, asked.spans, period=asked.period, zone=asked.zone, consistent=chosen.consistent,
            now=now_ms(), quantiles=chosen.quantiles,
        )

    def month_to_date(self, counters: Sequence[str], *, tz: str | None = None, **options: Any) -> list[WindowCount]:
        """Each counter over this month so far in ``tz`` (default UTC): from the month's first local midnight
        until now, exact up to now (its hours, then the minutes of the current hour). Other options as ``count``
        takes them, but for the window and its end, which this read sets."""
        names = self._names(counters, "month_to_date")
        if options.get("window") is not None or options.get("at") is not None:
            raise QueryError("month to date sets its own window: from the month's start until now")
        now = now_ms()
        length_ms, end = month_so_far(now, zone_of(tz))
        chosen = read_options(window=timedelta(milliseconds=length_ms), plan=options.pop("plan", None) or PlanKind.RANGE, **options)
        return count_windows(
            self.table, names, length_ms=length_ms, at_ms=end, plan=chosen.plan, consistent=chosen.consistent,
            now=now, series=chosen.series, align=True, quantiles=chosen.quantiles,
        )

    @staticmethod
    def _names(counters: Sequence[str], method: str, for_one: str = "") -> list[str]:
        """The counter names a read of several takes, each checked; QueryError naming ``method`` otherwise."""
        if isinstance(counters, str) or not isinstance(counters, Sequence):
            raise QueryError(f"{method} takes a list of counter names, got {counters!r}{for_one}")
        if not counters:
            raise QueryError(f"{method} needs at least one counter name")
        return [validate_query_counter(name) for name in counters]

    def list_counters(
        self, prefix: str = "", *, limit: int | None = None, cursor: str | None = None, **options: Any
    ) -> CounterListing:
        """The counters whose names start with ``prefix`` that counted anything in the window, by name.

        Reads the counter directory (every partition of every UTC day of the
        window, merged in name order) and counts the counters found there,
        keeping those with a total above 0. ``limit`` pages the listing: it
        takes the next ``limit`` names of the directory (after ``cursor``,
        the ``cursor`` of the previous page), counts them, and says in the
        result's ``cursor`` where the next page starts (None after the last
        page; a page may list fewer counters than ``limit``, or none, when
        some counted nothing in the window). The directory knows counters from
        their first commit by a release that writes it. tally's own
        ``#rejected#<reason>`` counters are not listed.
        """
        if not isinstance(prefix, str):
            raise QueryError(f"prefix must be text, got {prefix!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise QueryError(f"limit must be a whole number of counters, at least 1, got {limit!r}")
        if prefix.startswith(RESERVED_PREFIX):
            raise QueryError(
                f"names starting with '#' are tally's own and never listed, got prefix {prefix!r}: "
                "read rejections by name, #rejected#<reason>"
            )
        after = None if cursor is None or cursor == "" else after_cursor(cursor)
        chosen = read_options(**options)
        now = now_ms()
        _asked, window = answered_window(
            _length_ms(chosen), _at_ms(chosen), now, chosen.aligns(), self.settings
        )
        page = self.directory.page(
            prefix, days_between(window.start_ms, window.end_ms), after=after, limit=limit, consistent=chosen.consistent
        )
        next_cursor = cursor_of(page.names[-1]) if page.more else None
        if not page.names:
            return CounterListing([], next_cursor)
        counted = self._count(page.names, chosen, now)
        return CounterListing(
            [replace(result, requests=result.requests + page.requests) for result in counted if result.total > 0],
            next_cursor,
        )

    def top(self, prefix: str = "", n: int | str = 10, *, rising: bool | str = False, **options: Any) -> TopAnswer:
        """The ``n`` counters starting with ``prefix`` with the largest totals over the window (``rising``: the
        largest increases over the previous window of the same length), certified: exact, or with the bound no
        counter left out exceeds. Each total is counted like ``count`` counts it, with the same options.

        A window ending now (or asked ``align``) is answered over whole hours,
        as many as it spans, ending with the hour it ends in (``whole_hours``:
        the current hour so far; the answer's start and end say which): 24 keys
        a counter for 24 h, where its minutes would be up to 83. An explicit
        ``at`` without ``align`` is answered as asked.

        A ranked prefix (one starting with a ranked prefix of the settings)
        reads the rank records of the window's days from the highest level
        down, counts the counters that may be in the top exactly, and stops
        when nothing unread can reach the n-th total; a prefix with at most a
        few hundred counters on the window's days is counted whole (exact).
        A prefix that is not ranked is counted whole when it has that few
        counters, and refused (UnrankedPrefix, saying how to rank it) otherwise.
        """
        top_n = _top_n(n)
        if not isinstance(prefix, str) or prefix.startswith(RESERVED_PREFIX):
            raise InvalidTop(
                f"prefix must be text not starting with '#' (tally's own counters are never ranked), got {prefix!r}",
                "prefix",
            )
        try:
            rising = False if rising is None or rising == "" else _flag(rising, "rising")
        except QueryError as error:
            raise InvalidTop(str(error), "rising") from None
        chosen = read_options(**options)
        if chosen.series is not None or chosen.quantiles:
            raise QueryError("a top list ranks totals: it takes no series and no quantiles")
        now = now_ms()
        asked, window = answered_window(_length_ms(chosen), _at_ms(chosen), now, chosen.aligns(), self.settings)
        if chosen.aligns():  # whole hours: one key a counter an hour, bounded from both sides by its rank records
            window = whole_hours(window)
        make_plan(window, now, self.settings, chosen.plan, allow_transient=chosen.allow_transient)  # refused here
        previous = None
        if rising:  # the window before, of the same length; aligned as the window is where its minutes expired
            previous = Window.ending(window.start_ms, window.end_ms - window.start_ms)
            previous = align_to_retention(previous, now, self.settings) if chosen.aligns() else previous
            try:
                make_plan(previous, now, self.settings, chosen.plan, allow_transient=chosen.allow_transient)
            except QueryError as error:
                raise type(error)(f"the previous window {previous}, which a rising top compares with: {error}") from None
        hours, full = window_hours(window.first_minute, window.last_minute, now, self.settings)
        steps = top_steps(
            prefix,
            top_n,
            hours=hours,
            full_hours=full,
            lanes=self.settings.bucket_lanes,
            rising=rising,
            budget=self.top_budget,
            ranked=prefix_is_ranked(prefix, self.settings),
            ladder=self.rank_ladder,
        )
        requests = 0
        reply: Any = None
        try:
            while True:
                step = steps.send(reply)
                if isinstance(step, ReadRanks):
                    records, next_key, made = self.ranks.page(step.partition, step.start_key, step.limit, chosen.consistent)
                    requests += made
                    reply = (records, next_key)
                elif isinstance(step, CountExactly):
                    counted = self._count_at(step.counters, chosen, window, now)
                    requests += counted[0].requests if counted else 0
                    totals = {result.counter: result.total for result in counted}
                    if previous is None:
                        reply = totals
                    else:
                        before = self._count_at(step.counters, chosen, previous, now)
                        requests += before[0].requests if before else 0
                        reply = {result.counter: (totals[result.counter], result.total) for result in before}
                else:  # one Query tells a crowded prefix, before a listing reads every partition of every day
                    days = days_between(window.start_ms, window.end_ms)
                    crowded, made = self.directory.exceeds(prefix, days, step.limit, chosen.consistent)
                    requests += made
                    if crowded:
                        reply = ([], True)
                    else:
                        page = self.directory.page(prefix, days, limit=step.limit, consistent=chosen.consistent)
                        requests += page.requests
                        reply = (page.names, page.more)
        except StopIteration as done:
            result: TopResult = done.value
        return TopAnswer(
            prefix=prefix,
            n=top_n,
            window=window,
            entries=tuple(result.entries),
            exact=result.exact,
            bound=result.bound,
            rising=rising,
            previous=previous,
            aligned=window != asked,
            asked=asked if window != asked else None,
            requests=requests,
            rank_records=result.rank_records,
            counted=result.counted,
            retired=_retired_of([entry.counter for entry in result.entries], self.settings, now),
        )

    def _count_at(self, names: list[str], chosen: ReadOptions, window: Window, now: int) -> list[WindowCount]:
        """Count over exactly ``window`` (already aligned as the answer's), with the reader's plan and consistency."""
        length = window.end_ms - window.start_ms
        return self._count(names, replace(chosen, window=timedelta(milliseconds=length), at=utc_of(window.end_ms), align=False), now)

    def alerts(self, alert: str | None = None, *, state: str | None = None, prefix: str = "") -> list[AlertStatus]:
        """The state of every counter that ever crossed an alert of the rules (or of the one named), by alert
        and counter; ``state`` "ALARM" or "OK" keeps those in it, ``prefix`` the counters starting with it.

        One strongly consistent Query per alert (all pages). A counter that never crossed has no state: OK.
        """
        known = alerts_of(self.settings.counter_rules.rules)
        if alert is not None and alert not in {a.name for a in known}:
            names = ", ".join(a.name for a in known) or "none: no rule has 'alerts'"
            raise QueryError(f"no alert {alert!r} in the rules (TALLY_RULES); the alerts are {names}")
        if state is not None and str(state).upper() not in STATES:
            raise QueryError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        if not isinstance(prefix, str):
            raise QueryError(f"prefix must be text, got {prefix!r}")
        wanted = None if state is None else str(state).upper()
        states = AlertStates(self.table.client, self.table_name, self.table.backoff)
        found = []
        for each in known:
            if alert is not None and each.name != alert:
                continue
            for counter, stored in states.listing(each.name).items():
                if (wanted is None or stored.state == wanted) and counter.startswith(prefix):
                    found.append(
                        AlertStatus(
                            each,
                            counter,
                            stored.state,
                            stored.transitions,
                            utc_of(stored.changed_ms),
                            utc_of(stored.start_ms),
                            utc_of(stored.end_ms),
                            stored.total,
                        )
                    )
        return found

    def _count(self, names: list[str], chosen: ReadOptions, now: int) -> list[WindowCount]:
        return count_windows(
            self.table,
            names,
            length_ms=_length_ms(chosen),
            at_ms=_at_ms(chosen),
            plan=chosen.plan,
            consistent=chosen.consistent,
            now=now,
            series=chosen.series,
            align=chosen.aligns(),
            quantiles=chosen.quantiles,
            allow_transient=chosen.allow_transient,
        )

    def notes(self, results: Sequence[WindowCount]) -> list[str]:
        """Lines an edge shows beside the answer: an aligned window, and why a 0 is a 0 where that is knowable.

        A 0 that is an answer and a 0 that is a mistake look alike: a window
        entirely in the future, or a counter without a single bucket (one Query
        of one key each), says so; so does a counter whose rules are all retired
        (``WindowCount.retired``: no request), which will not count again.
        """
        if not results:
            return []
        first = results[0]
        notes = []
        if first.aligned and first.asked is not None:
            notes.append(
                f"window {first.asked} reaches past the minute retention "
                f"({self.settings.minute_retention_ms // 3_600_000} h): answered over whole hours there, {first.window}"
            )
        notes.extend(self.settings_differences())
        notes.extend(self._unresolved_notes(results))
        notes.extend(self._retired_notes(results))
        if first.window.start_ms > now_ms():
            notes.append(f"the window {first.window} lies entirely in the future: nothing can be counted in it yet")
            return notes
        notes.extend(
            f"no bucket of {result.counter!r} exists at all: no event has been counted under that name "
            "(names are case-sensitive)"
            for result in results
            if result.items_read == 0 and not self.table.has_counter(result.counter)
        )
        return notes

    def calendar_notes(self, found: Sequence[CalendarSeries]) -> list[str]:
        """Lines an edge shows beside calendar series: settings that differ, counters not exact, retired ones."""
        return [*self.settings_differences(), *self._unresolved_notes(found), *self._retired_notes(found)]

    @staticmethod
    def _unresolved_notes(results: Sequence[WindowCount | CalendarSeries]) -> list[str]:
        return [
            f"{result.counter!r} is not exact: {len(result.unresolved)} bucket item(s) it read were left unresolved "
            f"by an overlap whose records had left the stream, and may be low (e.g. {result.unresolved[0]}); "
            f"scripts/audit.py {result.counter} --repair recounts them from the events table"
            for result in results
            if result.unresolved
        ]

    def _retired_notes(self, results: Sequence[WindowCount | CalendarSeries]) -> list[str]:
        """A line for the counters that stopped counting at one instant under the same retired rules: their
        0 is not a quiet counter's."""
        groups: dict[tuple[int, tuple[str, ...]], list[str]] = {}
        for result in results:
            if result.retired is not None:
                rules = tuple(str(rule.name) for rule in self.settings.counter_rules.writers(result.counter))
                groups.setdefault((result.retired, rules), []).append(result.counter)
        lines = []
        for (retired, rules), counters in groups.items():
            names = ", ".join(repr(name) for name in counters[:RETIRED_NAMES_SHOWN])
            if len(counters) > RETIRED_NAMES_SHOWN:
                names += f" and {len(counters) - RETIRED_NAMES_SHOWN} more"
            ruled = " and ".join(repr(rule) for rule in rules)
            lines.append(
                f"counter{'s' if len(counters) > 1 else ''} {names} stopped counting at {iso_second(retired)}: "
                f"{'their' if len(counters) > 1 else 'its'} rule{'s' if len(rules) > 1 else ''} {ruled} "
                f"{'are' if len(rules) > 1 else 'is'} retired; no more events will come"
            )
        return lines

    def settings_differences(self) -> list[str]:
        """A line naming every read setting that differs from what the counting function published, if any.

        Lanes, rules and retentions shape every read: a reader with fewer lanes
        than the function reads low counts, silently. One GetItem a minute per
        Reader; nothing when no function has published its settings, or the
        item cannot be read.
        """
        published = self._published_settings()
        if published is None:
            return []
        mine = self.settings.counting_environment()
        theirs = published.environment
        differing = [name for name in READ_VARIABLES if mine.get(name) != theirs.get(name)]
        if not differing:
            return []
        shown = ", ".join(f"{name}={theirs.get(name, '')!r} (here {mine.get(name, '')!r})" for name in differing)
        return [
            f"{published.publisher} counts into {self.table_name} with {shown}: these answers may be wrong; "
            "read with the settings it published"
        ]


    def _published_settings(self) -> PublishedSettings | None:
        """The published settings, read at most once a minute: a warm process keeps one Reader for many reads."""
        now = time.monotonic()
        if self._published_read_at is None or now - self._published_read_at >= PUBLISHED_SETTINGS_SECONDS:
            try:
                self._published = self.table.published_settings()
            except ClientError:
                self._published = None  # a reader allowed to read buckets but not this item: no check
            self._published_read_at = now
        return self._published


def _retired_of(counters: Sequence[str], settings: Settings, now: int) -> dict[str, int]:
    """The counters whose rules were all retired by ``now``, and when: what a top list marks (no I/O)."""
    found = {counter: retired_at(settings.counter_rules, counter, now) for counter in counters}
    return {counter: retired for counter, retired in found.items() if retired is not None}


def _ms(moment: datetime) -> int:
    return (moment - utc_of(0)) // timedelta(milliseconds=1)


def _iso_second(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _length_ms(chosen: ReadOptions) -> int:
    return chosen.window // timedelta(milliseconds=1)


def _at_ms(chosen: ReadOptions) -> int | None:
    return None if chosen.at is None else end_ms_of(chosen.at)


def _top_n(value: object) -> int:
    """N of a top N: a whole number from 1 to MAX_TOP, as a number or as text."""
    text = value.strip() if isinstance(value, str) else None
    number = int(text) if text is not None and text.isdigit() else value
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_TOP:
        raise InvalidTop(f"n must be a whole number from 1 to {MAX_TOP}, got {value!r}", "n")
    return number


def _quantiles(value: object) -> tuple[str, ...]:
    """Quantiles as written, each checked: text keys the JSON answer exactly as the user wrote it."""
    texts = value.split(",") if isinstance(value, str) else value
    if not isinstance(texts, Sequence):
        raise QueryError(f"quantiles must be like 0.5,0.9,0.99, got {value!r}")
    written = []
    for q in texts:
        text = q.strip() if isinstance(q, str) else str(q) if isinstance(q, int | float | Decimal) else None
        try:
            parse_quantile(text if text is not None else "")
        except InvalidQuantile as error:
            raise QueryError(f"{error}: write quantiles like 0.5,0.9,0.99") from None
        written.append(text)
    return tuple(dict.fromkeys(written))


def _unset(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _is(value: object, word: str) -> bool:
    return isinstance(value, str) and value.strip().lower() == word


def _choice(kind: type[Series] | type[PlanKind], value: object, name: str) -> Any:
    text = value.value if isinstance(value, kind) else str(value).strip().lower()
    try:
        return kind(text)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise QueryError(f"{name} must be one of {choices}, got {value!r}") from None


def _flag(value: object, name: str, *others: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    allowed = ", ".join(("true", "false", *others))
    raise QueryError(f"{name} must be one of {allowed}, got {value!r}")

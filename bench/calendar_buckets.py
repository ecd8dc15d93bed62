"""Days and months: what the long rungs of the bucket ladder cost to write, to close, to read and to keep.

Every write workload runs again with every counter keeping days and months
(``calendarPrefixes: [""]``) in UTC and New York, through tally's real
handler path into a ``MeteredClient``, and then the real close
(``tally.closing.Closer``) over the same meter, at a clock when every period
the workload touched is closed: its late records' direct adds and late
marks, its directory and the close's own commits and progress are charged
by DynamoDB's rules, and the close's reads too. The floor adds to the
workload's one write per bucket item per window one write per counter-day
and one per counter-month that has events, in each kept zone (the event's
local day and month). The close reads the meter's image (``Query`` and
``GetItem``, answered and charged as DynamoDB would); a small run checks
that moto, answering the same calls, stores and charges the same.

The ``calendar`` workload is a season of traffic (``workloads.calendar``):
late records among the on-time ones, closed once a day at 03:00 UTC as a
deployment closes them. Reads of closed days and months and of this month so
far are measured on moto (``Fetches.query``, ``Reader.month_to_date``), and
the storage a counter keeps at the default retentions from the items the
write path and the close make.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter
from collections.abc import Iterable
from datetime import date, datetime, timedelta
from typing import Any
from unittest import mock

import boto3
from moto import mock_aws
from rich.console import Console
from rich.table import Table

from bench.cost import (
    STORAGE_GB_BYTES,
    STORAGE_ITEM_OVERHEAD_BYTES,
    STORAGE_PRICE_PER_GB_MONTH,
    MeteredClient,
    item_size,
    metered_counts,
    stored_bytes,
)
from bench.workloads import SHARD_ID, STREAM_ARN, Workload, calendar as calendar_workload, floor_writes
from bench import writes
from tally.closing import CloseSummary, Closer
from tally.core.buckets import (
    DAY,
    MONTH,
    SKETCH_PREFIX,
    Bucket,
    counted_buckets,
    day_date,
    local_day_of_hour,
    month_index,
)
from tally.core.commit import Writer
from tally.core.directory import RESERVED_PREFIX, entry_item
from tally.core.ladder import CLOSE_AFTER_MS, LATE_PREFIX, closes_at
from tally.core.ranking import RANK_PREFIX
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.tables import COUNTS_TABLE
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.dynamo.closing import PROGRESS_PARTITION, ProgressItems
from tally.local.delivery import DeliveryConfig
from tally.reader import Reader

# The zone kept besides UTC, and the prefix that keeps every counter's days and months.
ZONE = "America/New_York"
EVERY_COUNTER = ("",)
# A deployment's close runs once a day, at this hour (UTC).
CLOSE_HOUR_MS = 3 * HOUR_MS
# The read figures' counter: the longest the read targets speak of (bench/reads.py).
READ_COUNTER = "c" * 32
# The 365 closed days and 24 closed months the reads take, and the instants this month so far is read at.
SERIES_LAST_DAY = date(2026, 10, 31)
MONTH_TO_DATE_AT = ("2026-10-01T00:30:00Z", "2026-10-15T12:30:00Z", "2026-10-31T23:59:30Z")
# A plain count counter active every minute: 60 events a minute (what the stored numbers hold).
EVENTS_PER_MINUTE = 60


def keeping_days(settings: Settings) -> Settings:
    """``settings`` with every counter keeping days and months, in UTC and ``ZONE``."""
    return dataclasses.replace(settings, calendar_prefixes=EVERY_COUNTER, calendar_zones=(ZONE,))


def item_kind(key: tuple[str, ...]) -> str:
    """What a counts-table item is, for the write figures: a bucket (minute or hour), a long bucket (day or
    month), a late mark, a directory entry, a rank record, a close's progress, a sketch."""
    partition, sort_key = key
    if partition.startswith(LATE_PREFIX):
        return "late mark"
    if partition == PROGRESS_PARTITION:
        return "progress"
    if partition.startswith(RANK_PREFIX):
        return "rank"
    if partition.startswith(SKETCH_PREFIX):
        return "sketch"
    if partition.startswith(RESERVED_PREFIX):
        return "directory"
    return "day or month" if sort_key.startswith(("D#", "MO#")) else "minute or hour"


def long_floor(events: Iterable[tuple[str, int, int]], settings: Settings) -> dict[str, int]:
    """The long rungs' floor: one write per distinct (counter, day, zone) and (counter, month, zone) with counted
    events, by event time in each kept zone, for the counters that keep days (``events``: counter, time,
    arrival; an event past the hour retention at arrival is not counted)."""
    days: set[tuple[str, int, str]] = set()
    months: set[tuple[str, int, str]] = set()
    zones = settings.kept_zones
    for counter, event_ms, arrival_ms in events:
        if not settings.keeps_calendar(counter) or not counted_buckets(event_ms, arrival_ms, settings):
            continue
        for zone in zones:
            day = local_day_of_hour(event_ms // HOUR_MS, zone)  # kept zones' offsets are whole hours
            days.add((counter, day, zone))
            months.add((counter, month_index(day_date(day)), zone))
    return {"days": len(days), "months": len(months)}


def first_days(events: Iterable[tuple[str, int, int]], zones: Iterable[str]) -> dict[str, date]:
    """Each zone's local day of the earliest event."""
    first = min(event_ms for _, event_ms, _ in events)
    return {zone: day_date(local_day_of_hour(first // HOUR_MS, zone)) for zone in zones}


def all_closed_at(events: Iterable[tuple[str, int, int]], zones: Iterable[str]) -> int:
    """A clock at which every record is in and every day and month the events touch is closed in every zone:
    CLOSE_AFTER_MS after the last event's month ends (or after the last arrival, if later)."""
    events = list(events)
    last_event = max(event_ms for _, event_ms, _ in events)
    last_arrival = max(arrival_ms for _, _, arrival_ms in events)
    month_end = max(
        Bucket(MONTH, month_index(day_date(local_day_of_hour(last_event // HOUR_MS, zone))), zone).end_ms for zone in zones
    )
    return max(month_end, last_arrival) + CLOSE_AFTER_MS


class Ledger:
    """What each phase of a run (``stream``, ``close``, ``setup``) adds to a meter's figures."""

    def __init__(self, client: MeteredClient) -> None:
        self.client = client
        self.totals: dict[str, Counter[str]] = {}
        self._phase: str | None = None
        self._mark = client.meter.figures()

    def phase(self, name: str) -> None:
        now = self.client.meter.figures()
        if self._phase is not None:
            added = Counter(now)
            added.subtract(self._mark)
            self.totals.setdefault(self._phase, Counter()).update(added)
        self._mark, self._phase = now, name

    def of(self, name: str) -> Counter[str]:
        return self.totals.get(name, Counter())


@dataclasses.dataclass
class ClosedRun:
    """A workload streamed and closed over one meter: the meter, its figures by phase, and what the closes did."""

    client: MeteredClient
    ledger: Ledger
    summary: CloseSummary
    closes: int
    settings: Settings


def stream_and_close(
    workload: Workload, settings: Settings, config: DeliveryConfig, *, daily: bool, forward_to: Any = None
) -> ClosedRun:
    """``workload`` through tally's handler path with ``settings`` (days kept), and the close: once a day at
    03:00 UTC while the records arrive (``daily``) and then until everything is closed, or only then. The
    zones' progress starts on the day before each one's first event: the table's earlier days were closed
    before (a table that enables days and months closes its hours' months first, over several runs)."""
    settings = writes.tally_settings(workload, settings)
    arrivals = list(workload.counted_arrivals())
    client = MeteredClient(("pk", "sk"), forward_to)
    client.kind_of = item_kind
    table = metered_counts(client, settings)
    ledger = Ledger(client)
    ledger.phase("setup")
    progress = ProgressItems(client, settings.counts_table)
    for zone, first in first_days(arrivals, settings.kept_zones).items():
        progress.advance(zone, Bucket.of_day(first - timedelta(days=1), zone), None)
    summary, closes = CloseSummary(), 0

    def close(now_ms: int) -> None:
        nonlocal closes
        ledger.phase("close")
        closes += 1
        while True:  # a run closes at most MAX_DAYS_PER_RUN days a zone: the next one goes on
            done = Closer(table, workers=1).close_due(now_ms)  # one update at a time: the meter keeps one image
            summary.add(done)
            if not done.periods:
                break
        ledger.phase("stream")

    ledger.phase("stream")
    delivery = writes.tally_delivery(client, settings, config)
    first_arrival = min(arrival for _, _, arrival in arrivals)
    next_close = (first_arrival // DAY_MS + 1) * DAY_MS + CLOSE_HOUR_MS if daily else None
    for chunk in workload.chunks():
        while chunk:
            if next_close is None:
                delivery.deliver(chunk)
                break
            cut = bisect.bisect_left([r["dynamodb"]["ApproximateCreationDateTime"] * 1000 for r in chunk], next_close)
            delivery.deliver(chunk[:cut])
            chunk = chunk[cut:]
            if chunk:  # the records before the close's instant are all in: their windows ended before it
                delivery.close()
                close(next_close)
                next_close += DAY_MS
    delivery.close()
    final = all_closed_at(arrivals, settings.kept_zones)
    while next_close is not None and next_close < final:
        close(next_close)
        next_close += DAY_MS
    close(final)
    ledger.phase("done")
    return ClosedRun(client, ledger, summary, closes, settings)


def closed_figures(workload: Workload, settings: Settings, config: DeliveryConfig, *, daily: bool = False) -> dict[str, Any]:
    """Every write unit of ``workload`` with every counter keeping days and months in UTC and ``ZONE`` (stream
    and close), against the floor with the long rungs; and what the close read."""
    kept = keeping_days(settings)
    run = stream_and_close(workload, kept, config, daily=daily)
    counted = list(workload.counted_arrivals())
    floor = floor_writes(counted, config.window_seconds, kept)
    long = long_floor(counted, run.settings)
    stream, close = run.ledger.of("stream"), run.ledger.of("close")
    units = stream["units"] + close["units"]
    floor_units = floor + long["days"] + long["months"]
    late_units = stream["units:day or month"] + stream["units:late mark"]
    return {
        "calendar_prefixes": list(kept.calendar_prefixes),
        "kept_zones": list(kept.kept_zones),
        "closes_run": run.closes,
        "closes": "daily at 03:00 UTC" if daily else "once every period had closed",
        "floor": {
            "bucket_writes": floor,
            "counter_days": long["days"],
            "counter_months": long["months"],
            "write_units": floor_units,
        },
        "stream": {
            "write_units": stream["units"],
            "minute_and_hour_writes": stream["writes:minute or hour"],
            "late_direct_writes": stream["writes:day or month"],
            "late_mark_writes": stream["writes:late mark"],
            "late_write_units": late_units,
            "directory_write_units": stream["units:directory"],
            "rank_write_units": stream["units:rank"],
        },
        "close": {
            "write_units": close["units"],
            "items_written": run.summary.written,
            "counters_read": run.summary.counters,
            "empty": run.summary.empty,
            "progress_writes": close["writes:progress"],
            "read_requests": close["query_requests"] + close["get_requests"],
            "read_units": close["query_read_units"] + close["get_read_units"],
        },
        "write_units": units,
        "late_units_share": round(late_units / units, 4),
        "units_over_floor_units": round(units / floor_units, 3),
    }


def calendar_workload_figures(workload: Workload | None = None, settings: Settings | None = None,
                              config: DeliveryConfig | None = None) -> dict[str, Any]:
    """The calendar workload, closed daily, beside its plain run: the ratios, the late records' share of the
    events and of the write units, and the day and month items' sizes."""
    workload = workload or calendar_workload()
    settings = settings or Settings()
    config = config or DeliveryConfig()
    figures = closed_figures(workload, settings, config, daily=True)
    counted = list(workload.counted_arrivals())
    late = sum(1 for _, event_ms, arrival_ms in counted if arrival_ms >= (event_ms // HOUR_MS + 1) * HOUR_MS + DAY_MS)
    return {"workload": workload.name, "description": workload.description, "events": workload.total,
            "late_events": late, "late_events_share": round(late / len(counted), 4), **figures}


def _moto_table(settings: Settings) -> tuple[Any, MeteredClient]:
    """The counts table on moto (inside ``mock_aws``), and a meter forwarding to it."""
    moto = boto3.client("dynamodb", region_name="us-east-1")
    moto.create_table(**COUNTS_TABLE.create_table_request(settings.counts_table))
    return moto, MeteredClient(("pk", "sk"), forward_to=moto)


def _closed_periods(table: Any, counter: str, periods: list[Bucket], counts: list[int]) -> None:
    """Closed days or months of ``counter``, written as a close writes them: one segment of the close's writer,
    dated when the first of them could be closed, through the stream's own commit."""
    segment = Segment("1", closes_at(periods[0]), "1", records=1, held=None)
    segment.deltas = {(counter, period): count for period, count in zip(periods, counts)}
    table.commit(segment, Writer.of_close())


def _hours_and_minutes(table: Any, counter: str, hours: Iterable[int], minutes: Iterable[int]) -> None:
    """A plain count counter's hour and minute items, written as a stream commits them (one shard's segment)."""
    segment = Segment("100000000000000000001", 0, "100000000000000000002", records=2)
    segment.deltas = {(counter, Bucket.of_hour(h)): 60 * EVENTS_PER_MINUTE for h in hours}
    segment.deltas.update({(counter, Bucket.of_minute(m)): EVENTS_PER_MINUTE for m in minutes})
    table.commit(segment, Writer.of_shard(STREAM_ARN, SHARD_ID))


def _reading(client: MeteredClient, read: Any) -> tuple[Any, dict[str, Any]]:
    """What ``read()`` returns, and the requests and read units it cost on the meter."""
    before = client.meter.figures()
    answer = read()
    after = client.meter.figures()
    requests = sum(after[k] - before[k] for k in ("query_requests", "get_requests", "read_requests"))
    units = sum(after[k] - before[k] for k in ("query_read_units", "get_read_units", "read_units"))
    return answer, {"requests": requests, "read_units": units}


def read_figures() -> dict[str, Any]:
    """On moto, for one counter of 32 characters: 365 closed days read in one Query (with its pages), 24 closed
    months in one, each strongly and eventually consistent, in UTC and ``ZONE``; and this month so far by
    ``Reader.month_to_date`` at a month's first half hour, its middle and its last minute."""
    settings = keeping_days(Settings())
    first_day = SERIES_LAST_DAY - timedelta(days=364)
    found: dict[str, Any] = {"counter_length": len(READ_COUNTER), "days": [], "months": [], "month_to_date": [],
                             "read_path": "Fetches.query: Reader.calendar reads hours (within their 90 days); "
                                          "a read of closed days is one Query of D#<zone>@first..last"}
    with mock_aws():
        _, client = _moto_table(settings)
        table = metered_counts(client, settings)
        for zone in settings.kept_zones:
            days = [Bucket.of_day(first_day + timedelta(days=n), zone) for n in range(365)]
            for start in range(0, len(days), 31):  # a close's runs
                _closed_periods(table, READ_COUNTER, days[start:start + 31], [24 * 60 * EVENTS_PER_MINUTE] * 31)
            months = [Bucket(MONTH, month_index(SERIES_LAST_DAY) - 23 + n, zone) for n in range(24)]
            _closed_periods(table, READ_COUNTER, months, [31 * 24 * 60 * EVENTS_PER_MINUTE] * 24)
            ProgressItems(client, settings.counts_table).advance(zone, days[-1], months[-1])
            for kind, periods, rows in (("days", days, found["days"]), ("months", months, found["months"])):
                row: dict[str, Any] = {"zone": zone, "periods": len(periods)}
                for consistent in (True, False):
                    fetched, cost = _reading(client, lambda: table.query(
                        READ_COUNTER, periods[0].sort_key, periods[-1].sort_key, consistent=consistent))
                    assert len(fetched.counts) == len(periods), f"{kind}: {len(fetched.counts)} of {len(periods)} read"
                    row["requests"] = cost["requests"]
                    row["read_units_strong" if consistent else "read_units_eventual"] = cost["read_units"]
                row["bytes"] = sum(client.sizes[(READ_COUNTER, p.sort_key)] for p in periods)
                _, progress = _reading(client, lambda: ProgressItems(client, settings.counts_table).read(zone))
                row["progress_read"] = progress  # where closed days end: one GetItem, strongly consistent
                rows.append(row)
        reader = Reader(settings.counts_table, client=client, settings=settings)
        for at in MONTH_TO_DATE_AT:
            now = _ms(at)
            for zone in settings.kept_zones:
                month = Bucket.of_month(day_date(local_day_of_hour(now // HOUR_MS, zone)), zone)
                hours = range(month.start_ms // HOUR_MS, now // HOUR_MS + 1)
                minutes = range(now // MINUTE_MS - 120, now // MINUTE_MS + 1)  # the current hour's, and more
                _hours_and_minutes(table, READ_COUNTER, hours, minutes)
                for consistent in (True, False):
                    with mock.patch("tally.reader.now_ms", return_value=now):
                        [answer], cost = _reading(
                            client, lambda: reader.month_to_date([READ_COUNTER], tz=zone, consistent=consistent))
                    answered = answer.window
                    minutes_answered = answered.last_minute - answered.first_minute + 1
                    row = {"at": at, "zone": zone, "consistent": consistent, "requests": cost["requests"],
                           "read_units": cost["read_units"], "items_read": answer.items_read,
                           "exact": answer.total == minutes_answered * EVENTS_PER_MINUTE}
                    found["month_to_date"].append(row)
    found["worst"] = {
        "days_read_units_strong": max(r["read_units_strong"] for r in found["days"]),
        "days_requests": max(r["requests"] for r in found["days"]),
        "months_read_units_strong": max(r["read_units_strong"] for r in found["months"]),
        "months_requests": max(r["requests"] for r in found["months"]),
        "month_to_date_requests": max(r["requests"] for r in found["month_to_date"]),
        "month_to_date_read_units_strong": max(r["read_units"] for r in found["month_to_date"] if r["consistent"]),
        "month_to_date_exact": all(r["exact"] for r in found["month_to_date"]),
    }
    return found


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def storage_figures() -> dict[str, Any]:
    """What a plain count counter active every minute keeps at the default retentions, by granularity: its
    items' sizes (as the stream's commit and the close write them: key, count, TTL, one writer's watermark),
    how many it keeps, and the storage they cost a year per 10^6 counters at DynamoDB's standard price."""
    settings = keeping_days(Settings())
    counter = READ_COUNTER
    with mock_aws():
        _, client = _moto_table(settings)
        table = metered_counts(client, settings)
        hour = _ms("2026-10-15T12:00:00Z") // HOUR_MS
        _hours_and_minutes(table, counter, [hour], [hour * 60])
        for zone in settings.kept_zones:
            day = Bucket.of_day(date(2026, 10, 15), zone)
            _closed_periods(table, counter, [day], [24 * 60 * EVENTS_PER_MINUTE])
            _closed_periods(table, counter, [Bucket.of_month(date(2026, 10, 1), zone)], [31 * 24 * 60 * EVENTS_PER_MINUTE])
        directory = entry_item((hour // 24, counter), settings)
    sizes = {(key[1].split("#")[0], key[1].split("@")[0].split("#")[1] if "@" in key[1] else ""): size
             for key, size in client.sizes.items() if key[0] == counter}
    kept = {
        "M": settings.minute_retention_ms // MINUTE_MS,
        "H": settings.hour_retention_ms // HOUR_MS,
        DAY: settings.day_retention_ms // DAY_MS,
        MONTH: settings.month_retention_months,
    }
    names = {"M": "minute", "H": "hour", DAY: "day", MONTH: "month"}
    rows = []
    for (kind, zone), size in sorted(sizes.items(), key=lambda entry: (list(kept).index(entry[0][0]), entry[0][1])):
        rows.append(_storage_row(names[kind], zone or "UTC", size, kept[kind]))
    rows.append(_storage_row("directory entry", "UTC day", item_size(directory), (settings.hour_retention_ms + DAY_MS) // DAY_MS))
    plain = [r for r in rows if r["granularity"] in ("minute", "hour", "directory entry")]
    utc = plain + [r for r in rows if r["granularity"] in ("day", "month") and r["zone"] == "UTC"]
    both = plain + [r for r in rows if r["granularity"] in ("day", "month")]
    totals = [
        _storage_total("minutes and hours (no days kept)", plain),
        _storage_total("with days and months in UTC", utc),
        _storage_total(f"with days and months in UTC and {ZONE}", both),
    ]
    return {
        "counter_length": len(counter),
        "events_per_minute": EVENTS_PER_MINUTE,
        "price_per_gb_month": STORAGE_PRICE_PER_GB_MONTH,
        "gb_bytes": STORAGE_GB_BYTES,
        "item_overhead_bytes": STORAGE_ITEM_OVERHEAD_BYTES,
        "retentions": {"minutes_hours": settings.minute_retention_ms // HOUR_MS,
                       "hours_days": settings.hour_retention_ms // DAY_MS,
                       "days_days": settings.day_retention_ms // DAY_MS,
                       "months_months": settings.month_retention_months},
        "rows": rows,
        "totals": totals,
    }


def _storage_row(granularity: str, zone: str, size: int, items: int) -> dict[str, Any]:
    per_counter = stored_bytes(size) * items
    return {
        "granularity": granularity, "zone": zone, "item_bytes": size, "billed_bytes": stored_bytes(size),
        "items_kept": items, "bytes_per_counter": per_counter,
        **_prices(per_counter),
    }


def _storage_total(label: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    per_counter = sum(r["bytes_per_counter"] for r in rows)
    return {"kept": label, "items_kept": sum(r["items_kept"] for r in rows), "bytes_per_counter": per_counter,
            **_prices(per_counter)}


def _prices(per_counter: int) -> dict[str, float]:
    month = per_counter * 10**6 / STORAGE_GB_BYTES * STORAGE_PRICE_PER_GB_MONTH
    return {"gb_per_million_counters": round(per_counter * 10**6 / STORAGE_GB_BYTES, 2),
            "usd_per_month_per_million_counters": round(month, 2),
            "usd_per_year_per_million_counters": round(12 * month, 2)}


def checked_against_moto(workload: Workload | None = None, settings: Settings | None = None,
                         config: DeliveryConfig | None = None) -> dict[str, Any]:
    """A small calendar workload streamed and closed twice: over the meter alone (the close's reads answered
    from its image) and forwarded to moto (answered by moto). Whether moto stores the meter's image,
    and whether both runs charged the same writes and reads."""
    workload = workload or calendar_workload(counters=4, days=10, total=300, seed=4)
    settings = keeping_days(settings or Settings())
    config = config or DeliveryConfig()
    alone = stream_and_close(workload, settings, config, daily=False)
    with mock_aws():
        moto, _ = _moto_table(settings)
        forwarded = stream_and_close(workload, settings, config, daily=False, forward_to=moto)
        stored = {}
        for page in moto.get_paginator("scan").paginate(TableName=settings.counts_table, ConsistentRead=True):
            for item in page["Items"]:
                stored[(item["pk"]["S"], item["sk"]["S"])] = item
    figures = [{name: run.ledger.of(phase)[name] for phase in ("stream", "close")
                for name in ("units", "item_writes", "query_requests", "query_read_units", "get_requests", "get_read_units")}
               for run in (alone, forwarded)]
    return {
        "workload": f"{workload.name}: {workload.description}",
        "days_and_months_written": sum(1 for key in stored if key[1].startswith(("D#", "MO#"))),
        "stored_matches_meter": stored == forwarded.client.items == alone.client.items,
        "charges_match": figures[0] == figures[1],
        "close_read_requests": alone.ledger.of("close")["query_requests"] + alone.ledger.of("close")["get_requests"],
    }


def results(settings: Settings | None = None, config: DeliveryConfig | None = None) -> dict[str, Any]:
    """``python -m bench calendar``: the calendar workload, the reads of closed days and months and of this month
    so far, the storage a counter keeps, and the moto check."""
    return {
        "calendar": {
            "settings": {"calendar_prefixes": list(EVERY_COUNTER), "calendar_zones": [ZONE]},
            "workload": calendar_workload_figures(settings=settings, config=config),
            "reads": read_figures(),
            "storage": storage_figures(),
            "checked_against_moto": checked_against_moto(settings=settings, config=config),
        }
    }


def report(out: Console, results: dict[str, Any]) -> None:
    """The per-workload ratios with days and months, the calendar workload, the reads and the storage."""
    table = Table(title=f"Writes with days and months (every counter, UTC and {ZONE}): all WCU over the floor with "
                        "one write per counter-day and counter-month")
    for column in ("workload", "floor WCU", "counter-days", "counter-months", "stream WCU", "late adds + marks",
                   "close WCU", "close reads / RCU", "with days / floor", "without / floor", "<= 1.1"):
        table.add_column(column, justify="right")
    rows = [(w["workload"], w["tally_calendar"], w["ratios"]["tally_units_over_floor_units"])
            for w in results.get("writes", []) if "tally_calendar" in w]
    figures = results.get("calendar")
    if figures:
        rows.append((figures["workload"]["workload"], figures["workload"], None))
    for name, row, without in rows:
        floor, stream, close = row["floor"], row["stream"], row["close"]
        ratio = row["units_over_floor_units"]
        table.add_row(
            name, f"{floor['write_units']:,}", f"{floor['counter_days']:,}", f"{floor['counter_months']:,}",
            f"{stream['write_units']:,}", f"{stream['late_direct_writes']:,} + {stream['late_mark_writes']:,}",
            f"{close['write_units']:,}", f"{close['read_requests']:,} / {close['read_units']:,g}", f"{ratio}x",
            "" if without is None else f"{without}x", "yes" if ratio <= 1.1 else "[red]MISSED[/red]",
        )
    out.print(table)
    if not figures:
        return
    work = figures["workload"]
    out.print(f"calendar: {work['description']}; late records {work['late_events']:,} "
              f"({work['late_events_share']:.1%} of events) take {work['late_units_share']:.1%} of all write units; "
              f"closed {work['closes']} ({work['closes_run']} closes)")
    reads = figures["reads"]
    table = Table(title=f"Reads of closed days and months, one counter of {reads['counter_length']} characters "
                        "(Fetches.query; Reader.calendar reads hours)")
    for column in ("read", "zone", "periods", "requests", "bytes", "RCU strong", "RCU eventual", "+ progress GetItem"):
        table.add_column(column, justify="right")
    for kind in ("days", "months"):
        for row in reads[kind]:
            table.add_row(f"{row['periods']} {kind}", row["zone"], str(row["periods"]), str(row["requests"]),
                          f"{row['bytes']:,}", f"{row['read_units_strong']:g}", f"{row['read_units_eventual']:g}",
                          f"{row['progress_read']['requests']} / {row['progress_read']['read_units']:g} RCU")
    out.print(table)
    table = Table(title="This month so far (Reader.month_to_date, range plan, a counter active every minute)")
    for column in ("at", "zone", "consistent", "requests", "RCU", "items read", "exact"):
        table.add_column(column, justify="right")
    for row in reads["month_to_date"]:
        table.add_row(row["at"], row["zone"], "strong" if row["consistent"] else "eventual", str(row["requests"]),
                      f"{row['read_units']:g}", str(row["items_read"]), "yes" if row["exact"] else "NO")
    out.print(table)
    storage = figures["storage"]
    table = Table(title=f"Storage a plain count counter keeps at the default retentions (counter of "
                        f"{storage['counter_length']} characters; ${storage['price_per_gb_month']} per GB-month, "
                        f"+{storage['item_overhead_bytes']} B per item)")
    for column in ("items", "zone", "item bytes", "kept", "bytes / counter", "GB / 10^6 counters",
                   "$ / month / 10^6", "$ / year / 10^6"):
        table.add_column(column, justify="right")
    for row in storage["rows"]:
        table.add_row(row["granularity"], row["zone"], str(row["item_bytes"]), f"{row['items_kept']:,}",
                      f"{row['bytes_per_counter']:,}", f"{row['gb_per_million_counters']:,}",
                      f"{row['usd_per_month_per_million_counters']:,.2f}", f"{row['usd_per_year_per_million_counters']:,.2f}")
    for row in storage["totals"]:
        table.add_row(row["kept"], "", "", f"{row['items_kept']:,}", f"{row['bytes_per_counter']:,}",
                      f"{row['gb_per_million_counters']:,}", f"{row['usd_per_month_per_million_counters']:,.2f}",
                      f"{row['usd_per_year_per_million_counters']:,.2f}")
    out.print(table)
    checked = figures["checked_against_moto"]
    out.print(f"{checked['workload']}: moto stores what the meter saw: {checked['stored_matches_meter']}; "
              f"the same charges answered by moto and by the meter's image: {checked['charges_match']}")

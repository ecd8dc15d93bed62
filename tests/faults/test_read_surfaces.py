"""Every read surface against brute force, after streams drained through faults: minute and hour series,
listings across a UTC midnight (whole and paged), and top N lists with ties at their last place.

The random streams of test_exact_counts compare totals; these read the same
tables the other ways a user reads them, through ``tally.Reader``, at instants
where the clock is frozen after the last arrival. Designed streams place the
events where the surfaces are easiest to get wrong: on both sides of midnight,
and two counters tying for the last place of a top N, one of them too small
to have a rank record.
"""

from __future__ import annotations

import dataclasses

import random
from collections import Counter
from datetime import UTC, datetime

import boto3
import pytest
from freezegun import freeze_time
from moto import mock_aws
from tally import Reader
from tally.core.commit import order_preserving
from tally.core.ranking import TopBudget, level_floor, level_of, lowest_level
from tally.core.units import HOUR_MS, MINUTE_MS
from tally.core.windows import Window
from tally.dynamo.tables import create_tables

from .checks import check_directory, check_table, scanned
from .streams import Expected, Stream, StreamSpec, _record, hash_shard
from .test_exact_counts import COUNTS_TABLE, EVENTS_TABLE, SETTINGS, Deployment, drain
from .harness import WRITE_FAULTS

# 2026-03-29T00:00Z, the midnight the streams straddle.
MIDNIGHT_MS = 1_774_742_400_000
FAULTY = Deployment(batch_size=10, window_seconds=300, fault_seed=5, fault_rate=0.3, fault_budget=25, query_seed=2)


def designed_stream(events: list[tuple[str, int]], shards: int, first_sequence: int, lag_ms: int = 20_000) -> Stream:
    """INSERTs of ``events`` ((counter, event ms), classic rule), each arriving ``lag_ms`` after its event, in
    order of arrival, spread over ``shards`` shards; sequence numbers from ``first_sequence`` on."""
    expected = Expected(last_arrival_ms=0)
    shard_ids = [f"shardId-designed-{i:08x}" for i in range(shards)]
    records: dict[str, list] = {shard: [] for shard in shard_ids}
    sequence = first_sequence
    for index, (counter, event_ms) in enumerate(sorted(events, key=lambda event: event[1])):
        arrival_ms = (event_ms + lag_ms) // 1000 * 1000
        sequence += 1 + index % 7
        item_id = f"d{index}"
        image = {"id": {"S": item_id}, "counter": {"S": counter}, "ts": {"N": str(event_ms)}}
        record = _record("INSERT", item_id, sequence, arrival_ms, image)
        records[shard_ids[hash_shard(item_id, shards)]].append(record)
        expected.events.append((counter, event_ms, arrival_ms))
        expected.intents[str(sequence)] = [f"counter:{counter}"]
        expected.last_arrival_ms = max(expected.last_arrival_ms, arrival_ms)
    spec = StreamSpec(first_sequence, len(events), len({c for c, _ in events}), 0, 0, 0, 0, 0, 0, shards)
    return Stream(spec, records, expected)


def drained(stream: Stream, deployment: Deployment, settings=SETTINGS):
    """Both tables on moto, the stream drained through faults; the client, and the context to print."""
    client = boto3.client("dynamodb", region_name="us-east-1")
    create_tables(client, EVENTS_TABLE, COUNTS_TABLE)
    _, schedule = drain(stream, deployment, client, settings, WRITE_FAULTS)
    context = f"reproduce with {stream.spec!r}, {deployment!r}; {schedule!r}"
    items = scanned(client, COUNTS_TABLE)
    check_table(client, COUNTS_TABLE, stream.expected, settings, context, writers=stream.writer_tags(), items=items)
    check_directory(client, COUNTS_TABLE, stream.expected, context, items)
    return client, context


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def brute(expected: Expected, window: Window) -> Counter:
    return Counter(name for name, at, _ in expected.events if window.covers(at))


def check_series(reader: Reader, expected: Expected, counter: str, at_ms: int, minutes: int, context: str) -> None:
    """A minute series lists every minute of the window with its events; an hour series every hour the
    window touches, each point holding the window's events from its start to the next point."""
    result = reader.count(counter, window=f"{minutes}m", at=iso(at_ms), series="minute")
    window = result.window
    where = f"{counter!r} over {window}, at {iso(at_ms)}; {context}"
    truth = Counter(at // MINUTE_MS for name, at, _ in expected.events if name == counter and window.covers(at))
    got = [(int(point.start.timestamp() * 1000) // MINUTE_MS, point.count) for point in result.series]
    assert got == [(m, truth[m]) for m in range(window.first_minute, window.last_minute + 1)], f"minute series, {where}"
    hourly = reader.count(counter, window=f"{minutes}m", at=iso(at_ms), series="hour")
    starts = [int(point.start.timestamp() * 1000) for point in hourly.series] + [window.end_ms]
    assert starts[0] == window.start_ms and all(s % HOUR_MS == 0 for s in starts[1:-1]), f"hour series starts, {where}"
    assert len(starts) - 1 == (window.end_ms - 1) // HOUR_MS - window.start_ms // HOUR_MS + 1, f"hour series, {where}"
    for point, start, end in zip(hourly.series, starts, starts[1:]):
        held = sum(1 for name, at, _ in expected.events if name == counter and start <= at < end)
        assert point.count == held, f"hour from {point.start}: {point.count}, brute force {held}; {where}"
    assert result.total == hourly.total == sum(truth.values()), where


def check_listing(
    reader: Reader, expected: Expected, prefix: str, at_ms: int, minutes: int, context: str, paged: bool = False
) -> None:
    """The counters with events in the window (and ``paged``, page by page), across every UTC day it touches."""
    listed = reader.list_counters(prefix, window=f"{minutes}m", at=iso(at_ms))
    window = listed[0].window if listed else None
    truth = brute(expected, window) if window else Counter()
    names = {name: n for name, n in truth.items() if name.startswith(prefix)}
    where = f"prefix {prefix!r}, {minutes} min at {iso(at_ms)}; {context}"
    assert {r.counter: r.total for r in listed} == names, f"listing, {where}"
    if not paged:
        return
    pages, cursor = [], None
    while True:
        page = reader.list_counters(prefix, window=f"{minutes}m", at=iso(at_ms), limit=3, cursor=cursor)
        pages += [r.counter for r in page]
        cursor = page.cursor
        if cursor is None:
            break
    assert pages == sorted(names), f"paged listing, {where}"


def check_top(reader: Reader, expected: Expected, n: int, at_ms: int, minutes: int, context: str) -> None:
    """Exact: the brute-force top n, ties by name. Else every counter left out within the bound."""
    answer = reader.top("", n, window=f"{minutes}m", at=iso(at_ms))
    truth = sorted(((c, v) for c, v in brute(expected, answer.window).items() if v > 0), key=lambda e: (-e[1], e[0]))
    listed = [(entry.counter, entry.total) for entry in answer.entries]
    where = f"top {n} over {answer.window}; {context}"
    if answer.exact:
        assert listed == truth[:n], f"certified {listed}, brute force {truth[: n + 2]}; {where}"
    else:
        names = {name for name, _ in listed}
        assert all(v <= answer.bound for c, v in truth if c not in names), f"left out above {answer.bound}; {where}"


def midnight_events(rng: random.Random, counters: int, events: int) -> list[tuple[str, int]]:
    """Events over the two hours around midnight, on names that sort across prefixes (enough of them that
    the directory's partitions of both days all hold some)."""
    names = [f"{rng.choice(['shop/', 'shop/x', 'site/'])}{i:02d}" for i in range(counters)]
    return [(rng.choice(names), MIDNIGHT_MS + rng.randrange(-HOUR_MS, HOUR_MS)) for _ in range(events)]


def test_series_and_listings_across_midnight_are_brute_force():
    rng = random.Random(1)
    stream = designed_stream(midnight_events(rng, 40, 90), shards=2, first_sequence=10**20)
    with mock_aws():
        client, context = drained(stream, FAULTY)
        with freeze_time(iso(stream.expected.last_arrival_ms + MINUTE_MS)):
            reader = Reader(COUNTS_TABLE, client=client, settings=SETTINGS)
            counters = sorted({name for name, _, _ in stream.expected.events})
            for at_ms, minutes in [(MIDNIGHT_MS + 17 * MINUTE_MS, 45), (MIDNIGHT_MS + HOUR_MS, 120)]:
                for counter in rng.sample(counters, 2):
                    check_series(reader, stream.expected, counter, at_ms, minutes, context)
                for prefix in ("", "shop/x"):
                    check_listing(reader, stream.expected, prefix, at_ms, minutes, context, paged=prefix == "shop/x")


def test_a_top_whose_last_place_is_tied_by_a_counter_without_records_lists_the_tie_by_name():
    """b reaches the rank floor in the hour (a record) but holds one event fewer in the window; a stays just
    below the floor (no record): they tie within the window, and a comes first."""
    floor = level_floor(lowest_level())
    hour = MIDNIGHT_MS + HOUR_MS
    # Several events a minute: all of each counter's events in the one hour, whatever the ladder's floor.
    events = [("tie/a", hour + (20 + i % 40) * MINUTE_MS) for i in range(floor - 1)]
    events += [("tie/b", hour + 5 * MINUTE_MS)] + [("tie/b", hour + (30 + i % 30) * MINUTE_MS) for i in range(floor - 1)]
    events += [("tie/c", hour + (40 + i % 10) * MINUTE_MS) for i in range(3 * floor)]  # first, far ahead
    stream = designed_stream(events, shards=2, first_sequence=10**20)
    ranked = dataclasses.replace(SETTINGS, ranked_prefixes=("",))
    with mock_aws():
        client, context = drained(stream, FAULTY, ranked)
        with freeze_time(iso(stream.expected.last_arrival_ms + MINUTE_MS)):
            reader = Reader(COUNTS_TABLE, client=client, settings=ranked)
            reader.top_budget = dataclasses.replace(TopBudget(), directory_names=0)  # never counted whole
            at_ms = hour + HOUR_MS
            for n in (1, 2, 3):
                check_top(reader, stream.expected, n, at_ms, 50, context)  # from minute 10: b's first is out
            check_top(reader, stream.expected, 2, at_ms, 60, context)
        # The scenario holds as designed: the tie is in the window, b has a record and a has none.
        window = Window.ending(at_ms, 50 * MINUTE_MS)
        assert stream.expected.count("tie/a", window) == stream.expected.count("tie/b", window) == floor - 1
        assert level_of(floor) == lowest_level() and level_of(floor - 1) is None


@pytest.mark.parametrize("power", [9, 10, 16])
def test_sequence_numbers_that_grow_a_byte_within_a_shard_keep_every_segment(power):
    """A writer's later segments must never look applied because their position is one byte longer: stream
    sequence numbers run from 21 to 40 digits, and a shard crosses from one length to the next."""
    boundary = 256**power
    assert len(order_preserving(boundary - 1)) < len(order_preserving(boundary))
    rng = random.Random(power)
    events = [(f"seq/{rng.randrange(3)}", MIDNIGHT_MS - 30 * MINUTE_MS + i * 20_000) for i in range(60)]
    stream = designed_stream(events, shards=1, first_sequence=boundary - 120)
    deployment = Deployment(batch_size=5, window_seconds=60, fault_seed=power, fault_rate=0.2, fault_budget=20, query_seed=1)
    with mock_aws():
        drained(stream, deployment)  # the table exact, bucket by bucket
    numbers = [int(record["dynamodb"]["SequenceNumber"]) for records in stream.shards.values() for record in records]
    assert min(numbers) < boundary <= max(numbers)


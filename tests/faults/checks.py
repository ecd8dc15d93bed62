"""After a stream is drained: compare the counts table and queried windows with the brute-force truth."""

from __future__ import annotations

import math
import random
from collections import Counter
from decimal import Decimal
from typing import Any

from tally.core.buckets import Bucket, bucket_sort_key, sketch_counter, stored_bucket
from tally.core.commit import LEGACY_MARKER_PREFIX, WATERMARK_PREFIX
from tally.core.histograms import RELATIVE_ACCURACY, bin_of, is_bin
from tally.dynamo.counts_table import CountsTable
from tally.invocation import Summary
from tally.core.plans import PlanKind, WindowUnavailable, align_to_retention
from tally.query import count_windows
from tally.core.records import Reason
from tally.core.segments import rejected_counter
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.core.amounts import decimal_of, stored_units
from tally.core.sketches import Sketch
from tally.core.tables import ANCHOR_PARTITION, COUNT_ATTRIBUTE, SKETCH_ATTRIBUTE, SUM_ATTRIBUTE, TTL_ATTRIBUTE, UNRESOLVED_PARTITION
from tally.core.windows import Window

from tally.core.directory import DIRECTORY_PREFIX, partition_of
from tally.core.ranking import RANK_PREFIX, RankRecord, is_ranked, level_of

from .harness import STATS, FaultStats
from .streams import Expected

HOURLY_LENGTHS_MIN = (60, 24 * 60, 49 * 60, 72 * 60, 7 * 24 * 60, 30 * 24 * 60, 90 * 24 * 60)
NOTABLE_LENGTHS_MIN = (
    1,
    2,
    59,
    60,
    61,
    90,
    119,
    120,
    121,
    23 * 60,
    24 * 60 - 1,
    24 * 60,
    24 * 60 + 1,
    36 * 60,
    48 * 60,
    49 * 60 + 1,
    7 * 24 * 60,
    30 * 24 * 60,
)


QUANTILES = ("0", "0.5", "0.9", "0.99", "1")


def scanned(client: Any, table_name: str) -> list[dict[str, Any]]:
    """Every item of a table, read once with a strongly consistent scan: the checks of one drained table share it
    (a scan of a whole table through moto is the slow part of a check)."""
    return [item for page in client.get_paginator("scan").paginate(TableName=table_name, ConsistentRead=True)
            for item in page["Items"]]


def given_or_scanned(items: list[dict[str, Any]] | None, client: Any, table_name: str) -> list[dict[str, Any]]:
    """The table's items as a caller scanned them already, or scanned now."""
    return scanned(client, table_name) if items is None else items


def table_buckets(client: Any, table_name: str) -> dict[tuple[str, str], int]:
    """Every bucket of the counts table, its lanes summed (segment markers left out)."""
    return table_contents(client, table_name)[0]


def table_contents(
    client: Any, table_name: str, items: list[dict[str, Any]] | None = None
) -> tuple[
    dict[tuple[str, str], int],
    dict[tuple[str, str], int],
    dict[tuple[str, str], Counter[str]],
    dict[tuple[str, str], Sketch],
    dict[tuple[str, str], set[str]],
]:
    """Every bucket's count, its lanes summed, the sum (in units) of those that keep one, the histogram bins of
    those that keep them, the sketch of those a distinct rule writes, its lanes merged, and the watermark
    attributes of every stored count item (lane by lane). ``items``: the table's items, scanned already."""
    counts: dict[tuple[str, str], int] = {}
    sums: dict[tuple[str, str], int] = {}
    bins: dict[tuple[str, str], Counter[str]] = {}
    sketches: dict[tuple[str, str], Sketch] = {}
    watermarks: dict[tuple[str, str], set[str]] = {}
    for item in given_or_scanned(items, client, table_name):
        if not item["pk"]["S"].startswith((LEGACY_MARKER_PREFIX, DIRECTORY_PREFIX, RANK_PREFIX, UNRESOLVED_PARTITION, ANCHOR_PARTITION)):
            key = stored_bucket(item["pk"]["S"], item["sk"]["S"])  # a sketch lane's partition names its counter
            if SKETCH_ATTRIBUTE in item:
                assert sketch_counter(item["pk"]["S"]) is not None, f"a sketch outside its lane's partition: {item}"
                sketches.setdefault(key, Sketch()).merge(Sketch.from_bytes(item[SKETCH_ATTRIBUTE]["B"]))
                continue
            counts[key] = counts.get(key, 0) + int(item[COUNT_ATTRIBUTE]["N"])
            if SUM_ATTRIBUTE in item:
                sums[key] = sums.get(key, 0) + stored_units(item[SUM_ATTRIBUTE]["N"])
            for name, value in item.items():
                if is_bin(name):
                    bins.setdefault(key, Counter())[name] += int(value["N"])
            stored = (item["pk"]["S"], item["sk"]["S"])
            watermarks[stored] = {name for name in item if name.startswith(WATERMARK_PREFIX)}
    return counts, sums, bins, sketches, watermarks


def check_table(
    client: Any,
    table_name: str,
    expected: Expected,
    settings: Settings,
    context: str,
    stats: FaultStats = STATS,
    writers: set[str] | None = None,
    items: list[dict[str, Any]] | None = None,
) -> None:
    """Exact: every bucket the events make, with its count, and nothing else (a bucket at 0 must not exist);
    sketches hold each distinct value once, however often a record was delivered, retried or duplicated.

    ``writers``: the watermark tags of the shards that fed the table. Every
    count item then holds one to each shard that wrote it, and no other.
    """
    actual, actual_sums, actual_bins, actual_sketches, watermarks = table_contents(client, table_name, items)
    if writers is not None:
        strangers = {key: tags - writers for key, tags in watermarks.items() if not tags or tags - writers}
        sample = dict(sorted(strangers.items())[:4])
        assert not strangers, f"{len(strangers)} items hold no watermark, or a stranger's, e.g. {sample}; {context}"
    truth, truth_sums, truth_bins = expected.buckets(settings), expected.bucket_sums(settings), expected.bucket_bins(settings)
    truth_sketches = expected.bucket_sketches(settings)
    stats.add("buckets_compared", len(truth.keys() | actual.keys()))
    wrong = {
        key: (actual.get(key), truth.get(key))
        for key in truth.keys() | actual.keys()
        if actual.get(key) != truth.get(key)
    }
    wrong.update(
        {
            ("sum", *key): (actual_sums.get(key), truth_sums.get(key))
            for key in truth_sums.keys() | actual_sums.keys()
            if actual_sums.get(key) != truth_sums.get(key)
        }
    )
    wrong.update(
        {
            ("bins", *key): (dict(actual_bins.get(key, {})), dict(truth_bins.get(key, {})))
            for key in truth_bins.keys() | actual_bins.keys()
            if actual_bins.get(key) != truth_bins.get(key)
        }
    )
    wrong.update(
        {
            ("distinct", *key): (repr(actual_sketches.get(key)), repr(truth_sketches.get(key)))
            for key in truth_sketches.keys() | actual_sketches.keys()
            if actual_sketches.get(key) != truth_sketches.get(key)
        }
    )
    stats.add("sketches_compared", len(truth_sketches.keys() | actual_sketches.keys()))
    if wrong:
        stats.add("discrepancies", len(wrong))
    sample = dict(sorted(wrong.items())[:8])
    assert not wrong, f"{len(wrong)} buckets differ (actual, expected), e.g. {sample}; {context}"


def check_directory(
    client: Any, table_name: str, expected: Expected, context: str, items: list[dict[str, Any]] | None = None
) -> None:
    """The counter directory holds one entry per UTC day and counter that counted, and nothing else."""
    entries = {
        (item["pk"]["S"], item["sk"]["S"])
        for item in given_or_scanned(items, client, table_name)
        if item["pk"]["S"].startswith(DIRECTORY_PREFIX)
    }
    truth = {(partition_of(event_ms // DAY_MS, name), name) for name, event_ms, _ in expected.events}
    assert entries == truth, f"directory: extra {sorted(entries - truth)[:5]}, missing {sorted(truth - entries)[:5]}; {context}"


def rank_levels(
    client: Any, table_name: str, items: list[dict[str, Any]] | None = None
) -> tuple[dict[tuple[str, int, int], int], dict[tuple[str, int, int], int]]:
    """Every hour item's count and the highest level recorded for it in the ranking index, keyed by
    (counter, hour since the epoch, lane)."""
    counts: dict[tuple[str, int, int], int] = {}
    recorded: dict[tuple[str, int, int], int] = {}
    for item in given_or_scanned(items, client, table_name):
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        if pk.startswith(RANK_PREFIX):
            record = RankRecord.parse(pk, sk)
            key = (record.counter, record.hour, record.lane)
            recorded[key] = max(recorded.get(key, -1), record.level)
        elif sk.startswith("H#") and not pk.startswith("#") and COUNT_ATTRIBUTE in item and SKETCH_ATTRIBUTE not in item:
            _, _, lane = sk.partition("#")[2].partition("#")
            hour = Bucket.from_sort_key(bucket_sort_key(sk)).index
            counts[(pk, hour, int(lane or 0))] = int(item[COUNT_ATTRIBUTE]["N"])
    return counts, recorded


def check_ranks(
    client: Any, table_name: str, settings: Settings, context: str, items: list[dict[str, Any]] | None = None
) -> int:
    """The ranking index's invariant: every hour item (lane) of a ranked counter counting at least the lowest
    recorded floor has a record of exactly its level, and no record names an item that is not there, a counter
    that is not ranked or a level above its count's. Levels are read from counts, so a retried, redelivered or
    raced update can neither add a level nor lose one."""
    counts, recorded = rank_levels(client, table_name, items)
    truth = {
        key: level
        for key, count in counts.items()
        if is_ranked(key[0], settings) and (level := level_of(count)) is not None
    }
    wrong = {key: (recorded.get(key), truth.get(key)) for key in truth.keys() | recorded.keys() if recorded.get(key) != truth.get(key)}
    STATS.add("rank_records_compared", len(truth.keys() | recorded.keys()))
    assert not wrong, f"rank levels (recorded, of the count) differ: {sorted(wrong.items())[:5]}; {context}"
    return len(truth)


def check_summaries(summaries: list[Summary], records: int, expected: Expected, context: str) -> None:
    """The invocations' own accounting: each record once, every rejection under its reason."""
    total = Counter[Reason]()
    for summary in summaries:
        total.update(summary.rejected)
    assert sum(s.records for s in summaries) == records, context
    assert sum(s.counted for s in summaries) == len(expected.events), context
    assert +total == +expected.rejections_by_reason(), (
        f"rejections {dict(total)} != {dict(expected.rejections_by_reason())}; {context}"
    )
    for summary in summaries:
        assert all(rejection.reason.is_rejection and rejection.detail for rejection in summary.rejections), context


def check_windows(
    table: CountsTable,
    client: Any,
    expected: Expected,
    settings: Settings,
    rng: random.Random,
    instants: int,
    context: str,
    stats: FaultStats = STATS,
    items: list[dict[str, Any]] | None = None,
) -> None:
    """Windows after the stream drained, by both plans, against the brute-force count.

    ``instants`` windows, half at random instants and half with edges on an
    event's minute (so that a plan off by one minute at either end, or one
    that subtracts the wrong minutes from a partly covered hour, miscounts),
    and one ending right when the last record arrived (where events stamped
    ahead of their arrival may lie in later minutes of the current hour).
    The instants go forward in time, and before each one DynamoDB's TTL
    deletion is played on ``client``: any item whose TTL has passed may be gone.
    ``items``: the drained table's items, scanned already.
    """
    counters = sorted({name for name, _, _ in expected.events}) + ["never-written"]
    counters += sorted({rejected_counter(reason) for reason, _ in expected.rejections})
    counters.append(rejected_counter(Reason.FUTURE_TIME))
    binned = sorted({name for name, _, _, _ in expected.values})
    anchored = max(1, instants // 2) if expected.events else 0
    moments = [(*_instant(rng, expected.last_arrival_ms), None) for _ in range(instants - instants // 2)]
    moments += [_anchored_instant(rng, expected) for _ in range(anchored)]
    moments.append((expected.last_arrival_ms, None, rng.choice(NOTABLE_LENGTHS_MIN) * MINUTE_MS, None))
    expiring = expiry_times(client, table.table_name, items)
    for now, at, length_ms, anchor in sorted(moments, key=lambda moment: moment[0]):
        stats.add("items_expired", expire(client, table.table_name, expiring, now, rng))
        chosen = rng.sample(counters, min(len(counters), 5))
        if anchor is not None and anchor not in chosen:
            chosen[0] = anchor
        if binned and not set(binned) & set(chosen):
            chosen.append(rng.choice(binned))  # a histogram counter in every read of a stream that keeps them
        # A window ending now is aligned, as the CLI and the HTTP API ask for it; an explicit end is not.
        window = stated_window(now if at is None else at, length_ms, now if at is None else None, settings)
        assert window == _engine_window(now if at is None else at, length_ms, now if at is None else None, settings)
        past_minutes = _readable_until(window.start_ms, MINUTE_MS, settings.minute_retention_ms) <= now
        for plan in (PlanKind.BATCH, PlanKind.RANGE):
            try:
                results = count_windows(
                    table, chosen, length_ms=length_ms, at_ms=at, plan=plan, now=now, align=at is None
                )
            except WindowUnavailable:
                assert not must_be_answered(window, now, settings), (
                    f"refused a window within retention: {window}; {context}"
                )
                stats.add("windows_refused")
                continue
            assert not must_be_refused(window, now, settings), f"answered {window} at {now}; {context}"
            for result in results:
                assert result.window == window, f"answered {result.window}, not {window}; {context}"
                stats.add("windows_compared")
                stats.add("windows_aligned", result.aligned)
                stats.add("windows_past_minute_retention", past_minutes)
                truth = expected.count(result.counter, window)
                by_hour = Counter(
                    at_ms // HOUR_MS for name, at_ms in _occurrences(expected, result.counter) if window.covers(at_ms)
                )
                summing = any(name == result.counter for name, _, _, _ in expected.amounts)
                truth_sum = decimal_of(expected.sum_of(result.counter, window)) if summing else None
                sums_differ = summing and (
                    result.sum != truth_sum or result.average != expected.average(result.counter, window)
                )
                by_hour_index = Counter({int(hour.timestamp()) * 1000 // HOUR_MS: n for hour, n in result.by_hour.items()})
                if result.total != truth or +by_hour_index != +by_hour or sums_differ:
                    stats.add("discrepancies")
                where = (
                    f"{result.counter!r} over {window} ({length_ms // MINUTE_MS} min), "
                    f"plan {plan.value}, now {now}, at {at}"
                )
                assert result.total == truth, f"{where}: counted {result.total}, brute force {truth}; {context}"
                assert not sums_differ, (
                    f"{where}: sum {result.sum} average {result.average}, brute force {truth_sum} "
                    f"{expected.average(result.counter, window)}; {context}"
                )
                assert +by_hour_index == +by_hour, (
                    f"{where}: by hour {result.by_hour} != {dict(by_hour)}; {context}"
                )
                if any(name == result.counter for name, _, _, _ in expected.values):
                    check_quantiles(result, expected.values_in(result.counter, window), where, context, stats)


def check_quantiles(result: Any, values: list[Decimal], where: str, context: str, stats: FaultStats) -> None:
    """A histogram counter's window: exactly the bins of its values (each added once whatever the faults),
    and every quantile within 1 % of the value of rank ceil(q*n) among them."""
    assert result.histogram is not None, f"{where}: no histogram; {context}"
    bins = Counter({name: count for name, count in result.histogram.bins.items() if count})
    truth = Counter(bin_of(value) for value in values)
    if bins != truth:
        stats.add("discrepancies")
    assert bins == truth, f"{where}: bins {dict(bins)} != {dict(truth)}; {context}"
    for q in QUANTILES:
        answer = result.histogram.quantile(q)
        if not values:
            assert answer is None, f"{where}: q{q} of no value is {answer}; {context}"
            continue
        exact = values[max(1, math.ceil(Decimal(q) * len(values))) - 1]
        assert abs(answer - exact) <= RELATIVE_ACCURACY * abs(exact), (
            f"{where}: q{q} {answer}, brute force {exact}; {context}"
        )
        stats.add("quantiles_compared")


def stated_window(end_ms: int, length_ms: int, aligned_at: int | None, settings: Settings) -> Window:
    """The window as docs/design.md (Window semantics) states it, written apart from the engine's code.

    Its last minute holds ``end_ms - 1`` (an end on a minute boundary is
    exclusive); aligned (``aligned_at``: now), an edge whose minute is past the
    minute retention moves out to its hour's boundary.
    """
    last = (end_ms - 1) // MINUTE_MS
    first = last - length_ms // MINUTE_MS + 1
    if aligned_at is not None:
        if _readable_until(first * MINUTE_MS, MINUTE_MS, settings.minute_retention_ms) <= aligned_at:
            first = first * MINUTE_MS // HOUR_MS * 60
        if _readable_until(last * MINUTE_MS, MINUTE_MS, settings.minute_retention_ms) <= aligned_at:
            last = last * MINUTE_MS // HOUR_MS * 60 + 59
    return Window(first, last)


def _engine_window(end_ms: int, length_ms: int, aligned_at: int | None, settings: Settings) -> Window:
    window = Window.ending(end_ms, length_ms)
    return window if aligned_at is None else align_to_retention(window, aligned_at, settings)


def expiry_times(client: Any, table_name: str, items: list[dict[str, Any]] | None = None) -> dict[tuple[str, str], int]:
    """Every item's key and TTL (epoch ms), read once: the table takes no writes while windows are checked."""
    return {
        (item["pk"]["S"], item["sk"]["S"]): int(item[TTL_ATTRIBUTE]["N"]) * 1000
        for item in given_or_scanned(items, client, table_name)
        if TTL_ATTRIBUTE in item
    }


def expire(client: Any, table_name: str, expiring: dict[tuple[str, str], int], now_ms: int, rng: random.Random) -> int:
    """DynamoDB's TTL deletion, which moto lacks: some, or all, of the items whose TTL has passed go.

    ``expiring`` holds the items not deleted yet (``expiry_times``); deleted ones leave it.
    """
    everything = rng.random() < 0.5
    due = [key for key, ttl_ms in expiring.items() if ttl_ms <= now_ms and (everything or rng.random() < 0.5)]
    for pk, sk in due:
        client.delete_item(TableName=table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}})
        del expiring[(pk, sk)]
    return len(due)


def _readable_until(bucket_start_ms: int, length_ms: int, retention_ms: int) -> int:
    """Stated from the design, not from Bucket: a bucket lives until its end plus its retention."""
    return bucket_start_ms - bucket_start_ms % length_ms + length_ms + retention_ms


def must_be_answered(window: Window, now_ms: int, settings: Settings) -> bool:
    """Every hour is within the hour retention, and every hour the window covers in part keeps all its minutes."""
    for hour in range(window.first_minute // 60, window.last_minute // 60 + 1):
        start = hour * HOUR_MS
        if _readable_until(start, HOUR_MS, settings.hour_retention_ms) <= now_ms:
            return False
        whole = window.start_ms <= start and start + HOUR_MS <= window.end_ms
        if not whole and _readable_until(start, MINUTE_MS, settings.minute_retention_ms) <= now_ms:
            return False
    return True


def must_be_refused(window: Window, now_ms: int, settings: Settings) -> bool:
    """Minute precision where minutes are past retention (a start inside an hour), or an hour past retention."""
    start = window.start_ms
    if start % HOUR_MS and _readable_until(start, MINUTE_MS, settings.minute_retention_ms) <= now_ms:
        return True
    return _readable_until(start, HOUR_MS, settings.hour_retention_ms) <= now_ms


def _occurrences(expected: Expected, counter: str) -> list[tuple[str, int]]:
    if counter.startswith("#rejected#"):
        return [(counter, at) for reason, at in expected.rejections if rejected_counter(reason) == counter]
    return [(name, at) for name, at, _ in expected.events if name == counter]


def _anchored_instant(rng: random.Random, expected: Expected) -> tuple[int, int | None, int, str]:
    """(now, window end, length, counter): a window that starts or ends on the minute of one of the counter's events.

    The event's minute is the window's first or last, or the one just outside
    either end. Half the time the event lies in the second half of its hour
    and the window ends just before it, covering the rest of the hour: the
    plans read that hour minus its other minutes, the event's among them.
    """
    later = rng.choice([0, rng.randint(0, 5 * MINUTE_MS), rng.randint(0, 2 * DAY_MS)])
    late_in_the_hour = [
        (counter, event_ms, arrival_ms)
        for counter, event_ms, arrival_ms in expected.events
        if event_ms % HOUR_MS >= 31 * MINUTE_MS and arrival_ms - event_ms < HOUR_MS  # counted in its minute too
    ]
    if late_in_the_hour and rng.random() < 0.5:
        # The window ends just before the event's minute and covers most of its hour: the plans read that
        # hour minus the minutes after the window, the event's first among them.
        counter, event_ms, _ = rng.choice(late_in_the_hour)
        minutes = rng.choice([60, 61, 90, 119, 24 * 60, rng.randint(60, 3 * 60)])
        later = min(later, DAY_MS)
        return expected.last_arrival_ms + later, event_ms - event_ms % MINUTE_MS - 1, minutes * MINUTE_MS, counter
    counter, event_ms, _ = rng.choice(expected.events)
    minute_start = event_ms - event_ms % MINUTE_MS
    minutes = rng.choice(NOTABLE_LENGTHS_MIN) if rng.random() < 0.5 else rng.randint(31, 3 * 60)
    edge = minute_start + rng.choice([0, MINUTE_MS])  # the event's minute is just in, or just out
    # A millisecond either side of a minute boundary: the window's last (or first) minute shifts by one.
    at = edge + rng.choice([-1, 0, 1]) if rng.random() < 0.5 else edge + minutes * MINUTE_MS + rng.choice([-1, 0])
    return expected.last_arrival_ms + later, at, minutes * MINUTE_MS, counter


def _instant(rng: random.Random, last_arrival_ms: int) -> tuple[int, int | None, int]:
    """(now, window end or None for now, length): now is never before the last record arrived."""
    later = rng.choice([0, rng.randint(0, 5 * MINUTE_MS), rng.randint(0, 2 * DAY_MS), rng.randint(0, 95 * DAY_MS)])
    now = last_arrival_ms + later
    kind = rng.randrange(5)
    if kind == 0:
        at = None
    elif kind == 1:
        at = now - rng.randint(0, DAY_MS + 2 * HOUR_MS)
    elif kind == 2:
        at = now + rng.randint(0, 2 * HOUR_MS)
    elif kind == 3:
        at = now - now % HOUR_MS - rng.choice([0, 1, MINUTE_MS])  # right at, or just before, an hour boundary
    else:
        at = now - rng.randint(0, 92 * DAY_MS)
        at = at - at % HOUR_MS - 1  # the end of an hour, far back
    if kind >= 3 and rng.random() < 0.6:
        return now, at, rng.choice(HOURLY_LENGTHS_MIN) * MINUTE_MS  # hour-aligned where minutes have expired
    minutes = rng.choice(NOTABLE_LENGTHS_MIN) if rng.random() < 0.6 else rng.randint(1, 31 * 24 * 60)
    return now, at, minutes * MINUTE_MS

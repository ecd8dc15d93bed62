"""The ranking index, and the certified top N of a prefix over a window read from it. No I/O.

**What is ranked.** Only counters under the table's ranked prefixes
(``Settings.ranked_prefixes``: context ``rankedPrefixes``,
``TALLY_RANKED_PREFIXES``), the way a table declares the index it will
query: a table that never asks for a top list writes no rank record. A top
list of a prefix that is not ranked counts the prefix whole from the counter
directory when it names few counters, and is refused otherwise.

**What is written.** Levels form a ladder: level k holds the counts from
``floor(k)``, where ``floor(0) = 8`` and each floor is half as much again as the
last, rounded down (8, 12, 18, 27, 40, 60, ...). Commits record only some of
its levels (``Ladder``): the first from 202 events (level 8), then every 5th
(1,531, 11,623, 88,258, ...), each 7.6 times the last. An hour item (one lane
of an hour bucket) that holds fewer than 202 events is not worth a record: a
24 h top bounds every counter without one below 24 x 202 per lane, far under
what a top 10 of a busy prefix totals. Whenever a commit's update carries an
hour item into a higher recorded level, the writer puts one rank record, of
the highest recorded level reached, learned from the count the update returns:

    pk = "#ranks#2026-11-23"    sk = "<level, 3 digits>#<hour of day>#<lane>#<counter>"    ttl = the hour item's

Records are only ever added, and a put of the same record changes nothing: an
item's highest record is its level, so a retry, a redelivery or a racing shard
can neither lose a level nor count one twice (levels are read from counts, not
added up). A retry cannot tell whether its lost first try crossed a level, so
an item found already applied puts the record of its level again. An hour
item gets at most one record per update and one per recorded level: a counter
that commits every minute gets one record an hour from 202 events, a second
once it passes 7.6 times that (a busy counter's hour grows 60-fold from its
first minute: three records at most).

**Invariant** (once the segments in flight are applied): every hour item
holding at least 202 events has a record of its recorded level; an item
whose highest record is of level k counts less than the floor of the next
recorded level above k (``Ladder.cap``). 0.2.x wrote a record of every level
from 8 (or from its lanes' lowest level) and its records keep both promises:
read with this release's ladder, a record of any level bounds its item from
below by its floor and from above by the next recorded floor.

**The top N** (``top_steps``): read a window's day partitions from the highest
level down, in pages; each record bounds its item's count from both sides
(an unseen item of a partition read down to level k counts at most
``cap(k)``), so every counter seen has a lower and an upper bound on its total,
and every counter unseen at most ``H x lanes x cap`` (H: the window's hours).
Count the candidates that could still be in the top N exactly, through the
reader's own counting path, until no unseen or uncounted counter can reach the
N-th exact total: the answer is then exact. Where it cannot get there within its
budget (a flat distribution, counts below the floor), the answer says
``exact: false`` and gives the bound no left-out counter exceeds; a prefix with
few counters is counted whole from the counter directory, exactly.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tally.core.buckets import Bucket
from tally.core.directory import RESERVED_PREFIX
from tally.core.settings import Settings
from tally.core.units import DAY_MS, HOUR_MS
from tally.core.tables import COUNTS_TABLE, TTL_ATTRIBUTE
from tally.core.windows import QueryError, Window

RANK_PREFIX = "#ranks#"
# The ladder's first floor: level k's floor is RANK_FLOOR times 1.5^k, rounded down at each step (8, 12, 18, ...).
RANK_FLOOR = 8
# Each level's floor is 3/2 of the last (rounded down). Records name a level of this ladder, which is the format
# 0.2.x wrote every level of; this release records every RECORDED_EVERY-th level only.
RANK_GROWTH = (3, 2)
# The lowest level recorded: an hour item (one lane of an hour bucket) is ranked once it holds 202 events.
LOWEST_RECORDED = 8
# Below FINE_FROM every 5th level is recorded (202, 1,531), each 7.6 times the last: most hour items live there,
# and get one record or two in their hour. From FINE_FROM (11,623 events an hour) every level is: a top N of
# busy counters tells them apart within a factor of 1.5 and counts few candidates besides its N.
RECORDED_EVERY = 5
FINE_FROM = 18


def _floors() -> list[int]:
    """Every level's floor, up to past any count DynamoDB can hold (38 digits): 8, 12, 18, 27, 40, ..."""
    floors = [RANK_FLOOR]
    while floors[-1] < 10**39:
        floors.append(floors[-1] * RANK_GROWTH[0] // RANK_GROWTH[1])
    return floors


_FLOORS = _floors()  # over 200 levels: three digits in a record's sort key keep them in order
MAX_TOP = 1_000


@dataclass(frozen=True)
class Ladder:
    """Which levels of the 1.5-fold ladder a table records: ``lowest``, every ``every``-th above it up to
    ``fine_from``, and every ``fine_every``-th from there.

    The trade: a record bounds its item within the factor from its level to
    the next recorded one, so coarse levels make a top N count more
    candidates; each recorded level an item's count passes in its hour is a
    write. Coarse low levels cost the many modest items one record; fine high
    levels cost the few busy ones a record per 1.5-fold growth and let a top N
    of busy counters certify after counting few candidates.
    """

    lowest: int = LOWEST_RECORDED
    every: int = RECORDED_EVERY
    fine_from: int = FINE_FROM
    fine_every: int = 1

    def __post_init__(self) -> None:
        if (self.fine_from - self.lowest) % self.every or min(self.lowest, self.every, self.fine_every) < 0:
            raise ValueError(f"{self}: fine_from must be lowest plus a whole number of steps")

    def above(self, level: int) -> int:
        """The first recorded level above ``level`` (any level of the ladder, recorded or written by 0.2.x)."""
        if level < self.lowest:
            return self.lowest
        if level < self.fine_from:
            return min(self.fine_from, self.lowest + ((level - self.lowest) // self.every + 1) * self.every)
        return self.fine_from + ((level - self.fine_from) // self.fine_every + 1) * self.fine_every

    def level_of(self, count: int) -> int | None:
        """The recorded level of an hour item's count: the highest recorded floor it reaches; None below all."""
        if count < _FLOORS[self.lowest]:
            return None
        level = self.lowest
        while _FLOORS[self.above(level)] <= count:
            level = self.above(level)
        return level

    def cap(self, level: int) -> int:
        """The most an item whose highest record is at ``level`` can count: one less than the next recorded floor."""
        return _FLOORS[self.above(level)] - 1

    def crossed(self, count_after: int, added: int) -> int | None:
        """The level an update that added ``added`` to reach ``count_after`` carried its item into, or None."""
        after = self.level_of(count_after)
        if after is None:
            return None
        before = self.level_of(count_after - added)
        return after if before is None or before < after else None


LADDER = Ladder()


def level_of(count: int, ladder: Ladder = LADDER) -> int | None:
    """The recorded level of an hour item's count; None below the lowest level recorded."""
    return ladder.level_of(count)


def lowest_level(ladder: Ladder = LADDER) -> int:
    """The lowest level recorded: an item without a record counts less than its floor."""
    return ladder.lowest


def level_floor(level: int) -> int:
    """The smallest count of a level."""
    return _FLOORS[level]


def level_cap(level: int, ladder: Ladder = LADDER) -> int:
    """The largest count an item whose highest record is of ``level`` can have."""
    return ladder.cap(level)


def crossed_level(count_after: int, added: int, ladder: Ladder = LADDER) -> int | None:
    """The level an update that added ``added`` to reach ``count_after`` carried its item into, or None."""
    return ladder.crossed(count_after, added)


def rank_partition(day: int) -> str:
    """The partition of a UTC day's rank records: ``#ranks#YYYY-MM-DD``."""
    return RANK_PREFIX + datetime.fromtimestamp(day * DAY_MS // 1000, UTC).strftime("%Y-%m-%d")


def rank_item(counter: str, hour: Bucket, lane: int, level: int, settings: Settings) -> dict[str, dict[str, str]]:
    """The record of one hour item's level: it lives as long as the hour item."""
    hour_of_day = hour.index % 24
    return {
        COUNTS_TABLE.partition_key: {"S": rank_partition(hour.start_ms // DAY_MS)},
        COUNTS_TABLE.sort_key: {"S": f"{level:03d}#{hour_of_day:02d}#{lane:02d}#{counter}"},
        TTL_ATTRIBUTE: {"N": str(hour.ttl_seconds(settings))},
    }


def window_hours(first_minute: int, last_minute: int, now_ms: int, settings: Settings) -> tuple[list[int], set[int]]:
    """The hours of a window (its minutes, both included) that can hold data at ``now_ms`` (no later than now plus
    the clock skew), and those among them the window covers whole."""
    populated_until = (now_ms + settings.max_clock_skew_ms) // 60_000
    last = min(last_minute, populated_until) // 60
    hours = list(range(first_minute // 60, last + 1)) if last_minute >= first_minute else []
    full = {hour for hour in hours if first_minute <= hour * 60 and hour * 60 + 59 <= last_minute}
    return hours, full


def whole_hours(window: Window) -> Window:
    """The window a top list answers: whole hours, as many as ``window`` spans (rounded up), ending with the hour
    of its last minute (the current hour, counted so far, for a window ending now).

    A whole hour is one key a counter and a record of its level bounds it from
    both sides; a partly covered hour is up to 59 minute keys, and bounds it
    from above only. So a 24 h top counts 24 keys a counter instead of up to 83.
    """
    hours = -(-window.minutes // 60)
    last = window.last_minute - window.last_minute % 60 + 59
    return Window(last + 1 - 60 * hours, last)


def is_ranked(counter: str, settings: Settings) -> bool:
    """Whether commits put rank records for a counter: it starts with a ranked prefix (tally's own never do)."""
    return not counter.startswith(RESERVED_PREFIX) and any(counter.startswith(p) for p in settings.ranked_prefixes)


def prefix_is_ranked(prefix: str, settings: Settings) -> bool:
    """Whether every counter starting with ``prefix`` is ranked: it starts with a ranked prefix itself."""
    return any(prefix.startswith(ranked) for ranked in settings.ranked_prefixes)


class UnrankedPrefix(QueryError):
    """A top N of a prefix that is not ranked, with too many counters to count whole."""

    parameter = "prefix"


@dataclass(frozen=True)
class RankRecord:
    """One record read back: an hour item (counter, hour since the epoch, lane) reached ``level``."""

    counter: str
    hour: int
    lane: int
    level: int

    @classmethod
    def parse(cls, partition: str, sort_key: str) -> RankRecord:
        day = int(datetime.strptime(partition[len(RANK_PREFIX) :], "%Y-%m-%d").replace(tzinfo=UTC).timestamp()) // 86_400
        level, hour_of_day, lane, counter = sort_key.split("#", 3)
        return cls(counter, day * 24 + int(hour_of_day), int(lane), int(level))


# --- the certified top N, as steps a reader drives ---------------------------------------------------


@dataclass(frozen=True)
class ReadRanks:
    """Read the next page of a rank partition, highest level first; the driver answers with the page's
    records and the key to go on from (None: the partition is read to its end)."""

    partition: str
    start_key: str | None
    limit: int


@dataclass(frozen=True)
class CountExactly:
    """Count these counters over the window (and over the window before it, for a rising top), through the
    reader's counting path; the driver answers {counter: total} (or {counter: (total, previous total)})."""

    counters: list[str]


@dataclass(frozen=True)
class ListNames:
    """List the directory's names of the prefix on the window's days, at most ``limit``; the driver answers
    (names, whether more exist)."""

    limit: int


TopStep = ReadRanks | CountExactly | ListNames


@dataclass(frozen=True)
class Ranked:
    """One entry of a top list: its exact total (and, rising, the previous window's and the increase)."""

    counter: str
    total: int
    previous: int | None = None

    @property
    def value(self) -> int:
        """What the list ranks by: the total, or the increase over the previous window."""
        return self.total if self.previous is None else self.total - self.previous


@dataclass(frozen=True)
class TopResult:
    """The top N: exact, or with the largest value any counter left out can have."""

    entries: list[Ranked]
    exact: bool
    bound: int | None  # None when exact
    rank_records: int = 0  # records read
    counted: int = 0  # counters counted exactly


@dataclass(frozen=True)
class TopBudget:
    """How far a top N may read before it answers with a bound instead.

    A skewed prefix certifies its top 10 within the first two pages of each
    day and a dozen counters counted (``bench/top.py``); a flat one never
    certifies, so what it may read is kept near that: about 8,000 records
    (half a megabyte) and the N counters it lists.
    """

    rank_pages: int = 16  # pages of one day's records
    rank_records: int = 8_192  # records of every day together
    first_page: int = 256
    largest_page: int = 4_096
    counted: int = 40  # counters counted exactly, besides the directory's
    directory_names: int = 250  # a prefix with at most this many names on the window's days is counted whole

    def counting(self, n: int) -> int:
        return max(self.counted, 2 * n + 20)


@dataclass
class _Partition:
    name: str
    start_key: str | None = None
    exhausted: bool = False
    frontier: int | None = None  # the level of the last record read: nothing above it is unread
    pages: int = 0


@dataclass
class _Candidate:
    levels: dict[tuple[int, int], int] = field(default_factory=dict)  # (hour, lane) -> highest level seen
    exact: Ranked | None = None


def top_steps(
    prefix: str,
    n: int,
    *,
    hours: Sequence[int],
    full_hours: Iterable[int],
    lanes: int,
    rising: bool = False,
    budget: TopBudget = TopBudget(),
    ranked: bool = True,
    ladder: Ladder = LADDER,
) -> Generator[TopStep, object, TopResult]:
    """The certified top ``n`` of the counters starting with ``prefix`` over a window.

    ``hours``: the hours (since the epoch) of the window that can hold data;
    ``full_hours``: those the window covers whole (a record of a partly
    covered hour bounds the window's share from above only). ``rising``: rank
    by the increase over the previous window of the same length (bounded from
    above by the window's total). The answer ranks by value, descending, then
    by name; it lists counters whose value is above 0 only.

    ``ranked`` False: the prefix's counters have no rank records (it is not
    a ranked prefix); the answer counts the prefix whole from the directory,
    exact, or raises UnrankedPrefix when it names more than
    ``budget.directory_names`` counters on the window's days.
    """
    if not 1 <= n <= MAX_TOP:
        raise ValueError(f"n must be from 1 to {MAX_TOP}, got {n}")
    if not ranked:
        return (yield from _counted_whole(prefix, n, rising, budget))
    full = set(full_hours)
    hour_set = set(hours)
    partitions = {day: _Partition(rank_partition(day)) for day in sorted({hour * HOUR_MS // DAY_MS for hour in hours})}
    candidates: dict[str, _Candidate] = {}
    records = 0
    counted = 0

    def unseen_cap(hour: int) -> int | None:
        """The most an hour item of ``hour`` without a record read can count; None: no bound yet."""
        partition = partitions[hour * HOUR_MS // DAY_MS]
        if partition.exhausted:
            return level_floor(ladder.lowest) - 1
        return None if partition.frontier is None else ladder.cap(partition.frontier)

    def unseen_bound() -> int | None:
        """The most a counter without any record read can total in the window."""
        caps = [unseen_cap(hour) for hour in hours]
        return None if None in caps else lanes * sum(caps)  # type: ignore[arg-type]

    def upper(candidate: _Candidate) -> int | None:
        if candidate.exact is not None:
            return candidate.exact.value
        total = 0
        for hour in hours:
            for lane in range(lanes):
                level = candidate.levels.get((hour, lane))
                cap = ladder.cap(level) if level is not None else unseen_cap(hour)
                if cap is None:
                    return None
                total += cap
        return total

    def lower(candidate: _Candidate) -> int:
        if candidate.exact is not None:
            return candidate.exact.value
        if rising:
            return 0  # the previous window may hold as much
        return sum(level_floor(level) for (hour, _), level in candidate.levels.items() if hour in full)

    def threshold() -> int:
        """The n-th largest known lower bound: the n-th value of the true top n is at least this."""
        lows = heapq.nlargest(n, (lower(candidate) for candidate in candidates.values()))
        return lows[-1] if len(lows) == n else 0

    def settled(threshold_value: int) -> bool:
        bound = unseen_bound()
        return bound is not None and bound < max(threshold_value, 1)

    def count(names: list[str]) -> Generator[TopStep, object, None]:
        nonlocal counted
        if not names:
            return
        answer = yield CountExactly(names)
        assert isinstance(answer, Mapping)
        for name in names:
            value = answer[name]
            entry = Ranked(name, value[0], value[1]) if rising else Ranked(name, value)  # type: ignore[index]
            candidates.setdefault(name, _Candidate()).exact = entry
        counted += len(names)

    limit_counted = budget.counting(n)
    while True:
        # Read until no unseen counter can reach the n-th lower bound, or there is nothing left to read.
        while not settled(threshold()):
            readable = [p for p in partitions.values() if not p.exhausted and p.pages < budget.rank_pages]
            if not readable or records >= budget.rank_records:
                break
            partition = max(readable, key=lambda p: (p.frontier is None, p.frontier or 0))
            size = min(budget.largest_page, budget.first_page * 4**partition.pages, budget.rank_records - records)
            page = yield ReadRanks(partition.name, partition.start_key, size)
            found, next_key = page  # type: ignore[misc]
            partition.pages += 1
            for record in found:
                records += 1
                partition.frontier = record.level
                if record.hour not in hour_set or not record.counter.startswith(prefix) or record.lane >= lanes:
                    continue
                candidate = candidates.setdefault(record.counter, _Candidate())
                key = (record.hour, record.lane)
                candidate.levels[key] = max(candidate.levels.get(key, -1), record.level)
            partition.start_key = next_key
            partition.exhausted = next_key is None
        # Count the likeliest n (the n largest lower bounds), then whoever could still beat or tie the n-th:
        # all of them, or, when they outnumber the room left, none (a flat prefix: the answer stays uncertified
        # rather than spend the budget on a part of them).
        likeliest = sorted(candidates, key=lambda name: (-lower(candidates[name]), name))[:n]
        first = [name for name in likeliest if candidates[name].exact is None]
        yield from count(first[: max(0, limit_counted - counted)])
        crowded = False
        while True:
            tau = threshold()
            contenders = sorted(
                name
                for name, candidate in candidates.items()
                if candidate.exact is None and ((bound := upper(candidate)) is None or bound >= max(tau, 1))
            )
            room = limit_counted - counted
            crowded = len(contenders) > room
            if not contenders or crowded:
                break
            yield from count(contenders)
        more_to_read = records < budget.rank_records and any(
            not p.exhausted and p.pages < budget.rank_pages for p in partitions.values()
        )
        if settled(threshold()) or not more_to_read:
            break  # else read on: lower levels bring the contenders' bounds down

    result = _answer(candidates, n, unseen_bound(), upper, records, counted)
    if result.exact or budget.directory_names <= 0 or len(candidates) > budget.directory_names:
        return result  # the records alone name more counters than a prefix counted whole may have
    # A prefix with few names on the window's days: count all of them, and the answer is exact.
    names = yield ListNames(budget.directory_names)
    listed, more = names  # type: ignore[misc]
    if more:
        return result
    yield from count(sorted(name for name in listed if name not in candidates or candidates[name].exact is None))
    everyone = [candidate.exact for candidate in candidates.values() if candidate.exact is not None]
    return TopResult(_ranked(everyone, n), True, None, records, counted)


def _counted_whole(prefix: str, n: int, rising: bool, budget: TopBudget) -> Generator[TopStep, object, TopResult]:
    """The top n of a prefix without rank records: every counter the directory names, counted; exact."""
    names = yield ListNames(budget.directory_names)
    listed, more = names  # type: ignore[misc]
    if more:
        raise UnrankedPrefix(
            f"prefix {prefix!r} is not ranked and names more than {budget.directory_names} counters on the "
            "window's days, too many to count whole: add it (or a prefix of it) to the ranked prefixes "
            "(context rankedPrefixes, TALLY_RANKED_PREFIXES) to rank it from then on"
        )
    entries: list[Ranked] = []
    if listed:
        answer = yield CountExactly(sorted(listed))
        assert isinstance(answer, Mapping)
        for name, value in answer.items():
            entries.append(Ranked(name, value[0], value[1]) if rising else Ranked(name, value))
    return TopResult(_ranked(entries, n), True, None, 0, len(entries))


def _ranked(entries: Iterable[Ranked | None], n: int) -> list[Ranked]:
    """The first n by value (descending), then name; values above 0 only."""
    return sorted((e for e in entries if e is not None and e.value > 0), key=lambda e: (-e.value, e.counter))[:n]


def _answer(
    candidates: Mapping[str, _Candidate], n: int, unseen: int | None, upper, records: int, counted: int  # noqa: ANN001
) -> TopResult:
    """The top n of the counted candidates, exact when nothing left out can reach the n-th value."""
    listed = _ranked((candidate.exact for candidate in candidates.values()), n)
    names = {entry.counter for entry in listed}
    left_out = [unseen]
    left_out += [upper(candidate) for name, candidate in candidates.items() if name not in names]
    bound = None if None in left_out else max(0, *(value for value in left_out if value is not None))
    if bound is None:
        return TopResult(listed, False, None, records, counted)
    floor = listed[-1].value if len(listed) == n else 1  # a short list is exact only if nothing else counted
    exact = bound < floor
    return TopResult(listed, exact, None if exact else bound, records, counted)

"""Count a table's history from a point-in-time export, exactly once together with the stream.

The stream counts only records that arrived at or after the count-from instant
(``Settings.count_from_ms``); everything the table held at that instant is in an
export taken at it. Each exported item is wrapped into the INSERT record the
stream would have delivered, stamped with the count-from instant as its arrival,
and goes through the handler's own parsing (``invocation.outcomes_of``) and
folding, so the same rules accept or reject it.

Exactly once across interruptions: the files of an export are read one after
the other in the order of their keys, and their items folded, in that order,
into segments as the stream folds records (a segment closes at
BACKFILL_SEGMENT_ITEMS buckets, across file boundaries). The whole export is
one writer of the counts table's protocol (commit.py): an item's place is
(file number, line), its segment's place that of its first item, and each
bucket item is updated once per segment under one watermark per export,
however many files touch it. Most exports fit one segment, so most buckets are
written once: the floor. A rerun rebuilds the very same segments in the same
order and finds its watermarks, so it adds nothing twice. A claim item ties
the table's count-from instant to one export, so a second export of the same
instant cannot be counted on top of the first.

Like a stream record, an exported item must be committed within a day of its
arrival (the count-from instant): late events are judged against it
(``backfill_deadline_ms``).

A rule added to a live table counts from an instant of its own; a backfill of
that rule alone (``HistoryScope`` with its name) counts its history from an
export taken at that instant, with that rule only, as a writer of its own, so
no other rule's counters are written and nothing counted before is counted again.

A calendar prefix declared on a live table with an instant of its own
(``calendarCountFrom``) has its older history counted into days and months
alone (``HistoryScope`` with ``calendar``): the export taken at that instant,
each of its items of the prefix's counters added to its days and months in
every kept zone, for the days before the closes took the prefix's days from
hours (``ladder.history_days``), and marked there as a late record marks them.
No minute or hour is written and no other counter: the hours already hold
every record, and the closes sum them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tally.core.buckets import iso_second
from tally.core.commit import CommitResult, Writer
from tally.core.records import CounterEvent, Outcome, Reason
from tally.core.rules import ARRIVAL, MODIFY, REMOVE, RulesError
from tally.core.ladder import LATE_PREFIX, HistoryLadder, Ladder, Run
from tally.core.segments import Segment, SegmentFolder
from tally.core.settings import STREAM_RETENTION_MS, Settings
from tally.invocation import outcomes_of

CHUNK_ITEMS = 1000  # items parsed at a time; segments span chunks and files
# An item's place in its export: (file number, line), one number that orders them.
LINE_BITS = 40
# A backfill keeps its open segment in memory, not in a window state, so it lets one grow
# to this many buckets (a few dozen MB) before committing it: an export lists items in
# hash order, not time order, and a bigger segment writes each bucket fewer times.
BACKFILL_SEGMENT_ITEMS = 200_000
BACKFILL_STATE_BUDGET_BYTES = 10**9

Commit = Callable[[Segment, Writer], CommitResult]


class ScopeRefused(ValueError):
    """A backfill asked of history it cannot count exactly once; the message says why in one line."""


@dataclass(frozen=True)
class HistoryScope:
    """What one backfill counts: the whole table as it was at the deployment's countFrom (``rules`` empty), or
    the history of some rules added later, as the table was at their own countFrom.

    A rule backfill is a writer of its own (``writer``): an export counted for
    the table, or for other rules, never hides its watermarks. It writes only
    its rules' counters and none of the rejections' (``folded``): the table's
    rejections were counted when each item arrived, and again here would be twice.
    """

    count_from_ms: int
    rules: tuple[str, ...] = ()
    # Calendar prefixes declared later whose older history alone is counted, into days and months (none: not so).
    calendar: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, settings: Settings, rules: Sequence[str] = (), count_from_ms: int | None = None, calendar: Sequence[str] = ()
    ) -> HistoryScope:
        """The scope of ``rules`` (none: the whole table), or of ``calendar`` prefixes, checked against the settings;
        ScopeRefused says why not."""
        if calendar:
            if rules:
                raise ScopeRefused("--calendar and --rules count different histories: back them up one at a time")
            return cls._of_calendar(settings, tuple(dict.fromkeys(calendar)), count_from_ms)
        if not rules:
            instant = count_from_ms if count_from_ms is not None else settings.count_from_ms
            if instant is None:
                raise ScopeRefused("give --count-from (or set TALLY_COUNT_FROM): the instant the stream counts from")
            return cls(instant)
        if settings.rules is None:
            raise ScopeRefused("--rules names rules of TALLY_RULES, and none are set: the classic rule counts from "
                               "the deployment's countFrom")
        try:
            named = settings.counter_rules.named(rules)
        except RulesError as error:
            raise ScopeRefused(f"--rules: {error}") from None
        instants: dict[int, str] = {}
        for rule in named.rules:
            if rule.count_from_ms is None or rule.count_from_ms == settings.count_from_ms:
                raise ScopeRefused(
                    f"{rule.label} has no countFrom of its own: its history is the table's, counted by the backfill "
                    "of the deployment's countFrom (without --rules)"
                )
            instants.setdefault(rule.count_from_ms, str(rule.name))
        if len(instants) > 1:
            (first, one), (second, other) = sorted(instants.items())[:2]
            raise ScopeRefused(
                f"rules {one!r} and {other!r} count from different instants ({iso_second(first)}, {iso_second(second)}): "
                "back them up one countFrom at a time, each from an export taken at it"
            )
        [instant] = instants
        _check_instant(count_from_ms, instant, "rules")
        return cls(instant, tuple(rule.name for rule in named.rules if rule.name))

    @classmethod
    def _of_calendar(cls, settings: Settings, prefixes: tuple[str, ...], count_from_ms: int | None) -> HistoryScope:
        declared = settings.calendar_prefixes
        if not declared:
            raise ScopeRefused("--calendar names prefixes of calendarPrefixes, and none are declared (TALLY_CALENDAR_PREFIXES)")
        instants: dict[int, str] = {}
        for prefix in prefixes:
            if prefix not in declared:
                raise ScopeRefused(
                    f"--calendar: {prefix!r} is not a calendar prefix (calendarPrefixes: {', '.join(map(repr, declared))})"
                )
            instant = settings.calendar_from(prefix)
            if instant is None or instant == settings.count_from_ms:
                raise ScopeRefused(
                    f"calendar prefix {prefix!r} has no countFrom of its own (calendarCountFrom): its days' history is "
                    "the table's, counted by the backfill of the deployment's countFrom (without --calendar)"
                )
            other = settings.overlapping_prefix(prefix)
            if other is not None:
                raise ScopeRefused(
                    f"calendar prefixes {prefix!r} and {other!r} overlap: a counter of both climbs to its days from the "
                    "earlier instant, so the history of one could not be counted alone"
                )
            instants.setdefault(instant, prefix)
        if len(instants) > 1:
            (first, one), (second, other) = sorted(instants.items())[:2]
            raise ScopeRefused(
                f"calendar prefixes {one!r} and {other!r} count from different instants ({iso_second(first)}, "
                f"{iso_second(second)}): back them up one countFrom at a time, each from an export taken at it"
            )
        [instant] = instants
        _check_instant(count_from_ms, instant, "calendar prefixes")
        return cls(instant, calendar=prefixes)
    def settings_for(self, settings: Settings) -> Settings:
        """The settings items are judged with: the scope's rules alone, arriving at its instant."""
        if not self.rules:  # every rule, for a calendar prefix's history too: folded keeps its counters alone
            return dataclasses.replace(settings, count_from_ms=self.count_from_ms)
        return dataclasses.replace(settings, rules=settings.counter_rules.named(self.rules), count_from_ms=self.count_from_ms)

    def writer(self, export_arn: str) -> Writer:
        return Writer.of_export(export_arn, self.rules, self.calendar)

    @property
    def key(self) -> str:
        """A short name for the scope, for work folders and execution names: "table", "rules-<digest>" or
        "calendar-<digest>"."""
        if self.calendar:
            return "calendar-" + rules_digest(self.calendar)
        return "rules-" + rules_digest(self.rules) if self.rules else "table"

    @property
    def text(self) -> str:
        """The scope as the in-account stages pass it along (their ``rules`` field): "" for the table, the rules'
        names, or ``calendar:`` and the prefixes, comma-separated (``parse``)."""
        if self.calendar:
            return CALENDAR_SCOPE + ",".join(self.calendar)
        return ",".join(self.rules)

    @classmethod
    def parse(cls, settings: Settings, text: str) -> HistoryScope:
        """The scope ``text`` names, checked against the settings (ScopeRefused says why not)."""
        if text.startswith(CALENDAR_SCOPE):
            return cls.of(settings, calendar=tuple(filter(None, text[len(CALENDAR_SCOPE):].split(","))))
        return cls.of(settings, tuple(filter(None, text.split(","))))

    def ladder(self, settings: Settings, runs: Mapping[str, Mapping[str, Run]] | None = None) -> Ladder | None:
        """What an exported record climbs to (``settings``: the scope's): for the table and for rules, its days and
        months directly (every record of an export is late, core/ladder.py); for calendar prefixes, those days
        and months alone, within ``runs`` (each prefix's, per kept zone: ``ladder.history_days``)."""
        if self.calendar:
            return HistoryLadder(settings, runs or {})
        return Ladder.of(settings, every_late=True)

    def claim_expires_s(self, settings: Settings) -> int:
        """When the scope's claim may go (epoch seconds): once no rerun can come (the hour retention after its
        instant), or, for a calendar prefix's history, once none of the days it wrote is kept."""
        return (self.count_from_ms + (settings.day_retention_ms if self.calendar else settings.hour_retention_ms)) // 1000

    def refusal_at(self, now_ms: int) -> str | None:
        """Why the scope cannot be counted at ``now_ms``, or None: an export shows the table only at an instant
        past, and the history must be counted within a day of it, as a stream record is of its arrival (a
        calendar prefix's history writes no minute or hour: any time after, as long as an export can be taken
        at the instant, the table's point-in-time recovery window)."""
        instant = iso_second(self.count_from_ms)
        if now_ms < self.count_from_ms:
            return (
                f"{self.described} cannot be counted before {instant}: an export shows the table only at an instant "
                f"that has passed; run the backfill after {instant}"
            )
        if not self.calendar and now_ms > backfill_deadline_ms(self.count_from_ms):
            return (
                f"count-from {instant} is more than a day ago: a backfill must run within a day of it, as a stream "
                "record is committed within a day of its arrival; the stream has counted since, so only a new "
                "counts table (a new stack, with a new countFrom) can count this table's history"
            )
        return None

    def export_refusal(self, export_arn: str, export_time_ms: int | None) -> str | None:
        """Why an export cannot be counted for the scope, or None: it must show the table at the scope's instant."""
        if export_time_ms is None or export_time_ms == self.count_from_ms:
            return None
        return (
            f"export {export_arn} shows the table at {iso_second(export_time_ms)}, but the stream counts "
            f"from {iso_second(self.count_from_ms)}: items in between would be counted twice or never"
        )

    @property
    def described(self) -> str:
        """How messages name what is counted."""
        if self.calendar:
            many = "es" if len(self.calendar) > 1 else ""
            return f"the days' history of calendar prefix{many} {', '.join(self.calendar)} at {iso_second(self.count_from_ms)}"
        if not self.rules:
            return f"the table at {iso_second(self.count_from_ms)}"
        return f"the history of rule{'s' if len(self.rules) > 1 else ''} {', '.join(self.rules)} at {iso_second(self.count_from_ms)}"

    def reported(self, outcomes: list[list[Outcome]]) -> list[list[Outcome]]:
        """What the summary tells of: every outcome of the scope's rules; for calendar prefixes, only what went
        into their days (the other counters were counted before, and are not written)."""
        return self.folded(outcomes) if self.calendar else outcomes

    def folded(self, outcomes: list[list[Outcome]]) -> list[list[Outcome]]:
        """What goes into the buckets: everything for the table; a rule backfill's counted events alone; a calendar
        backfill's counted events of its prefixes' counters alone."""
        if self.calendar:
            return [[outcome for outcome in item if type(outcome) is CounterEvent and outcome.counter.startswith(self.calendar)]
                    for item in outcomes]
        if not self.rules:
            return outcomes
        return [[outcome for outcome in item if type(outcome) is CounterEvent] for item in outcomes]


# How the in-account stages' ``rules`` field names a calendar backfill: ``calendar:orders/,refunds/``.
CALENDAR_SCOPE = "calendar:"


def _check_instant(given_ms: int | None, instant_ms: int, what: str) -> None:
    """ScopeRefused unless ``given_ms`` (--count-from, if given) is the countFrom of the rules or prefixes named."""
    if given_ms is not None and given_ms != instant_ms:
        raise ScopeRefused(
            f"--count-from {iso_second(given_ms)} is not the countFrom of the {what} named "
            f"({iso_second(instant_ms)}): their history is the table as it was at their own instant"
        )


def nothing_older(scope: HistoryScope) -> str:
    """Why a calendar backfill has no day to write, in one line."""
    return (
        f"{scope.described}: no day to count, in any kept zone: the days before the first one the closes took from "
        "hours ended less than a day before the instant, or lie past dayRetentionDays"
    )


def rules_digest(rules: Sequence[str]) -> str:
    """12 hex digits naming a set of rules, whatever their order."""
    return hashlib.sha256(",".join(sorted(rules)).encode()).hexdigest()[:12]


def unseen_history(settings: Settings) -> list[str]:
    """What an export cannot show the rules of ``settings`` (a scope's), one line per rule that misses some:
    an export holds each item once, as it was at the instant, never its changes or deletions."""
    lines = []
    for rule in settings.counter_rules.rules:
        if rule.on == frozenset({REMOVE}):
            lines.append(f"{rule.label} counts deletions: an export holds no deletion, so its counters hold none before the instant")
        elif REMOVE in rule.on:
            lines.append(f"{rule.label} counts deletions too: those before the instant are not in the export")
        if rule.becomes:
            lines.append(f"{rule.label} counts transitions: an item in that state at the instant counts once, at its time; "
                         "earlier transitions are not in the export")
        elif MODIFY in rule.on:
            lines.append(f"{rule.label} counts changes: an export holds each item once, as it was at the instant")
        if rule.time == ARRIVAL:
            lines.append(f"{rule.label} counts at arrival: its history counts at the instant itself")
    return lines


def backfill_deadline_ms(count_from_ms: int) -> int:
    """The last instant a backfill of ``count_from_ms`` may start or resume, as a retried record may commit."""
    return count_from_ms + STREAM_RETENTION_MS


def export_record(image: Mapping[str, Any], position: int, arrival_ms: int) -> dict[str, Any]:
    """The INSERT record the stream would have delivered for an exported item, arriving at ``arrival_ms``.

    The item's place in the export (``place``) stands in for the sequence
    number: unique and ordered within the export, which names the writer.
    """
    return {
        "eventName": "INSERT",
        "eventSource": "aws:dynamodb",
        "dynamodb": {
            "ApproximateCreationDateTime": arrival_ms // 1000,
            "SequenceNumber": str(position),
            "NewImage": image,
            "StreamViewType": "NEW_IMAGE",
        },
    }


def place(file_index: int, line: int) -> int:
    """An exported item's place: its file's number in key order, then its line."""
    if not 0 <= line < 1 << LINE_BITS:
        raise ValueError(f"line {line} of an export file is out of range")
    return file_index << LINE_BITS | line


def export_outcomes(
    images: Iterable[Mapping[str, Any]], first_position: int, arrival_ms: int, settings: Settings
) -> list[list[Outcome]]:
    """Consecutive exported items -> what each counts as under every rule, by the handler's own parsing."""
    records = [export_record(image, first_position + offset, arrival_ms) for offset, image in enumerate(images)]
    return outcomes_of(records, settings)


def write_units(segment: Segment) -> int:
    """WCU one segment's commit costs: one plain update per bucket item (items stay under 1 KB). A late mark
    (``#late#<counter>``) is written by its item's own update, not by one of its own."""
    return sum(1 for counter, _ in segment.deltas if not counter.startswith(LATE_PREFIX))


class WriteRateLimit:
    """Keeps write units per second at or below ``per_second``, averaged from the start (a second of burst)."""

    def __init__(
        self,
        per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if per_second <= 0:
            raise ValueError(f"write rate must be positive, got {per_second}")
        self.per_second = per_second
        self._clock = clock
        self._sleep = sleep
        self._start: float | None = None
        self.spent = 0
        self.waited = 0.0

    def spend(self, units: int) -> None:
        """Wait, if need be, until ``units`` more may be written."""
        now = self._clock()
        if self._start is None:
            self._start = now
        allowed_at = self._start + (self.spent + units) / self.per_second - 1.0
        if allowed_at > now:
            self._sleep(allowed_at - now)
            self.waited += allowed_at - now
        self.spent += units


@dataclass
class BackfillSummary:
    """What a backfill read, counted and wrote."""

    items: int = 0
    counted: Counter[str] = field(default_factory=Counter)  # per counter (one item may count in several)
    rejected: Counter[Reason] = field(default_factory=Counter)
    rejected_by_rule: Counter[str] = field(default_factory=Counter)
    skipped: Counter[Reason] = field(default_factory=Counter)
    files: int = 0
    bucket_updates: int = 0
    updates_already_applied: int = 0  # applied by an earlier, interrupted run
    commit_retries: int = 0
    write_units: int = 0

    @property
    def counted_total(self) -> int:
        return sum(self.counted.values())

    def add(self, records: Iterable[list[Outcome]]) -> None:
        """One entry per item: the outcomes of every rule that matched it."""
        for outcomes in records:
            self.items += 1
            for outcome in outcomes:
                if isinstance(outcome, CounterEvent):
                    self.counted[outcome.counter] += 1
                elif outcome.reason.is_rejection:
                    self.rejected[outcome.reason] += 1
                    if outcome.rule is not None:
                        self.rejected_by_rule[outcome.rule] += 1
                else:
                    self.skipped[outcome.reason] += 1

    def add_commit(self, result: CommitResult, units: int) -> None:
        self.bucket_updates += result.applied
        self.updates_already_applied += result.already_applied
        self.commit_retries += result.retries
        self.write_units += units


def chunks(lines: Iterable[Mapping[str, Any]], size: int | None = None) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
    """(first position, images) for consecutive runs of ``size`` (default CHUNK_ITEMS) items."""
    size = size or CHUNK_ITEMS
    chunk: list[Mapping[str, Any]] = []
    first = 0
    for position, image in enumerate(lines):
        if not chunk:
            first = position
        chunk.append(image)
        if len(chunk) == size:
            yield first, chunk
            chunk = []
    if chunk:
        yield first, chunk


def backfill_export(
    export_arn: str,
    files: Iterable[tuple[str, Iterable[Mapping[str, Any]]]],
    *,
    scope: HistoryScope,
    settings: Settings,
    commit: Commit,
    limit: WriteRateLimit,
    summary: BackfillSummary,
    on_items: Callable[[int], None] = lambda n: None,
    runs: Mapping[str, Mapping[str, Run]] | None = None,
) -> None:
    """Count an export's items: one fold over all its files, each segment committed as it closes.

    ``files`` are (key, items) in the order of their keys, the only order a
    rerun can reproduce. A segment closes at BACKFILL_SEGMENT_ITEMS buckets,
    and each bucket is written once per segment however many items fall in
    it; the fold is deterministic, so a rerun rebuilds the same segments and
    skips what it applied before. ``settings`` are the scope's
    (``HistoryScope.settings_for``); ``runs`` the days a calendar backfill writes (``HistoryScope.ladder``).
    """
    writer = scope.writer(export_arn)
    # An export is read in one order only, and its segments are too large to hold their records twice.
    # Every record of an export climbs to its days and months directly: it may be counted at any time, a
    # period's close included (core/ladder.py).
    folder = SegmentFolder(
        max_items=BACKFILL_SEGMENT_ITEMS, state_budget=BACKFILL_STATE_BUDGET_BYTES, hold_records=False,
        ladder=scope.ladder(settings, runs),
    )

    def commit_segment(segment: Segment) -> None:
        units = write_units(segment)
        limit.spend(units)
        summary.add_commit(commit(segment, writer), units)

    previous_key = None
    for file_index, (key, images) in enumerate(files):
        if previous_key is not None and key <= previous_key:
            raise ValueError(f"export files must come in the order of their keys: {key!r} after {previous_key!r}")
        previous_key = key
        for first, chunk in chunks(images):
            outcomes = export_outcomes(chunk, place(file_index, first), scope.count_from_ms, settings)
            for segment in folder.fold(scope.folded(outcomes)):
                commit_segment(segment)
            summary.add(scope.reported(outcomes))
            on_items(len(chunk))
        summary.files += 1
    last = folder.close()
    if last is not None:
        commit_segment(last)

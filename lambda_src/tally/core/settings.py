"""Settings shared by the handler, the query module and the scripts.

Every setting has a documented default and may be overridden by an environment
variable (the Lambda function's environment, set by the CDK stack from context).
A bad value fails fast with the variable's name, at cold start, rather than
miscounting later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tally.core.instants import whole_second_ms
from tally.core.rules import ENV_RULES, Rules, RulesError, classic_rules, parse_rules
from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS

# Lambda keeps a DynamoDB stream record for 24 hours; a retried invocation can
# arrive that much later than the record did.
STREAM_RETENTION_MS = DAY_MS

ENV_COUNTS_TABLE = "COUNTS_TABLE"
ENV_EVENTS_TABLE = "EVENTS_TABLE"
ENV_COUNTER_ATTRIBUTE = "TALLY_COUNTER_ATTRIBUTE"
ENV_TIME_ATTRIBUTE = "TALLY_TIME_ATTRIBUTE"
ENV_VALUE_ATTRIBUTE = "TALLY_VALUE_ATTRIBUTE"
ENV_MINUTE_RETENTION_HOURS = "TALLY_MINUTE_RETENTION_HOURS"
ENV_HOUR_RETENTION_DAYS = "TALLY_HOUR_RETENTION_DAYS"
ENV_MAX_CLOCK_SKEW_SECONDS = "TALLY_MAX_CLOCK_SKEW_SECONDS"
ENV_COUNT_FROM = "TALLY_COUNT_FROM"
ENV_BUCKET_LANES = "TALLY_BUCKET_LANES"
ENV_RANKED_PREFIXES = "TALLY_RANKED_PREFIXES"
ENV_CALENDAR_PREFIXES = "TALLY_CALENDAR_PREFIXES"
ENV_CALENDAR_ZONES = "TALLY_CALENDAR_ZONES"
ENV_CALENDAR_COUNT_FROM = "TALLY_CALENDAR_COUNT_FROM"
ENV_DAY_RETENTION_DAYS = "TALLY_DAY_RETENTION_DAYS"
ENV_MONTH_RETENTION_MONTHS = "TALLY_MONTH_RETENTION_MONTHS"

# A query reads every lane of every bucket it needs: the batch plan's keys grow with them.
MAX_BUCKET_LANES = 32
# Every hour update of a commit is checked against each of them.
MAX_RANKED_PREFIXES = 20
# Every counted record's counter is checked against each of them.
MAX_CALENDAR_PREFIXES = 20
# Every late record of a kept counter writes its day and month in each kept zone.
MAX_CALENDAR_ZONES = 4
# Days and months are closed from hours two days after they end (core/ladder.py): hours must outlive that,
# with days to spare for a close job that was stopped.
MIN_HOUR_RETENTION_FOR_CALENDAR_MS = 7 * DAY_MS


# The variable each field is read from: an error names what the operator set, not a field.
ENV_NAMES = {
    "counter_attribute": ENV_COUNTER_ATTRIBUTE,
    "time_attribute": ENV_TIME_ATTRIBUTE,
    "value_attribute": ENV_VALUE_ATTRIBUTE,
    "minute_retention_ms": ENV_MINUTE_RETENTION_HOURS,
    "hour_retention_ms": ENV_HOUR_RETENTION_DAYS,
    "max_clock_skew_ms": ENV_MAX_CLOCK_SKEW_SECONDS,
    "bucket_lanes": ENV_BUCKET_LANES,
    "count_from_ms": ENV_COUNT_FROM,
    "ranked_prefixes": ENV_RANKED_PREFIXES,
    "calendar_prefixes": ENV_CALENDAR_PREFIXES,
    "calendar_zones": ENV_CALENDAR_ZONES,
    "calendar_count_from": ENV_CALENDAR_COUNT_FROM,
    "day_retention_ms": ENV_DAY_RETENTION_DAYS,
    "month_retention_months": ENV_MONTH_RETENTION_MONTHS,
}


class SettingsError(ValueError):
    """A setting has a value tally cannot work with; ``fields`` are the Settings fields at fault."""

    def __init__(self, reason: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fields = fields

    def naming(self, shown: Mapping[str, str]) -> SettingsError:
        """The same error led by how the operator spelled each field at fault (``shown``: field -> text)."""
        names = [shown[field] for field in self.fields if field in shown]
        if not names:
            return self
        return SettingsError(f"{', '.join(names)}: {self.reason}", self.fields)


@dataclass(frozen=True)
class Settings:
    """Attribute names, counter rules, retentions, the clock-skew allowance and the bucket lanes.

    ``rules`` None means the classic rule: the counter attribute names the counter.

    Counts stay exact with any retentions (see ``buckets.counted_buckets``);
    the minute retention must still cover the default window, 24 h ending now,
    or the default query would be refused for want of its oldest minutes.

    bucket_lanes > 1 splits every bucket into that many items: each stream
    shard adds to one of them (chosen by the shard), and reads sum them all.
    Every shard commits its window at the same instant and DynamoDB runs one
    transaction at a time on an item, so a bucket that hundreds of shards
    write is committed lane by lane in parallel instead of shard after shard.
    It may be raised at any time, never lowered while lanes written before
    can still be read (the hour retention).

    ``ranked_prefixes``: the counters commits keep rank records for, those
    starting with one of them ("" ranks every counter), so that top lists of
    these prefixes (and of longer ones) are certified from the records. None
    by default: rank records are writes paid all the time, so a table pays
    for them only where it asks for top lists (``core/ranking.py``).

    ``calendar_prefixes``: the counters that keep day and month buckets, in UTC
    and in each of ``calendar_zones`` (IANA names whose days begin on whole UTC
    hours), for ``day_retention_ms`` and ``month_retention_months``
    (``core/ladder.py``). None by default: a table that asks for none writes
    and stores nothing more.

    ``calendar_count_from``: calendar prefixes declared on a live table, each
    with an instant of its own (epoch ms, whole seconds; prefix, instant
    pairs): a record of their counters climbs to its days and months directly
    (a late one, ``core/ladder.py``) only if it arrived at or after it, so the
    prefix's older history is the table as it was at that instant, counted into
    days and months alone from an export taken at it (``backfill.py
    --calendar``). A prefix not named here climbs from the deployment's countFrom.
    """

    counts_table: str = "tally-counts"
    events_table: str = "tally-events"
    counter_attribute: str = "counter"
    time_attribute: str = "ts"
    value_attribute: str = "value"
    minute_retention_ms: int = 48 * HOUR_MS
    hour_retention_ms: int = 90 * DAY_MS
    max_clock_skew_ms: int = 5 * MINUTE_MS
    # Records that arrived before this instant (epoch ms, whole seconds) are skipped:
    # a backfill counts the table as it was then. None counts every record.
    count_from_ms: int | None = None
    bucket_lanes: int = 1
    rules: Rules | None = None
    ranked_prefixes: tuple[str, ...] = ()
    calendar_prefixes: tuple[str, ...] = ()
    calendar_zones: tuple[str, ...] = ()
    calendar_count_from: tuple[tuple[str, int], ...] = ()
    # A billing year and its same day last year, and seven years of months (invoices' usual keeping).
    day_retention_ms: int = 400 * DAY_MS
    month_retention_months: int = 84
    counter_rules: Rules = field(init=False, repr=False, compare=False)
    image_attributes: tuple[str, ...] = field(init=False, repr=False, compare=False)  # what a record's image needs

    def __post_init__(self) -> None:
        attributes = ("counter_attribute", "time_attribute", "value_attribute")
        for name in attributes:
            if not getattr(self, name):
                raise SettingsError("attribute name must not be empty", (name,))
        if len({self.counter_attribute, self.time_attribute, self.value_attribute}) != 3:
            raise SettingsError("counter, time and value attributes must have distinct names", attributes)
        if self.minute_retention_ms < DAY_MS:
            raise SettingsError(
                "minute retention must be at least 24 hours: the default window, 24 h ending now, "
                "reads minutes that old",
                ("minute_retention_ms",),
            )
        if self.hour_retention_ms < self.minute_retention_ms:
            raise SettingsError(
                "hour retention must be at least the minute retention", ("hour_retention_ms", "minute_retention_ms")
            )
        if not 0 <= self.max_clock_skew_ms <= HOUR_MS:
            raise SettingsError("max clock skew must be between 0 and 3600 seconds", ("max_clock_skew_ms",))
        if self.count_from_ms is not None and (self.count_from_ms < 0 or self.count_from_ms % 1000):
            raise SettingsError(
                "count-from must be a non-negative whole number of seconds since the epoch", ("count_from_ms",)
            )
        if not 1 <= self.bucket_lanes <= MAX_BUCKET_LANES:
            raise SettingsError(f"bucket lanes must be between 1 and {MAX_BUCKET_LANES}", ("bucket_lanes",))
        if not isinstance(self.ranked_prefixes, tuple) or not all(isinstance(p, str) for p in self.ranked_prefixes):
            raise SettingsError("ranked prefixes must be a list of strings", ("ranked_prefixes",))
        if len(self.ranked_prefixes) > MAX_RANKED_PREFIXES:
            raise SettingsError(f"at most {MAX_RANKED_PREFIXES} ranked prefixes", ("ranked_prefixes",))
        if any(prefix.startswith("#") for prefix in self.ranked_prefixes):
            raise SettingsError("ranked prefixes must not start with '#': tally's own counters are never ranked",
                                ("ranked_prefixes",))
        self._check_calendar()
        if self.count_from_ms is not None and self.rules is not None:
            for rule in self.rules.rules:
                if rule.count_from_ms is not None and rule.count_from_ms < self.count_from_ms:
                    raise SettingsError(
                        f"{rule.label} counts from before the deployment's countFrom: the table's own backfill "
                        "counts its history up to that instant; drop the rule's countFrom or move it later",
                        ("count_from_ms",),
                    )
        # Built once: every record goes through these rules.
        object.__setattr__(self, "counter_rules", self.rules or classic_rules(self.counter_attribute))
        object.__setattr__(self, "image_attributes", (*self.counter_rules.attributes, self.time_attribute))

    def _check_calendar(self) -> None:
        prefixes = self.calendar_prefixes
        if not isinstance(prefixes, tuple) or not all(isinstance(p, str) for p in prefixes):
            raise SettingsError("calendar prefixes must be a list of strings", ("calendar_prefixes",))
        if len(prefixes) > MAX_CALENDAR_PREFIXES:
            raise SettingsError(f"at most {MAX_CALENDAR_PREFIXES} calendar prefixes", ("calendar_prefixes",))
        if any(prefix.startswith("#") for prefix in prefixes):
            raise SettingsError("calendar prefixes must not start with '#': tally's own counters keep no days",
                                ("calendar_prefixes",))
        zones = self.calendar_zones
        if not isinstance(zones, tuple) or not all(isinstance(z, str) for z in zones):
            raise SettingsError("calendar zones must be a list of IANA time zone names", ("calendar_zones",))
        if len(zones) > MAX_CALENDAR_ZONES:
            raise SettingsError(f"at most {MAX_CALENDAR_ZONES} calendar zones besides UTC", ("calendar_zones",))
        if zones and not prefixes:
            raise SettingsError("calendar zones need calendar prefixes: name the counters that keep days and months",
                                ("calendar_zones", "calendar_prefixes"))
        for zone in zones:
            reason = zone_refusal(zone)
            if reason:
                raise SettingsError(reason, ("calendar_zones",))
        if prefixes and self.hour_retention_ms < MIN_HOUR_RETENTION_FOR_CALENDAR_MS:
            raise SettingsError(
                "hour retention must be at least 7 days where counters keep days and months: they are closed "
                "from hours two days after they end", ("hour_retention_ms", "calendar_prefixes"))
        if self.day_retention_ms < self.hour_retention_ms:
            raise SettingsError("day retention must be at least the hour retention: reads take days where hours end",
                                ("day_retention_ms", "hour_retention_ms"))
        if self.month_retention_months * 31 * DAY_MS < self.day_retention_ms:
            raise SettingsError("month retention must cover the day retention", ("month_retention_months", "day_retention_ms"))
        own = self.calendar_count_from
        if not isinstance(own, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) and type(pair[1]) is int for pair in own
        ):
            raise SettingsError("calendar count-from must map calendar prefixes to instants", ("calendar_count_from",))
        for prefix, instant in own:
            if prefix not in prefixes:
                raise SettingsError(f"{prefix!r} is not one of calendarPrefixes: only a declared prefix counts from an "
                                    "instant of its own", ("calendar_count_from",))
            if instant < 0 or instant % 1000:
                raise SettingsError(f"{prefix!r}: count-from must be a whole number of seconds since the epoch",
                                    ("calendar_count_from",))
            if self.count_from_ms is not None and instant < self.count_from_ms:
                raise SettingsError(
                    f"calendar prefix {prefix!r} counts from before the deployment's countFrom: the table's own "
                    "backfill counts its history up to that instant; drop the prefix's countFrom or move it later",
                    ("calendar_count_from",))

    @property
    def kept_zones(self) -> tuple[str, ...]:
        """The zones whose days and months are kept: UTC and the declared ones; none without calendar prefixes."""
        if not self.calendar_prefixes:
            return ()
        return ("UTC", *(zone for zone in self.calendar_zones if zone != "UTC"))

    def keeps_calendar(self, counter: str) -> bool:
        """Whether ``counter`` keeps day and month buckets."""
        return bool(self.calendar_prefixes) and counter.startswith(self.calendar_prefixes)

    def calendar_from(self, prefix: str) -> int | None:
        """The instant calendar prefix ``prefix`` counts from, if it has one of its own (``calendar_count_from``)."""
        return dict(self.calendar_count_from).get(prefix)

    def climbs(self, counter: str, arrival_ms: int) -> bool:
        """Whether a record of ``counter`` arriving at ``arrival_ms`` may add to its days and months directly: its
        counter keeps them under a prefix that counts from no later than the record's arrival."""
        if not self.calendar_count_from:
            return self.keeps_calendar(counter)
        own = dict(self.calendar_count_from)
        return any(counter.startswith(prefix) and own.get(prefix, arrival_ms) <= arrival_ms for prefix in self.calendar_prefixes)

    def overlapping_prefix(self, prefix: str) -> str | None:
        """Another calendar prefix that some counter of ``prefix`` also starts with (one starts the other), or None."""
        return next((other for other in self.calendar_prefixes
                     if other != prefix and (prefix.startswith(other) or other.startswith(prefix))), None)

    def counting_environment(self) -> dict[str, str]:
        """The variables that decide what a record counts as and where, as ``from_env`` reads them.

        Table names are left out: they say where, not how. What the pipeline
        publishes (``CountsTable.publish_settings``, dynamo/settings.py) so that others can
        check they agree with it.
        """
        environment = {
            ENV_COUNTER_ATTRIBUTE: self.counter_attribute,
            ENV_TIME_ATTRIBUTE: self.time_attribute,
            ENV_VALUE_ATTRIBUTE: self.value_attribute,
            ENV_MINUTE_RETENTION_HOURS: str(self.minute_retention_ms // HOUR_MS),
            ENV_HOUR_RETENTION_DAYS: str(self.hour_retention_ms // DAY_MS),
            ENV_MAX_CLOCK_SKEW_SECONDS: str(self.max_clock_skew_ms // 1000),
            ENV_BUCKET_LANES: str(self.bucket_lanes),
        }
        if self.count_from_ms is not None:
            environment[ENV_COUNT_FROM] = str(self.count_from_ms // 1000)
        if self.rules is not None:
            environment[ENV_RULES] = self.rules.text
        if self.ranked_prefixes:
            environment[ENV_RANKED_PREFIXES] = json.dumps(list(self.ranked_prefixes))
        if self.calendar_prefixes:
            environment[ENV_CALENDAR_PREFIXES] = json.dumps(list(self.calendar_prefixes))
            environment[ENV_CALENDAR_ZONES] = json.dumps(list(self.calendar_zones))
            environment[ENV_DAY_RETENTION_DAYS] = str(self.day_retention_ms // DAY_MS)
            environment[ENV_MONTH_RETENTION_MONTHS] = str(self.month_retention_months)
        if self.calendar_count_from:
            environment[ENV_CALENDAR_COUNT_FROM] = json.dumps({prefix: ms // 1000 for prefix, ms in self.calendar_count_from})
        return environment

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        defaults = cls()
        try:
            return cls._read_env(env, defaults)
        except SettingsError as error:
            set_here = {field: f"{name}={env[name]!r}" for field, name in ENV_NAMES.items() if name in env}
            raise error.naming(set_here) from None

    @classmethod
    def _read_env(cls, env: Mapping[str, str], defaults: Settings) -> Settings:
        return cls(
            counts_table=env.get(ENV_COUNTS_TABLE, defaults.counts_table),
            events_table=env.get(ENV_EVENTS_TABLE, defaults.events_table),
            counter_attribute=env.get(ENV_COUNTER_ATTRIBUTE, defaults.counter_attribute),
            time_attribute=env.get(ENV_TIME_ATTRIBUTE, defaults.time_attribute),
            value_attribute=env.get(ENV_VALUE_ATTRIBUTE, defaults.value_attribute),
            minute_retention_ms=_whole(env, ENV_MINUTE_RETENTION_HOURS, defaults.minute_retention_ms, HOUR_MS),
            hour_retention_ms=_whole(env, ENV_HOUR_RETENTION_DAYS, defaults.hour_retention_ms, DAY_MS),
            max_clock_skew_ms=_whole(env, ENV_MAX_CLOCK_SKEW_SECONDS, defaults.max_clock_skew_ms, 1000),
            count_from_ms=_count_from(env.get(ENV_COUNT_FROM)),
            bucket_lanes=_whole(env, ENV_BUCKET_LANES, defaults.bucket_lanes, 1),
            rules=_rules(env),
            ranked_prefixes=_string_list(env, ENV_RANKED_PREFIXES, '["views/"]'),
            calendar_prefixes=_string_list(env, ENV_CALENDAR_PREFIXES, '["orders/"]'),
            calendar_zones=_string_list(env, ENV_CALENDAR_ZONES, '["America/New_York"]'),
            calendar_count_from=_instants(env.get(ENV_CALENDAR_COUNT_FROM)),
            day_retention_ms=_whole(env, ENV_DAY_RETENTION_DAYS, defaults.day_retention_ms, DAY_MS),
            month_retention_months=_whole(env, ENV_MONTH_RETENTION_MONTHS, defaults.month_retention_months, 1),
        )


def _whole(env: Mapping[str, str], name: str, default_ms: int, unit_ms: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default_ms
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise SettingsError(f"{name} must not be negative, got {value}")
    return value * unit_ms


def _count_from(raw: str | None) -> int | None:
    """TALLY_COUNT_FROM: epoch seconds, or an ISO-8601 instant with an offset and whole seconds."""
    if raw is None or raw.strip() == "":
        return None
    try:
        return parse_count_from(raw)
    except ValueError as error:
        raise SettingsError(f"{ENV_COUNT_FROM}: {error}") from None


def parse_count_from(raw: str | int) -> int:
    """A count-from instant as epoch ms (``instants.whole_second_ms``); ValueError unless it names a whole second."""
    return whole_second_ms(str(raw))


def _instants(raw: str | None) -> tuple[tuple[str, int], ...]:
    """TALLY_CALENDAR_COUNT_FROM: a JSON object of calendar prefixes and their instants (epoch seconds, or ISO-8601
    with an offset), e.g. {"refunds/": "2026-12-01T00:00:00Z"}; unset or empty is none."""
    if raw is None or not raw.strip():
        return ()
    found = _loaded(raw)
    if not isinstance(found, dict):
        raise SettingsError(f'{ENV_CALENDAR_COUNT_FROM} must be a JSON object like {{"refunds/": "2026-12-01T00:00:00Z"}}, '
                            f"got {raw!r}")
    return calendar_instants(found)


def calendar_instants(found: Mapping[str, object]) -> tuple[tuple[str, int], ...]:
    """Calendar prefixes and their instants (epoch seconds or ISO-8601 with an offset) as ``calendar_count_from``
    holds them; SettingsError naming the prefix whose instant is not one."""
    pairs = []
    for prefix, instant in found.items():
        try:
            pairs.append((str(prefix), parse_count_from(instant if isinstance(instant, str | int) and not isinstance(instant, bool) else "?")))
        except ValueError as error:
            raise SettingsError(f"calendar prefix {prefix!r}: count-from {error}", ("calendar_count_from",)) from None
    return tuple(pairs)


def _rules(env: Mapping[str, str]) -> Rules | None:
    raw = env.get(ENV_RULES)
    if raw is None or not raw.strip():
        return None
    try:
        return parse_rules(raw)
    except RulesError as error:
        raise SettingsError(f"{ENV_RULES}: {error}") from None


def _string_list(env: Mapping[str, str], name: str, example: str) -> tuple[str, ...]:
    """A JSON list of strings, e.g. ["orders/"]; unset or empty is none."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return ()
    found = _loaded(raw)
    if not isinstance(found, list) or not all(isinstance(value, str) for value in found):
        raise SettingsError(f"{name} must be a JSON list of strings like {example}, got {raw!r}")
    return tuple(dict.fromkeys(found))


def _loaded(raw: str) -> object:
    """``raw`` as JSON, or None where it is not JSON."""
    try:
        return json.loads(raw)
    except ValueError:
        return None


def zone_refusal(name: str) -> str | None:
    """Why ``name`` cannot be a kept zone (None: it can): not an IANA name, or days that do not begin on whole UTC
    hours in the years around now (days are closed from hour buckets)."""
    try:
        zone = ZoneInfo(name) if name and not name.startswith(("/", ".")) and ".." not in name else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        return f"unknown time zone {name!r}: give IANA names such as America/New_York"
    for year in range(2000, 2071):
        for month in range(1, 13):
            for day in (1, 15):
                offset = datetime(year, month, day, 12, tzinfo=zone).utcoffset()
                if offset is not None and offset.total_seconds() % 3600:
                    return (f"time zone {name}: its offset from UTC is not a whole number of hours, so its days do not "
                            "begin on whole UTC hours; tally closes days from hour buckets")
    return None

"""Stack settings read from CDK context (`cdk.json` or `-c key=value`).

Every key has a default here, so `App(context=...)` in tests and a bare
`cdk synth` agree; `cdk.json` repeats the defaults so they are visible where
operators look. Values arrive as JSON values from `cdk.json` and as strings
from the command line, so integers are accepted in both forms. A bad value
fails the synth with the key's name instead of deploying a stack that
miscounts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tally.core.rules import RulesError, parse_rules
from tally_cdk.backfill import BackfillSettings
from tally_cdk.read_api import ReadApiSettings, ReadApiSettingsError
from tally.core.settings import MAX_BUCKET_LANES, Settings, SettingsError, calendar_instants, parse_count_from
from tally.core.units import DAY_MS, HOUR_MS

DEFAULT_CONTEXT: dict[str, Any] = {
    "stackName": "Tally",
    "tumblingWindowSeconds": 60,
    "batchSize": 1000,
    "maxBatchingWindowSeconds": 10,
    "counterAttribute": "counter",
    "timeAttribute": "ts",
    "valueAttribute": "value",
    "minuteRetentionHours": 48,
    "hourRetentionDays": 90,
    "maxClockSkewSeconds": 300,
    "bucketLanes": 1,
    "rankedPrefixes": [],
    "eventsTableRemovalPolicy": "retain",
    "countsTableRemovalPolicy": "destroy",
    "powertoolsLayerVersion": 27,
    "alarmTopicArn": "",
    "alertBus": "",
    "rules": [],
    "eventsTableName": "",
    "eventsStreamArn": "",
    "countFrom": "",
    "readApi": True,
    "apiPublicPrefixes": [],
    "apiPublicCacheSeconds": 60,
    "apiPublicRateLimit": 50,
    "apiPublicBurstLimit": 100,
    "apiCorsOrigins": [],
    "apiDashboard": False,
    "apiLatencyAlarmMs": 1000,
    "backfillExports": "",
    "backfillRanges": 64,
    "backfillWorkers": 100,
    "backfillCommitters": 10,
    "backfillMaxWcu": 1000,
    "calendarPrefixes": [],
    "calendarZones": [],
    "calendarCountFrom": {},
    "dayRetentionDays": 400,
    "monthRetentionMonths": 84,
}

# The context key of each read API property, so an error names the key to fix.
READ_API_KEYS = {
    "enabled": "readApi",
    "public_prefixes": "apiPublicPrefixes",
    "public_cache_seconds": "apiPublicCacheSeconds",
    "public_rate_limit": "apiPublicRateLimit",
    "public_burst_limit": "apiPublicBurstLimit",
    "cors_origins": "apiCorsOrigins",
    "dashboard": "apiDashboard",
    "latency_alarm_ms": "apiLatencyAlarmMs",
}

# The context key each handler setting is read from, so a rule the handler enforces names the key to fix.
HANDLER_SETTING_KEYS = {
    "counter_attribute": "counterAttribute",
    "time_attribute": "timeAttribute",
    "value_attribute": "valueAttribute",
    "minute_retention_ms": "minuteRetentionHours",
    "hour_retention_ms": "hourRetentionDays",
    "max_clock_skew_ms": "maxClockSkewSeconds",
    "count_from_ms": "countFrom",
    "ranked_prefixes": "rankedPrefixes",
    "calendar_prefixes": "calendarPrefixes",
    "calendar_zones": "calendarZones",
    "calendar_count_from": "calendarCountFrom",
    "day_retention_ms": "dayRetentionDays",
    "month_retention_months": "monthRetentionMonths",
}

REMOVAL_POLICIES = ("retain", "destroy")
STACK_NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")
TABLE_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{3,255}")
EVENT_BUS_PATTERN = re.compile(r"[A-Za-z0-9._/-]{1,256}|arn:aws[a-z-]*:events:[a-z0-9-]+:\d{12}:event-bus/[A-Za-z0-9._/-]{1,256}")
S3_PREFIX_PATTERN = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9!_.*'()/-]*)?")
STREAM_ARN_PATTERN = re.compile(r"arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:\d{12}:table/(?P<table>[A-Za-z0-9_.-]{3,255})/stream/\S+")

# Lambda's limits for a DynamoDB Streams event source mapping.
# tally needs a tumbling window: only a windowed invocation names its shard (tally.invocation).
MIN_TUMBLING_WINDOW_SECONDS = 1
MAX_TUMBLING_WINDOW_SECONDS = 900
MAX_BATCH_SIZE = 10_000
MAX_BATCHING_WINDOW_SECONDS = 300
# Lambda allows 4 KB for all environment variables together; the rules get most of it.
MAX_RULES_BYTES = 3_000


class ContextError(ValueError):
    """A CDK context value the stack cannot be built from."""


@dataclass(frozen=True)
class StackSettings:
    """Everything about the stack that an operator may tune."""

    tumbling_window_seconds: int
    batch_size: int
    max_batching_window_seconds: int
    events_table_removal_policy: str
    counts_table_removal_policy: str
    powertools_layer_version: int
    alarm_topic_arn: str
    handler_settings: Settings
    rules_json: str  # TALLY_RULES for the function; empty for the classic rule
    # An existing events table to count (its name and stream ARN); empty: the stack creates one.
    events_table_name: str = ""
    events_stream_arn: str = ""
    read_api: ReadApiSettings = ReadApiSettings()
    alert_bus: str = ""  # the EventBridge bus alert events go to (name or ARN); empty: the default bus
    backfill: BackfillSettings = BackfillSettings()  # the backfill in the account; off by default

    @classmethod
    def from_context(cls, lookup: Callable[[str], Any]) -> StackSettings:
        """Read and validate every key; `lookup` is `node.try_get_context`."""
        reader = _ContextReader(lookup)
        minute_retention_hours = reader.integer("minuteRetentionHours", minimum=1)
        hour_retention_days = reader.integer("hourRetentionDays", minimum=1)
        max_clock_skew_seconds = reader.integer("maxClockSkewSeconds", minimum=0)
        events_table_name, events_stream_arn = reader.events_table()
        bucket_lanes = reader.integer("bucketLanes", minimum=1, maximum=MAX_BUCKET_LANES)
        day_retention_days = reader.integer("dayRetentionDays", minimum=1)
        month_retention_months = reader.integer("monthRetentionMonths", minimum=1)
        rules_json = reader.rules("rules")
        try:
            handler_settings = Settings(
                counter_attribute=reader.text("counterAttribute"),
                time_attribute=reader.text("timeAttribute"),
                value_attribute=reader.text("valueAttribute"),
                minute_retention_ms=minute_retention_hours * HOUR_MS,
                hour_retention_ms=hour_retention_days * DAY_MS,
                max_clock_skew_ms=max_clock_skew_seconds * 1000,
                count_from_ms=reader.count_from("countFrom"),
                bucket_lanes=bucket_lanes,
                rules=parse_rules(rules_json) if rules_json else None,
                ranked_prefixes=reader.text_list("rankedPrefixes"),
                # Days and months (core/ladder.py), closed once a day in the account (tally_cdk.closing).
                calendar_prefixes=tuple(dict.fromkeys(reader.text_list("calendarPrefixes"))),
                calendar_zones=tuple(dict.fromkeys(reader.text_list("calendarZones"))),
                calendar_count_from=reader.instants("calendarCountFrom"),
                day_retention_ms=day_retention_days * DAY_MS,
                month_retention_months=month_retention_months,
            )
        except SettingsError as error:
            named = error.naming({field: f"{key}={reader.shown(key)}" for field, key in HANDLER_SETTING_KEYS.items()})
            raise ContextError(f"context {named}") from None
        return cls(
            tumbling_window_seconds=reader.integer(
                "tumblingWindowSeconds", minimum=MIN_TUMBLING_WINDOW_SECONDS, maximum=MAX_TUMBLING_WINDOW_SECONDS
            ),
            batch_size=reader.integer("batchSize", minimum=1, maximum=MAX_BATCH_SIZE),
            max_batching_window_seconds=reader.integer(
                "maxBatchingWindowSeconds", minimum=0, maximum=MAX_BATCHING_WINDOW_SECONDS
            ),
            events_table_removal_policy=reader.choice("eventsTableRemovalPolicy", REMOVAL_POLICIES),
            counts_table_removal_policy=reader.choice("countsTableRemovalPolicy", REMOVAL_POLICIES),
            powertools_layer_version=reader.integer("powertoolsLayerVersion", minimum=1),
            alarm_topic_arn=reader.optional_arn("alarmTopicArn", service="sns"),
            handler_settings=handler_settings,
            rules_json=rules_json,
            events_table_name=events_table_name,
            events_stream_arn=events_stream_arn,
            read_api=reader.read_api(),
            alert_bus=reader.event_bus("alertBus"),
            backfill=reader.backfill(),
        )

    @property
    def minute_retention_hours(self) -> int:
        return self.handler_settings.minute_retention_ms // HOUR_MS

    @property
    def hour_retention_days(self) -> int:
        return self.handler_settings.hour_retention_ms // DAY_MS

    @property
    def max_clock_skew_seconds(self) -> int:
        return self.handler_settings.max_clock_skew_ms // 1000


def stack_name_from_context(lookup: Callable[[str], Any]) -> str:
    """The CloudFormation stack name; scripts find the tables through its outputs."""
    name = _ContextReader(lookup).text("stackName")
    if not STACK_NAME_PATTERN.fullmatch(name):
        raise ContextError(
            f"context stackName must start with a letter and hold only letters, digits and "
            f"hyphens (at most 128), got {name!r}"
        )
    return name


class _ContextReader:
    def __init__(self, lookup: Callable[[str], Any]) -> None:
        self._lookup = lookup

    def _raw(self, key: str) -> Any:
        value = self._lookup(key)
        return DEFAULT_CONTEXT[key] if value is None else value

    def shown(self, key: str) -> str:
        """The value as the operator gave it, for an error message."""
        return str(self._raw(key))

    def integer(self, key: str, *, minimum: int, maximum: int | None = None) -> int:
        raw = self._raw(key)
        if isinstance(raw, bool):
            raise ContextError(f"context {key} must be a whole number, got {raw!r}")
        try:
            value = int(raw) if isinstance(raw, (int, str)) else None
        except ValueError:
            value = None
        if value is None:
            raise ContextError(f"context {key} must be a whole number, got {raw!r}")
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise ContextError(f"context {key} must be {bounds}, got {value}")
        return value

    def text(self, key: str) -> str:
        raw = self._raw(key)
        if not isinstance(raw, str) or not raw.strip():
            raise ContextError(f"context {key} must be a non-empty string, got {raw!r}")
        return raw.strip()

    def rules(self, key: str) -> str:
        """Counter rules as a JSON list (cdk.json) or its text (``-c rules='[...]'``); empty for none."""
        raw = self._raw(key)
        if isinstance(raw, str):
            text = raw.strip()
        elif isinstance(raw, list):
            text = json.dumps(raw, separators=(",", ":"), ensure_ascii=False) if raw else ""
        else:
            raise ContextError(f"context {key} must be a JSON list of counter rules, got {json.dumps(raw)[:80]}")
        if not text or text == "[]":
            return ""
        try:
            parse_rules(text)
        except RulesError as error:
            raise ContextError(f"context {key}: {error}") from None
        if len(text.encode("utf-8")) > MAX_RULES_BYTES:
            raise ContextError(f"context {key} must fit {MAX_RULES_BYTES} bytes of JSON (Lambda's 4 KB environment)")
        return text

    def boolean(self, key: str) -> bool:
        raw = self._raw(key)
        value = raw.strip().lower() if isinstance(raw, str) else raw
        if value not in (True, False, "true", "false"):
            raise ContextError(f"context {key} must be true or false, got {raw!r}")
        return value in (True, "true")

    def text_list(self, key: str) -> tuple[str, ...]:
        """A JSON list of strings (cdk.json), or its text or comma-separated words (``-c key=a,b``)."""
        raw = self._raw(key)
        if isinstance(raw, str):
            text = raw.strip()
            try:
                raw = json.loads(text) if text.startswith("[") else [part.strip() for part in text.split(",") if part.strip()]
            except ValueError:
                raise ContextError(f"context {key} must be a JSON list of strings, got {text!r}") from None
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            raise ContextError(f"context {key} must be a list of strings, got {raw!r}")
        return tuple(raw)

    def read_api(self) -> ReadApiSettings:
        """The read API's keys, checked by the same rules as the construct's ReadApiSettings."""
        try:
            return ReadApiSettings(
                enabled=self.boolean("readApi"),
                public_prefixes=self.text_list("apiPublicPrefixes"),
                public_cache_seconds=self.integer("apiPublicCacheSeconds", minimum=0),
                public_rate_limit=self.integer("apiPublicRateLimit", minimum=1),
                public_burst_limit=self.integer("apiPublicBurstLimit", minimum=1),
                cors_origins=self.text_list("apiCorsOrigins"),
                dashboard=self.boolean("apiDashboard"),
                latency_alarm_ms=self.integer("apiLatencyAlarmMs", minimum=1),
            )
        except ReadApiSettingsError as error:
            keys = ", ".join(f"{READ_API_KEYS[field]}={self.shown(READ_API_KEYS[field])}" for field in error.fields)
            raise ContextError(f"context {keys}: {error.reason}") from None

    def backfill(self) -> BackfillSettings:
        """The in-account backfill: on when backfillExports names where the events table's exports go."""
        raw = self._raw("backfillExports")
        exports = raw.strip() if isinstance(raw, str) else None
        if exports is None or (exports and not S3_PREFIX_PATTERN.fullmatch(exports)):
            raise ContextError(f"context backfillExports must be empty or s3://BUCKET/PREFIX, got {raw!r}")
        return BackfillSettings(
            exports=exports,
            ranges=self.integer("backfillRanges", minimum=1, maximum=10_000),
            workers=self.integer("backfillWorkers", minimum=1, maximum=10_000),
            committers=self.integer("backfillCommitters", minimum=1, maximum=10_000),
            max_wcu=self.integer("backfillMaxWcu", minimum=1),
        )

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        raw = self._raw(key)
        value = raw.strip().lower() if isinstance(raw, str) else raw
        if value not in choices:
            raise ContextError(f"context {key} must be one of {', '.join(choices)}, got {raw!r}")
        return value

    def instants(self, key: str) -> tuple[tuple[str, int], ...]:
        """A JSON object of names and instants (cdk.json, or its text with ``-c``)."""
        raw = self._raw(key)
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except ValueError:
                raw = None
        if not isinstance(raw, dict):
            raise ContextError(f'context {key} must be a JSON object like {{"refunds/": "2026-12-01T00:00:00Z"}}, got {raw!r}')
        return calendar_instants(raw)

    def count_from(self, key: str) -> int | None:
        raw = self._raw(key)
        if raw in ("", None):
            return None
        try:
            return parse_count_from(raw if isinstance(raw, str | int) and not isinstance(raw, bool) else "?")
        except ValueError as error:
            raise ContextError(f"context {key} {error}") from None

    def events_table(self) -> tuple[str, str]:
        """eventsTableName and eventsStreamArn: both empty, or an existing table and its stream."""
        name, arn = (self._raw(key) for key in ("eventsTableName", "eventsStreamArn"))
        if not isinstance(name, str) or not isinstance(arn, str):
            raise ContextError("context eventsTableName and eventsStreamArn must be strings")
        name, arn = name.strip(), arn.strip()
        if not name and not arn:
            return "", ""
        if not name or not arn:
            raise ContextError("context eventsTableName and eventsStreamArn go together: give both or neither")
        if not TABLE_NAME_PATTERN.fullmatch(name):
            raise ContextError(f"context eventsTableName is not a DynamoDB table name: {name!r}")
        match = STREAM_ARN_PATTERN.fullmatch(arn)
        if not match:
            raise ContextError(
                f"context eventsStreamArn must be a DynamoDB stream ARN "
                f"(arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL), got {arn!r}"
            )
        if match.group("table") != name:
            raise ContextError(
                f"context eventsStreamArn belongs to table {match.group('table')!r}, not eventsTableName {name!r}"
            )
        return name, arn

    def event_bus(self, key: str) -> str:
        """An EventBridge bus's name or ARN; empty for the account's default bus."""
        raw = self._raw(key)
        value = raw.strip() if isinstance(raw, str) else None
        if value is None or (value and not EVENT_BUS_PATTERN.fullmatch(value)):
            raise ContextError(f"context {key} must be empty, an event bus name or an event bus ARN, got {raw!r}")
        return value

    def optional_arn(self, key: str, *, service: str) -> str:
        raw = self._raw(key)
        if not isinstance(raw, str):
            raise ContextError(f"context {key} must be a string, got {raw!r}")
        value = raw.strip()
        if value and (not value.startswith("arn:") or value.split(":")[2:3] != [service]):
            raise ContextError(f"context {key} must be empty or an {service} ARN, got {raw!r}")
        return value

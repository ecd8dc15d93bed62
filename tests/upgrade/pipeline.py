"""One events table, its stream and one counts table on a loopback server, counted by two releases in turn.

The harness plays Lambda's event source mapping, which a deploy does not change: it reads the stream, cuts
the shard's records into windows and batches, carries each window's state from one invocation to the next
and retries a failed invocation with the very same event. Which release's handler an invocation reaches is
the deploy: ``Pipeline.invoke(release, ...)`` runs that release's own handler in a process of its Python
(release_agent.py). The truth is brute force over the events written: each counter's count, its distinct
users and the listing and top list of every window a reader answers.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3

from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS
from tally.dynamo.stream import lambda_record

from .releases import Release

PREFIX = "views/"
RULES = [{"name": "views", "counter": PREFIX + "{page}", "distinct": "user"}]
PAGES = 12
USERS = 30  # few enough that every bucket's sketch stays sparse, so a distinct count is exact
TOP = 5


@dataclass
class Invocation:
    """One invocation of a window's batch: records [start, end) of the shard, final or not."""

    start: int
    end: int
    final: bool
    window: int = 0  # which window: its start is this many minutes after the first record's


@dataclass
class Outcome:
    """What a release made of a run of invocations: the state it carries on, and the invocation that failed."""

    state: dict[str, Any]
    failed: str | None
    state_before_failure: dict[str, Any] | None = None
    failed_at: int | None = None  # index of the failed invocation in the run


@dataclass
class Pipeline:
    server_env: dict[str, str]
    name: str
    settings_env: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    shard_id: str = ""
    stream_arn: str = ""

    @property
    def events_table(self) -> str:
        return f"{self.name}-events"

    @property
    def counts_table(self) -> str:
        return f"{self.name}-counts"

    def env(self, **settings: str) -> dict[str, str]:
        """What a release's function and reader read: the server, the tables, the rules and ``settings``."""
        return {
            **os.environ,
            **self.server_env,
            "COUNTS_TABLE": self.counts_table,
            "EVENTS_TABLE": self.events_table,
            "TALLY_RULES": json.dumps(RULES),
            **self.settings_env,
            **settings,
        }

    def client(self, service: str) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.server_env["AWS_ENDPOINT_URL"],
            region_name=self.server_env["AWS_REGION"],
            aws_access_key_id=self.server_env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.server_env["AWS_SECRET_ACCESS_KEY"],
        )

    # --- the producer -------------------------------------------------------------------------------------

    def write_events(self, rng: random.Random, now_ms: int, count: int, late: int) -> None:
        """``count`` events over the last two and a half hours and ``late`` events three days old (past the
        minute retention: counted in their hour alone), in a shuffled order, each a page view by a user."""
        times = [now_ms - rng.randrange(2 * MINUTE_MS, 150 * MINUTE_MS) for _ in range(count)]
        times += [now_ms - 3 * DAY_MS + rng.randrange(0, 2 * HOUR_MS) for _ in range(late)]
        rng.shuffle(times)
        dynamodb = self.client("dynamodb")
        for ms in times:
            item = {
                "id": uuid.UUID(int=rng.getrandbits(128)).hex,
                "page": f"p{min(int(rng.paretovariate(1.2)) - 1, PAGES - 1)}",
                "user": f"u{rng.randrange(USERS)}",
                "ts": ms,
            }
            dynamodb.put_item(
                TableName=self.events_table,
                Item={"id": {"S": item["id"]}, "page": {"S": item["page"]}, "user": {"S": item["user"]},
                      "ts": {"N": str(ms)}},
            )
            self.events.append(item)

    def read_stream(self) -> None:
        """Every record of the events table's stream, in the shape Lambda hands the function."""
        dynamodb, streams = self.client("dynamodb"), self.client("dynamodbstreams")
        self.stream_arn = dynamodb.describe_table(TableName=self.events_table)["Table"]["LatestStreamArn"]
        shards = streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"]
        records: list[dict[str, Any]] = []
        for shard in shards:
            iterator = streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            found: list[dict[str, Any]] = []
            while iterator:
                page = streams.get_records(ShardIterator=iterator, Limit=1000)
                found += page["Records"]
                if not page["Records"] and len(found) >= len(self.events) - len(records):
                    break
                iterator = page.get("NextShardIterator")
            if found:
                assert not records, "the harness cuts one shard; this stream split the events over several"
                records, self.shard_id = found, shard["ShardId"]
        assert len(records) == len(self.events), f"{len(records)} stream records for {len(self.events)} events"
        self.records = [lambda_record(record, self.stream_arn) for record in records]

    # --- Lambda's event source mapping ----------------------------------------------------------------------

    def event(self, invocation: Invocation, state: dict[str, Any] | None) -> dict[str, Any]:
        """Lambda's event for records [start, end) of the shard; state None means "the state carried"."""
        start_s = int(self.records[0]["dynamodb"]["ApproximateCreationDateTime"]) // 60 * 60 + 60 * invocation.window
        return {
            "Records": self.records[invocation.start : invocation.end],
            "window": {"start": _iso(start_s), "end": _iso(start_s + 60)},
            "state": state,
            "shardId": self.shard_id,
            "eventSourceARN": self.stream_arn,
            "isFinalInvokeForWindow": invocation.final,
            "isWindowTerminatedEarly": False,
        }

    def invoke(
        self,
        release: Release,
        invocations: list[Invocation],
        state: dict[str, Any] | None = None,
        crash_after_writes: int | None = None,
        **settings: str,
    ) -> Outcome:
        """The invocations in turn through ``release``'s handler, the first given ``state`` and each later one
        the state the one before returned (none after a final one); the run ends at the first that fails."""
        events = [self.event(invocation, (state or {}) if index == 0 else None) for index, invocation in enumerate(invocations)]
        answer = release.agent(
            "invoke",
            {"counts": self.counts_table, "events": events, "crash_after_writes": crash_after_writes},
            self.env(**settings),
        )
        carried = state or {}
        responses = answer["responses"]
        for invocation, response in zip(invocations, responses, strict=False):
            carried = {} if invocation.final else dict((response or {}).get("state") or {})
        if answer["failed"] is not None:
            return Outcome(carried, answer["failed"], state_before_failure=carried, failed_at=len(responses))
        return Outcome(carried, None)

    # --- readers and the truth --------------------------------------------------------------------------------

    def read(self, release: Release, windows: list[dict[str, Any]], **settings: str) -> list[dict[str, Any]]:
        return self.read_all(release, windows, **settings)["answers"]

    def read_all(self, release: Release, windows: list[dict[str, Any]], days: dict[str, str] | None = None,
                 **settings: str) -> dict[str, Any]:
        """What ``release``'s reader answers: each window's counts, listing and top list (``answers``) and, with
        ``days`` (``start`` and ``end`` dates), each counter's UTC days (``days``: counter -> [start, count,
        distinct] per day) where the release has calendar series."""
        counters = sorted({PREFIX + f"p{page}" for page in range(PAGES)})
        job = {"counts": self.counts_table, "counters": counters, "windows": windows, "prefix": PREFIX, "days": days}
        return release.agent("read", job, self.env(**settings))

    def truth(self, start: str, end: str) -> dict[str, tuple[int, int]]:
        """Counter -> (count, distinct users) of the events whose minute lies in [start, end)."""
        start_ms, end_ms = ms_of(start), ms_of(end)
        counts: Counter[str] = Counter()
        users: dict[str, set[str]] = {}
        for event in self.events:
            if start_ms <= event["ts"] // MINUTE_MS * MINUTE_MS < end_ms:
                counter = PREFIX + event["page"]
                counts[counter] += 1
                users.setdefault(counter, set()).add(event["user"])
        return {counter: (count, len(users[counter])) for counter, count in counts.items()}


def windows_at(at_ms: int) -> list[dict[str, Any]]:
    """What the readers are asked: the 24 h before ``at`` (minutes) and four days of whole hours (the late events'
    hours too), with the top list of each."""
    at = _iso(at_ms // 1000)
    return [{"length": "24h", "at": at, "top": TOP}, {"length": "4d", "at": at, "align": True, "top": TOP}]


def differences_from_truth(pipeline: Pipeline, answers: list[dict[str, Any]], *, distinct: bool = True,
                           listing: bool = True, top: bool = True) -> list[str]:
    """Every way the answers differ from brute force, one line each (none: they agree)."""
    wrong = []
    for answer in answers:
        where = f"{answer['window']['length']} at {answer['window']['at']}"
        for counter, got in answer["counts"].items():
            truth = pipeline.truth(got["start"], got["end"]).get(counter, (0, 0))
            if got["total"] != truth[0]:
                wrong.append(f"{where}: {counter} counted {got['total']}, truth {truth[0]} (unresolved {got['unresolved']})")
            if distinct and truth[0] and got["distinct"] != truth[1]:
                wrong.append(f"{where}: {counter} has {got['distinct']} distinct users, truth {truth[1]}")
            if got["unresolved"]:
                wrong.append(f"{where}: {counter} unresolved {got['unresolved']}")
        some = next(iter(answer["counts"].values()))
        truth = pipeline.truth(some["start"], some["end"])
        if listing and answer["listed"] != sorted(truth):
            wrong.append(f"{where}: listed {answer['listed']}, truth {sorted(truth)}")
        if top and "top" in answer:
            window_truth = pipeline.truth(answer["top"]["start"], answer["top"]["end"])
            expected = sorted(((c, n) for c, (n, _) in window_truth.items()), key=lambda e: (-e[1], e[0]))[:TOP]
            got_top = [tuple(entry) for entry in answer["top"]["entries"]]
            if got_top != expected or not answer["top"]["exact"]:
                wrong.append(f"{where}: top {got_top} (exact {answer['top']['exact']}), truth {expected}")
    return wrong


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_instant(ms: int) -> str:
    return _iso(ms // 1000)


def iso_date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def ms_of(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)

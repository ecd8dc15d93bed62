"""Random streams of items that change, and their brute-force truth from replaying each item's history.

Items are jobs: inserted, changed (status, provider, flags, amounts), deleted
by their owner or by DynamoDB's TTL, and inserted again under the same key. The
table streams NEW_AND_OLD_IMAGES; now and then a record lacks an image (a
stream whose view was changed, a damaged record), which the rules that need it
must reject. A write that changes nothing streams no record, as in DynamoDB
(moto would stream a MODIFY: this generator models DynamoDB, not moto).

``HISTORY_RULES`` count inserts, transitions (with and without ``when``),
every change, and deletions of every kind, by the table-wide time, an
attribute of their own, or arrival. The generator restates them by hand: for
every record the outcome labels parse_record must give, and the events,
amounts and rejections the counts table must hold.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from tally.core.records import Reason
from tally.core.rules import parse_rules
from tally.core.settings import Settings
from tally.core.units import MINUTE_MS

from .streams import (
    AMOUNTS,
    TTL_DELETION_IDENTITY,
    Expected,
    Stream,
    _record as stream_record,
    _rendered,
    _time_offset,
    _time_value,
    _units,
    hash_shard,
    time_verdict,
)

ARRIVAL = "@arrival"
HISTORY_RULES_JSON = [
    {"name": "placed", "counter": "placed/{p}"},
    {"name": "done", "counter": "done/{p}", "becomes": {"status": {"equals": "done"}}, "time": "doneAt", "sum": "amount"},
    {
        "name": "vip-done",
        "counter": "vip-done",
        "when": {"vip": {"equals": True}},
        "becomes": {"status": {"oneOf": ["done", "paid"]}},
        "time": ARRIVAL,
    },
    {"name": "edits", "counter": "edits/{p}", "on": "MODIFY", "time": ARRIVAL},
    {"name": "gone", "counter": "gone/{status}", "on": "REMOVE", "time": ARRIVAL},
    {"name": "expired", "counter": "expired", "on": "REMOVE", "deletedBy": "ttl", "time": "ts"},
    {
        "name": "purged",
        "counter": "purged/{p}",
        "on": "REMOVE",
        "deletedBy": "user",
        "when": {"status": {"equals": "cancelled"}},
        "time": ARRIVAL,
    },
]
HISTORY_RULES = parse_rules(json.dumps(HISTORY_RULES_JSON))
STATUSES = ("placed", "done", "paid", "cancelled")
ODD_PROVIDERS = ({"S": ""}, {"BOOL": True}, {"N": "7"}, {"S": "x" * 260}, {"S": "ünï 😀"})
# What a time attribute means to the oracle: an epoch ms, or the reason it is refused.
Meaning = int | Reason


@dataclass(frozen=True)
class HistorySpec:
    """Everything that shapes one random stream of changing items; ``seed`` drives the rest."""

    seed: int
    writes: int
    providers: int
    start_ms: int
    max_gap_s: int
    jump_share: float
    odd_share: float
    change_share: float  # of writes, changes to existing items (the rest: inserts)
    delete_share: float  # of changes, deletions (by owner or TTL)
    image_loss_share: float  # records lacking an image their view should carry
    shards: int


@dataclass
class Job:
    """One item as the table holds it: DynamoDB JSON, and what its time attributes mean."""

    image: dict[str, Any]
    times: dict[str, Meaning]


def settings_for_histories(settings: Settings) -> Settings:
    return Settings(
        counts_table=settings.counts_table,
        events_table=settings.events_table,
        minute_retention_ms=settings.minute_retention_ms,
        hour_retention_ms=settings.hour_retention_ms,
        max_clock_skew_ms=settings.max_clock_skew_ms,
        rules=HISTORY_RULES,
    )


def build_history_stream(spec: HistorySpec, settings: Settings) -> Stream:
    rng = random.Random(spec.seed)
    providers = [f"p{index}" for index in range(spec.providers)]
    shard_ids = [f"shardId-{spec.seed % 10**8:08d}-{index:08x}" for index in range(spec.shards)]
    shards: dict[str, list[dict[str, Any]]] = {shard: [] for shard in shard_ids}
    expected = Expected(last_arrival_ms=spec.start_ms)
    live: dict[str, Job] = {}
    deleted: list[str] = []
    sequence = 10**20 + rng.randrange(10**6) * 10**6
    arrival_ms = spec.start_ms - spec.start_ms % 1000
    identical = 0
    for write in range(spec.writes):
        arrival_ms += rng.randint(0, spec.max_gap_s) * 1000
        if rng.random() < spec.jump_share:
            arrival_ms += rng.randint(30, 180) * MINUTE_MS
        if live and rng.random() < spec.change_share:
            item_id = rng.choice(sorted(live))
            old = live[item_id]
            if rng.random() < spec.delete_share:
                by_ttl = rng.random() < 0.5
                del live[item_id]
                deleted.append(item_id)
                change = ("REMOVE", None, old, by_ttl)
            else:
                new = _changed(rng, spec, old, providers, arrival_ms, settings)
                if new.image == old.image:
                    identical += 1  # DynamoDB streams nothing for a write that changes nothing
                    continue
                live[item_id] = new
                change = ("MODIFY", new, old, False)
        else:
            item_id = deleted.pop(rng.randrange(len(deleted))) if deleted and rng.random() < 0.2 else f"j{write}"
            new = _new_job(rng, spec, item_id, providers, arrival_ms, settings)
            live[item_id] = new
            change = ("INSERT", new, None, False)
        sequence += rng.randint(1, 10**6)
        kind, new_job, old_job, by_ttl = change
        record = _record(kind, item_id, sequence, arrival_ms, new_job, old_job, by_ttl)
        _drop_images(rng, spec, record)
        labels = _oracle(record, new_job, old_job, by_ttl, arrival_ms, settings, expected)
        expected.intents[str(sequence)] = sorted(labels)
        expected.last_arrival_ms = max(expected.last_arrival_ms, arrival_ms)
        shards[shard_ids[hash_shard(item_id, len(shard_ids))]].append(record)
    return Stream(spec, shards, expected, identical)  # type: ignore[arg-type]


def _new_job(
    rng: random.Random, spec: HistorySpec, item_id: str, providers: list[str], arrival_ms: int, settings: Settings
) -> Job:
    job = Job({"id": {"S": item_id}, "status": {"S": rng.choice(["placed", "placed", "placed", "done", "paid"])}}, {})
    job.image["p"] = {"S": rng.choice(providers)}
    if rng.random() < spec.odd_share:
        odd = rng.choice([None, *ODD_PROVIDERS])
        if odd is None:
            del job.image["p"]
        else:
            job.image["p"] = odd
    _set_amount(rng, spec, job)
    if rng.random() < 0.5:
        job.image["vip"] = {"BOOL": rng.random() < 0.5}
    _set_time(rng, spec, job, "ts", arrival_ms + _time_offset(rng, spec, settings), settings)  # type: ignore[arg-type]
    if job.image["status"] == {"S": "done"}:
        _set_time(rng, spec, job, "doneAt", arrival_ms + _time_offset(rng, spec, settings), settings)  # type: ignore[arg-type]
    return job


def _changed(
    rng: random.Random, spec: HistorySpec, old: Job, providers: list[str], arrival_ms: int, settings: Settings
) -> Job:
    """A new image of the job: a new status mostly, sometimes other attributes only (or nothing at all)."""
    job = Job(dict(old.image), dict(old.times))
    roll = rng.random()
    if roll < 0.6:
        status = rng.choice(STATUSES)
        job.image["status"] = {"S": status}
        if status == "done" and old.image["status"] != {"S": "done"}:
            _set_time(rng, spec, job, "doneAt", arrival_ms + _time_offset(rng, spec, settings), settings)  # type: ignore[arg-type]
    elif roll < 0.75:
        job.image["vip"] = {"BOOL": rng.random() < 0.5}
    elif roll < 0.85:
        job.image["p"] = {"S": rng.choice(providers)}
    elif roll < 0.95:
        _set_amount(rng, spec, job)
    return job  # the rest: unchanged, an identical rewrite


def _set_amount(rng: random.Random, spec: HistorySpec, job: Job) -> None:
    """An amount of cents mostly; now and then one a summing rule must refuse, or none."""
    if rng.random() < spec.odd_share / 3:
        odd = rng.choice(AMOUNTS)[0]
        if odd is None:
            job.image.pop("amount", None)
        else:
            job.image["amount"] = odd
        return
    cents = rng.randint(-10**4, 10**6)
    job.image["amount"] = {"N": f"{'-' if cents < 0 else ''}{abs(cents) // 100}.{abs(cents) % 100:02d}"}


def _set_time(rng: random.Random, spec: HistorySpec, job: Job, attribute: str, event_ms: int, settings: Settings) -> None:
    """A time attribute as producers write it, now and then missing or unreadable."""
    if rng.random() < spec.odd_share / 2:
        if rng.random() < 0.5:
            job.image.pop(attribute, None)
            job.times[attribute] = Reason.MISSING_TIME
        else:
            job.image[attribute] = rng.choice([{"S": "yesterday"}, {"N": "-1"}, {"BOOL": True}])
            job.times[attribute] = Reason.INVALID_TIME
        return
    job.image[attribute] = _time_value(rng, event_ms)
    job.times[attribute] = event_ms


def _record(
    kind: str, item_id: str, sequence: int, arrival_ms: int, new: Job | None, old: Job | None, by_ttl: bool
) -> dict[str, Any]:
    """The record of one change on a table streaming NEW_AND_OLD_IMAGES."""
    record = stream_record(
        kind, item_id, sequence, arrival_ms, new.image if new else None, TTL_DELETION_IDENTITY if by_ttl else None
    )
    record["dynamodb"]["StreamViewType"] = "NEW_AND_OLD_IMAGES"
    if old is not None:
        record["dynamodb"]["OldImage"] = old.image
    return record


def _drop_images(rng: random.Random, spec: HistorySpec, record: dict[str, Any]) -> None:
    if rng.random() < spec.image_loss_share:
        stream = record["dynamodb"]
        lost = "OldImage" if "OldImage" in stream and ("NewImage" not in stream or rng.random() < 0.8) else "NewImage"
        stream.pop(lost, None)


def _oracle(
    record: dict[str, Any],
    new: Job | None,
    old: Job | None,
    by_ttl: bool,
    arrival_ms: int,
    settings: Settings,
    expected: Expected,
) -> list[str]:
    """HISTORY_RULES applied by hand to one record; the truth goes into ``expected``, the labels are returned."""
    kind, stream = record["eventName"], record["dynamodb"]
    if kind != "REMOVE" and "NewImage" not in stream:
        expected.rejections.append((Reason.MISSING_IMAGE, arrival_ms))
        return [Reason.MISSING_IMAGE.value]
    has_old = "OldImage" in stream
    image = (old if kind == "REMOVE" else new).image if (kind != "REMOVE" or has_old) else None  # type: ignore[union-attr]
    times = (old if kind == "REMOVE" else new).times  # type: ignore[union-attr]
    status = image["status"]["S"] if image else None
    counting: list[tuple[str, str, int | None]] = []  # (counter, time source, units)
    refusals: list[Reason] = []

    def count(prefix: str | None, counter: str | None, source: str, units_from: str | None = None) -> None:
        name = counter
        if prefix is not None:
            if "p" not in image:  # type: ignore[operator]
                refusals.append(Reason.MISSING_COUNTER)
                return
            name = _rendered(prefix, image["p"])  # type: ignore[index]
            if name is None:
                refusals.append(Reason.INVALID_COUNTER)
                return
        units = None
        if units_from is not None:
            if units_from not in image:  # type: ignore[operator]
                refusals.append(Reason.MISSING_SUM)
                return
            units = _units(image[units_from])  # type: ignore[index]
            if units is None:
                refusals.append(Reason.INVALID_SUM)
                return
        counting.append((name, source, units))  # type: ignore[arg-type]

    if kind == "INSERT":
        count("placed/", None, "ts")
    if kind in ("INSERT", "MODIFY"):
        was = old.image["status"]["S"] if has_old and old is not None else None
        if status == "done":
            if kind == "MODIFY" and not has_old:
                refusals.append(Reason.MISSING_OLD_IMAGE)
            elif was != "done":
                count("done/", None, "doneAt", "amount")
        if image.get("vip") == {"BOOL": True} and status in ("done", "paid"):  # type: ignore[union-attr]
            if kind == "MODIFY" and not has_old:
                refusals.append(Reason.MISSING_OLD_IMAGE)
            elif was not in ("done", "paid"):
                count(None, "vip-done", ARRIVAL)
    if kind == "MODIFY":
        count("edits/", None, ARRIVAL)
    if kind == "REMOVE":
        judging = ["gone", "expired" if by_ttl else "purged"]
        if not has_old:
            refusals += [Reason.MISSING_OLD_IMAGE] * len(judging)
        else:
            counting.append((f"gone/{status}", ARRIVAL, None))
            if by_ttl:
                counting.append(("expired", "ts", None))
            elif status == "cancelled":
                count("purged/", None, ARRIVAL)

    if not counting and not refusals:
        return [Reason.NO_RULE_MATCHED.value]
    verdicts: dict[str, int | Reason] = {}
    for _, source, _ in counting:
        if source not in verdicts:
            verdicts[source] = _time_verdict(source, times, image, arrival_ms, settings)  # type: ignore[arg-type]
    labels = []
    for name, source, units in counting:
        verdict = verdicts[source]
        if isinstance(verdict, Reason):
            continue
        expected.events.append((name, verdict, arrival_ms))
        if units is not None:
            expected.amounts.append((name, verdict, units, arrival_ms))
        labels.append(f"counter:{name}")
    for reason in [v for v in verdicts.values() if isinstance(v, Reason)] + refusals:
        expected.rejections.append((reason, arrival_ms))
        labels.append(reason.value)
    return labels


def _time_verdict(source: str, times: dict[str, Meaning], image: dict[str, Any], arrival_ms: int, settings: Settings):
    """The event time a source gives, or the reason it is refused: arrival is always fine."""
    if source == ARRIVAL:
        return arrival_ms
    if source not in image:
        return Reason.MISSING_TIME
    meaning = times[source]
    if isinstance(meaning, Reason):
        return meaning
    return time_verdict(meaning, arrival_ms, settings) or meaning


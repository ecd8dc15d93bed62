"""The origin design (docs/design.md, "The origin design"), re-implemented with its defects, as the baseline.

Its handler makes two UpdateItem calls per stream record, one per bucket key
``<prefix>_hour_<n>`` and ``<prefix>_minute_<n>`` (n = epoch seconds // 3600
or // 60) of a table keyed by one string ``id``. Its type check ends in
``next`` where ``continue`` was meant, so a MODIFY is counted again and a
REMOVE (no NewImage) raises KeyError, failing the whole batch.

Its query reads 24 hour keys back from the current hour, then the minutes of
the window's first, partial hour; it walks those minutes backwards from the
window start instead of forwards, so it sums the wrong minutes (up to 59 of
them: 83 keys in all), and it never retries ``UnprocessedKeys``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tally.core.units import DAY_MS, HOUR_MS, MINUTE_MS

KEY_ATTRIBUTE = "id"
COUNT_ATTRIBUTE = "count"
TTL_ATTRIBUTE = "ttl"
RETENTION_SECONDS = 2 * 86_400
QUERY_HOURS = 24

UPDATE_EXPRESSION = "SET #count = if_not_exists(#count, :zero) + :one, #ttl = if_not_exists(#ttl, :ttl)"
SUM_UPDATE_EXPRESSION = (
    "SET #count = if_not_exists(#count, :zero) + :one, #sum = if_not_exists(#sum, :zero) + :amount, "
    "#ttl = if_not_exists(#ttl, :ttl)"
)


def hour_key(prefix: str, epoch_seconds: int) -> str:
    return f"{prefix}_hour_{epoch_seconds // 3600}"


def minute_key(prefix: str, epoch_seconds: int) -> str:
    return f"{prefix}_minute_{epoch_seconds // 60}"


def create_table_request(table_name: str) -> dict[str, Any]:
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": KEY_ATTRIBUTE, "AttributeType": "S"}],
    }


class OriginHandler:
    """The origin's Lambda handler over a boto3 client: ``counter`` and ``ts`` (epoch ms) name the event.

    ``counters`` makes it do the work of counter rules in its own way: for each
    (prefix, amount or None) it returns for an image, two more updates, the
    amount added to a ``sum`` beside the count. ``counted`` does the same for
    rules on every record kind (transitions, deletions, their own times): it
    returns (prefix, epoch seconds, amount or None) for a whole record.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        counter_attribute: str = "counter",
        time_attribute: str = "ts",
        counters: Callable[[Mapping[str, Any]], list[tuple[str, str | None]]] | None = None,
        counted: Callable[[Mapping[str, Any]], list[tuple[str, int, str | None]]] | None = None,
    ):
        self.client = client
        self.counted = counted
        self.table_name = table_name
        self.counter_attribute = counter_attribute
        self.time_attribute = time_attribute
        self.counters = counters or (lambda image: [(image[self.counter_attribute]["S"], None)])

    def __call__(self, event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
        for record in event["Records"]:
            if self.counted is not None:
                for prefix, seconds, amount in self.counted(record):
                    for key in (hour_key(prefix, seconds), minute_key(prefix, seconds)):
                        self._update(key, seconds, amount)
                continue
            if record["eventName"] != "INSERT":
                next  # noqa: B018 - the origin's defect, reproduced: it does not skip the record
            image = record["dynamodb"]["NewImage"]
            seconds = int(image[self.time_attribute]["N"]) // 1000
            for prefix, amount in self.counters(image):
                for key in (hour_key(prefix, seconds), minute_key(prefix, seconds)):
                    self._update(key, seconds, amount)
        return {}

    def _update(self, key: str, seconds: int, amount: str | None) -> None:
        self.client.update_item(**update_request(self.table_name, key, seconds, amount))


def update_request(table_name: str, key: str, seconds: int, amount: str | None) -> dict[str, Any]:
    """The origin's increment of one bucket item (and of its sum, for an amount)."""
    names = {"#count": COUNT_ATTRIBUTE, "#ttl": TTL_ATTRIBUTE}
    values = {":zero": {"N": "0"}, ":one": {"N": "1"}, ":ttl": {"N": str(seconds + RETENTION_SECONDS)}}
    expression = UPDATE_EXPRESSION
    if amount is not None:
        names["#sum"], values[":amount"] = "sum", {"N": amount}
        expression = SUM_UPDATE_EXPRESSION
    return {
        "TableName": table_name,
        "Key": {KEY_ATTRIBUTE: {"S": key}},
        "UpdateExpression": expression,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def query_keys(prefix: str, now_ms: int) -> list[str]:
    """The origin's keys for the 24 hours before ``now_ms``: hour keys, then the backward minute walk.

    Meant: the minutes from the window start to the end of its hour. Done: as
    many minutes, counted backwards from the window start.
    """
    now = now_ms // 1000
    start = (now_ms - DAY_MS) // 1000
    hours = [hour_key(prefix, now - i * 3600) for i in range(QUERY_HOURS)]
    minutes_to_hour_end = 59 - (start // 60) % 60
    minutes = [minute_key(prefix, start - i * 60) for i in range(1, minutes_to_hour_end + 1)]
    return hours + minutes


def query(client: Any, table_name: str, prefix: str, now_ms: int) -> int:
    """One BatchGetItem of the origin's keys, summed; unprocessed keys are dropped, as in the origin."""
    keys = [{KEY_ATTRIBUTE: {"S": key}} for key in query_keys(prefix, now_ms)]
    response = client.batch_get_item(RequestItems={table_name: {"Keys": keys}})
    return sum(int(item[COUNT_ATTRIBUTE]["N"]) for item in response["Responses"].get(table_name, []))


def sum_keys(counts: Mapping[str, int], prefix: str, now_ms: int) -> int:
    """What the origin's query returns, given the counts it would read."""
    return sum(counts.get(key, 0) for key in query_keys(prefix, now_ms))


def mock_events(start_hour_ms: int, *, hours: int = 37, counters: int = 3, seed: int = 2019) -> Iterator[tuple[str, int]]:
    """The origin's mock data: 20-100 events per hour, at random times, each for one of ``counters``.

    Yields (counter, event ms) in time order, as the stream delivers them.
    """
    rng = random.Random(seed)
    names = [f"customer-{index}" for index in range(counters)]
    for hour in range(hours):
        base = start_hour_ms + hour * HOUR_MS
        times = sorted(base + rng.randrange(HOUR_MS) for _ in range(rng.randint(20, 100)))
        for event_ms in times:
            yield rng.choice(names), event_ms


def brute_force(events: list[tuple[str, int]], counter: str, first_minute: int, last_minute: int, now_ms: int) -> int:
    """Events of ``counter`` in the minutes first..last that exist at ``now_ms``."""
    return sum(
        1
        for name, event_ms in events
        if name == counter and event_ms <= now_ms and first_minute <= event_ms // MINUTE_MS <= last_minute
    )

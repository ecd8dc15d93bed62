"""The counter directory (``core/directory.py``) in the counts table: written beside commits, read by listings."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tally.core.buckets import Bucket
from tally.core.commit import CommitResult, Writer
from tally.core.directory import Entry, day_partitions, entries_of, entry_item
from tally.core.retry import Backoff, directory_backoff
from tally.core.segments import Segment
from tally.core.settings import Settings
from tally.core.tables import COUNTS_TABLE
from tally.dynamo.calls import batch_write, key_of, retried_while_throttled

# Directory entries a container remembers having written (a few MB): past it, it forgets and may put some again.
DIRECTORY_MEMORY = 100_000
# A listing page's first Query per partition reads this many names; the next ones four times more.
_FIRST_PAGE = 8
_LARGEST_PAGE = 1_000


@dataclass(frozen=True)
class DirectoryPage:
    """Counter names of a listing in name order, the Queries they took, and whether names after them may exist."""

    names: list[str]
    requests: int
    more: bool


class CounterDirectory:
    """The counter directory (``core/directory.py``) in the counts table: written beside commits, read by listings.

    An instance remembers the entries it has written, so a warm function puts
    each (day, counter) entry once, however many of the counter's hour items
    it creates that day; another container puts it again, which changes nothing.
    Entries left unprocessed are put again on ``directory_backoff`` (a wait
    costs only time), listings' Queries on the plain schedule (a reader waits).
    """

    def __init__(
        self, client: Any, table_name: str, settings: Settings, backoff: Callable[[], Backoff] | None = None
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.settings = settings
        self.backoff = backoff or Backoff
        self.put_backoff = backoff or directory_backoff
        self.written: set[Entry] = set()

    def recording(self, commit: Callable[[Segment, Writer], CommitResult]) -> Callable[[Segment, Writer], CommitResult]:
        """``commit``, then the directory entries of the hour items it created (or found applied, which a retry
        whose first try created them and failed before its entries finds)."""

        def commit_and_record(segment: Segment, writer: Writer) -> CommitResult:
            result = commit(segment, writer)
            self.record(result.born)
            return result

        return commit_and_record

    def record(self, items: Iterable[tuple[str, Bucket]]) -> int:
        """Put the entries of these bucket items this instance has not written yet; the number put."""
        new = sorted(entries_of(items) - self.written)
        if len(self.written) + len(new) > DIRECTORY_MEMORY:
            self.written.clear()  # a long-lived container forgets old days; at worst an entry is put again
        requests = [{"PutRequest": {"Item": entry_item(entry, self.settings)}} for entry in new]
        batch_write(self.client, self.table_name, requests, backoff=self.put_backoff)
        self.written.update(new)
        return len(new)

    def counters(self, prefix: str, days: Iterable[int], consistent: bool = False) -> tuple[list[str], int]:
        """Names starting with ``prefix`` that have an entry on any of ``days`` (sorted), and the Queries made."""
        page = self.page(prefix, days, consistent=consistent)
        return page.names, page.requests

    def page(
        self,
        prefix: str,
        days: Iterable[int],
        *,
        after: str | None = None,
        limit: int | None = None,
        consistent: bool = False,
    ) -> DirectoryPage:
        """The first ``limit`` names (all without one) after ``after`` that start with ``prefix`` and have an
        entry on any of ``days``, in name order: every partition of every day read in pages, merged.

        Each partition is read lazily, in pages that grow, so a page of a
        listing reads about its share of each partition, and a day that only
        the previous release wrote is read as far as the page needs.
        """
        requests = [0]

        def names_in(partition: str) -> Iterator[str]:
            request = self._names_request(partition, prefix, consistent)
            if after is not None:
                request["ExclusiveStartKey"] = key_of(partition, after)
            page_size = _FIRST_PAGE
            while True:
                if limit is not None:
                    request["Limit"] = page_size
                    page_size = min(4 * page_size, _LARGEST_PAGE)
                response = retried_while_throttled(self.backoff, self.client.query, **request)
                requests[0] += 1
                for item in response.get("Items", []):
                    yield item[COUNTS_TABLE.sort_key]["S"]
                if "LastEvaluatedKey" not in response:
                    return
                request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

        partitions = [partition for day in days for partition in day_partitions(day)]
        merged = (name for name, _ in itertools.groupby(heapq.merge(*(names_in(p) for p in partitions))))
        names = list(itertools.islice(merged, None if limit is None else limit + 1))
        more = limit is not None and len(names) > limit
        return DirectoryPage(names[:limit] if more else names, requests[0], more)

    def part(self, prefix: str, days: Iterable[int], part: int) -> DirectoryPage:
        """Every name starting with ``prefix`` in partition ``part`` of ``days`` (part 0 also reads the previous
        release's partition of each day), merged: a close divides a period's counters among the partitions."""
        names: set[str] = set()
        requests = 0
        for day in days:
            partitions = day_partitions(day)
            for partition in (partitions[part], partitions[-1]) if part == 0 else (partitions[part],):
                request = self._names_request(partition, prefix, consistent=False)
                while True:
                    response = retried_while_throttled(self.backoff, self.client.query, **request)
                    requests += 1
                    names.update(item[COUNTS_TABLE.sort_key]["S"] for item in response.get("Items", []))
                    if "LastEvaluatedKey" not in response:
                        break
                    request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return DirectoryPage(sorted(names), requests, more=False)

    def _names_request(self, partition: str, prefix: str, consistent: bool) -> dict[str, Any]:
        """A Query of one directory partition's names starting with ``prefix``, names only."""
        return {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk" + (" AND begins_with(#sk, :prefix)" if prefix else ""),
            "ProjectionExpression": "#sk",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key, "#sk": COUNTS_TABLE.sort_key},
            "ExpressionAttributeValues": {":pk": {"S": partition}, **({":prefix": {"S": prefix}} if prefix else {})},
            "ConsistentRead": consistent,
        }

    def exceeds(self, prefix: str, days: Iterable[int], limit: int, consistent: bool = False) -> tuple[bool, int]:
        """Whether one partition alone holds more than ``limit`` names starting with ``prefix`` on ``days`` (so a
        listing of them all would too), and the Queries made: one, of at most ``limit + 1`` names, where a
        listing reads every partition of every day. False says nothing about the other partitions."""
        partition = day_partitions(max(days))[0]
        request = {**self._names_request(partition, prefix, consistent), "Limit": limit + 1}
        response = retried_while_throttled(self.backoff, self.client.query, **request)
        return len(response.get("Items", [])) > limit, 1

"""The counts table as tally uses it: its commit path, its read path, its settings item and its backfill claims."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from tally.core.retry import Backoff, commit_backoff, sketch_backoff
from tally.core.settings import Settings
from tally.dynamo.backfill import BackfillClaims
from tally.dynamo.closing import ProgressReads
from tally.dynamo.calls import Key, batch_write, key_of
from tally.core.commit import ReadAgain
from tally.core.lanes import LaneHistory
from tally.dynamo.commit import COMMIT_WORKERS, PREVIOUS_RELEASE_MARGIN_MS, SegmentCommits
from tally.dynamo.fetch import Fetches
from tally.dynamo.settings import PublishedSettingsItem
from tally.dynamo.unresolved import UnresolvedItems


class CountsTable(SegmentCommits, Fetches, PublishedSettingsItem, BackfillClaims, UnresolvedItems, ProgressReads):
    """The counts table as tally uses it, over a low-level boto3 DynamoDB client.

    Each part is in the module of what it serves: ``commit`` in ``dynamo/commit.py``, ``batch_get``, ``query``,
    ``counter_items`` and ``has_counter`` in ``dynamo/fetch.py``, the settings item in ``dynamo/settings.py``,
    ``claim_backfill`` in ``dynamo/backfill.py``, the unresolved records and their repair in ``dynamo/unresolved.py``,
    ``calendar_progress`` (the zones' close progress, held a minute) in ``dynamo/closing.py``.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        settings: Settings,
        backoff: Callable[[], Backoff] | None = None,
        *,
        workers: int = COMMIT_WORKERS,
        previous_release_until_ms: int | None = None,
        read_again: ReadAgain | None = None,
        lanes: LaneHistory | None = None,
    ) -> None:
        """``backoff`` paces every retry when given; by default reads use ``Backoff`` and commits ``commit_backoff``.

        ``workers``: updates of a segment sent at once. ``previous_release_until_ms``:
        segments whose first record arrived before it are checked for the previous
        release's markers (default: this process's start plus PREVIOUS_RELEASE_MARGIN_MS).
        Sketch merges use ``sketch_backoff`` unless ``backoff`` is given. ``read_again``: what reads a shard's
        records again to split an overlap (``ShardRecords(streams_client).read``); without it such an item is
        left unresolved. ``lanes``: the lanes over time to commit with; by default the table's history, read at
        the first commit and again once a minute (none written: ``settings.bucket_lanes`` throughout).
        """
        self.client = client
        self.table_name = table_name
        self.settings = settings
        self.backoff = backoff or Backoff
        self.commit_backoff = backoff or commit_backoff
        self.sketch_backoff = backoff or sketch_backoff
        self.workers = workers
        self.read_again = read_again
        self.lanes = lanes
        self._lanes_read = None
        self._progress_read = {}
        self._anchors = {}
        if previous_release_until_ms is None:
            previous_release_until_ms = int(time.time() * 1000) + PREVIOUS_RELEASE_MARGIN_MS
        self.previous_release_until_ms = previous_release_until_ms

    def delete_items(self, keys: Iterable[Key], on_deleted: Callable[[int], None] | None = None) -> int:
        """Delete items by key with BatchWriteItem, unprocessed ones retried until none are left."""
        requests = [{"DeleteRequest": {"Key": key_of(pk, sk)}} for pk, sk in keys]
        return batch_write(self.client, self.table_name, requests, backoff=self.backoff, on_written=on_deleted)

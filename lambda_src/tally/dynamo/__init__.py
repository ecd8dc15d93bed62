"""All DynamoDB I/O of the counts table, one module for each thing it serves.

- ``commit``: record -> event -> segment -> commit, a segment's updates and sketch merges;
- ``fetch``: window -> plan -> fetch -> sum, bucket items read by key and by range;
- ``directory``: the counter directory; ``ranking``: the rank index;
- ``settings``: the published settings item; ``backfill``: the backfill's claims;
- ``counts_table``: ``CountsTable``, the commit and read paths, settings item and claims over one client;
- ``tables``: both tables created as the stack creates them (locally and in tests);
- ``calls``: one request retried while throttled, batch writes, error codes.

Everything here retries what DynamoDB asks to be retried (throttling, lost answers, unprocessed keys)
with jittered exponential backoff, and raises everything else: a lost write must surface as a failed
invocation, never as a silently low count. The pure rules these modules carry out are in ``tally.core``.

``tally.dynamo.CountsTable`` is documented (reading the published settings, docs/local.md), so it stays
importable from here; the modules of the package import it from ``tally.dynamo.counts_table``.
"""

from __future__ import annotations

from tally.dynamo.counts_table import CountsTable

__all__ = ["CountsTable"]

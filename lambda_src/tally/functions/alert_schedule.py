"""The alert function (``scheduled``): once a minute, an EventBridge schedule has the rules' alerts judged.

It shares the stream function's logger, metrics and alert watcher
(``tally.functions.stream_handler``), and so its environment, on a counts
table of its own that reads and judges but counts nothing.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tally.dynamo.counts_table import CountsTable
from tally.functions.stream_handler import alert_watcher, logger, metrics, new_counts_table, publish_alerts


@cache
def scheduled_table() -> CountsTable:
    """The scheduled alert entry's table: it reads and judges, it does not count, so it publishes nothing."""
    return new_counts_table()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def scheduled(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Once a minute (an EventBridge schedule): clearing, below alerts and pending events. A retry of the
    same scheduled event carries the same id, so it finishes the crossings it made."""
    watcher = alert_watcher(scheduled_table())
    summary = watcher.scheduled(f"schedule:{event.get('id') or event.get('time') or ''}")
    logger.info("alerts evaluated", extra=dataclasses.asdict(summary))
    publish_alerts(summary)
    return dataclasses.asdict(summary)

"""The stream function (``handler``): wires boto3, Powertools logs and metrics to ``invocation.process``.

Its logger, metrics, counts table and alert watcher serve the alert function
too (``tally.functions.alert_schedule``).

Environment: COUNTS_TABLE and the TALLY_* settings (see core/settings.py);
TALLY_ALERT_BUS, the EventBridge bus alert events go to (default: the default bus);
POWERTOOLS_SERVICE_NAME and POWERTOOLS_METRICS_NAMESPACE name the logs and
metrics (defaults: ``tally`` and ``Tally``).
"""

from __future__ import annotations

import os
import sys
import time
from functools import cache, lru_cache
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tally.alerting import ENV_ALERT_BUS, AlertSummary, EventBus, Watcher
from tally.dynamo.commit import COMMIT_WORKERS
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.directory import CounterDirectory
from tally.dynamo.stream import ShardRecords
from tally.invocation import Summary, process
from tally.core.settings import Settings

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "tally")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Tally")
# Rejected records (and unresolved items) are logged one by one up to this many per invocation, then summarized.
MAX_LOGGED_REJECTIONS = 20

logger = Logger(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=NAMESPACE)


@cache
def counts_table() -> CountsTable:
    """Created once per execution environment, at the first invocation, which also makes its lanes the table's
    (from a few minutes on) and publishes the settings."""
    table = new_counts_table()
    table.adopt_lanes(int(time.time() * 1000))  # before publishing: the first history starts with the last's lanes
    _publish_settings(table)
    return table


def new_counts_table() -> CountsTable:
    """A counts table on boto3's clients, with the settings of the environment."""
    settings = Settings.from_env()
    config = Config(retries={"mode": "standard"}, max_pool_connections=COMMIT_WORKERS)
    # The Streams API allows 5 reads a second a shard, shared with the mapping's own poller: adaptive retries pace
    # a long range's pages to what it grants instead of failing the invocation after three throttled tries.
    paced = Config(retries={"mode": "adaptive", "max_attempts": 10})
    streams = ShardRecords(boto3.client("dynamodbstreams", config=paced))
    return CountsTable(boto3.client("dynamodb", config=config), settings.counts_table, settings, read_again=streams.read)


def _publish_settings(table: CountsTable) -> None:
    """Say in the counts table what this function counts with, so a producer can check it will be counted.

    One PutItem per execution environment. A failure costs only the check, never the counting: logged, not raised.
    """
    publisher = os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or os.path.basename(sys.argv[0]) or "tally"
    try:
        table.publish_settings(publisher, int(time.time() * 1000))
    except (BotoCoreError, ClientError) as error:
        logger.warning("settings not published", extra={"error": f"{type(error).__name__}: {error}"[:300]})


@lru_cache(maxsize=1)
def counter_directory(table: CountsTable) -> CounterDirectory:
    """Once per execution environment too: it remembers the entries it wrote, so a warm function puts each once."""
    return CounterDirectory(table.client, table.table_name, table.settings)


@lru_cache(maxsize=2)  # the stream function's table and the alert function's (alert_schedule)
def alert_watcher(table: CountsTable) -> Watcher:
    """The rules' alerts, judged after each commit and by the schedule; events on TALLY_ALERT_BUS."""
    bus = EventBus(boto3.client("events"), os.environ.get(ENV_ALERT_BUS) or "default")
    return Watcher(table, bus, directory=counter_directory(table))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    table = counts_table()
    commit = counter_directory(table).recording(table.commit)
    watcher = alert_watcher(table)
    if watcher.alerts:  # no alerts, no cost
        watcher.summary = AlertSummary()
        commit = watcher.watching(commit)
    response, summary = process(event, commit, table.settings, table.read_again)
    _log(summary, event)
    _publish(summary)
    if watcher.alerts:
        publish_alerts(watcher.summary)
    return response


def _log(summary: Summary, event: dict[str, Any]) -> None:
    if summary.discarded_states:
        logger.error(
            "window state discarded",
            extra={"detail": summary.discarded_state_detail, "shard": event.get("shardId"), "window": event.get("window")},
        )
    for unresolved in summary.unresolved[:MAX_LOGGED_REJECTIONS]:
        counter, bucket = unresolved.item
        logger.error(
            "item left unresolved",
            extra={
                "counter": counter,
                "bucket": bucket.sort_key,
                "records": f"{unresolved.first}..{unresolved.last}",
                "missing_at_most": unresolved.missing_at_most,
                "detail": unresolved.why,
                "repair": f"scripts/audit.py {counter} --repair",
                "shard": event.get("shardId"),
            },
        )
    if len(summary.unresolved) > MAX_LOGGED_REJECTIONS:
        logger.error(
            "more items left unresolved",
            extra={"items": len(summary.unresolved) - MAX_LOGGED_REJECTIONS, "shard": event.get("shardId"),
                   "repair": "scripts/audit.py --repair"},
        )
    for rejection in summary.rejections[:MAX_LOGGED_REJECTIONS]:
        logger.warning(
            "record rejected",
            extra={
                "reason": rejection.reason.value,
                "rule": rejection.rule,
                "detail": rejection.detail,
                "sequence": rejection.sequence,
            },
        )
    growth = summary.item_growth()
    if growth is not None:
        # Items this large cost their updates several write units each and grow with every shard the stream
        # gains, until the commits stop keeping up: the value to set comes with the warning (ItemGrowthAlarm).
        logger.warning(
            "bucket items growing",
            extra={**growth.as_log_fields(), "shard": event.get("shardId"), "window": event.get("window")},
        )
    logger.info(
        "invocation done",
        extra={
            **summary.as_log_fields(),
            "shard": event.get("shardId"),
            "window": event.get("window"),
            "final": event.get("isFinalInvokeForWindow"),
        },
    )


def _publish(summary: Summary) -> None:
    metrics.add_metric(name="RecordsCounted", unit=MetricUnit.Count, value=summary.counted)
    metrics.add_metric(name="RecordsSkipped", unit=MetricUnit.Count, value=summary.skipped)
    metrics.add_metric(name="RecordsRejected", unit=MetricUnit.Count, value=summary.rejected_total)
    metrics.add_metric(name="BucketUpdates", unit=MetricUnit.Count, value=summary.bucket_updates)
    metrics.add_metric(name="UpdatesAlreadyApplied", unit=MetricUnit.Count, value=summary.updates_already_applied)
    metrics.add_metric(name="UpdatesResumed", unit=MetricUnit.Count, value=summary.updates_resumed)
    metrics.add_metric(name="CommitRetries", unit=MetricUnit.Count, value=summary.commit_retries)
    if summary.bucket_updates:  # what they cost: the dashboard divides by BucketUpdates, the alarm reads the largest
        metrics.add_metric(name="BucketWriteUnits", unit=MetricUnit.Count, value=summary.bucket_write_units)
        metrics.add_metric(
            name="LargestBucketItemKB", unit=MetricUnit.Kilobytes, value=summary.largest_bucket_write_units
        )
    if summary.sketches_written or summary.sketch_conflicts:  # distinct rules only: no cost for the others
        metrics.add_metric(name="SketchesWritten", unit=MetricUnit.Count, value=summary.sketches_written)
        metrics.add_metric(name="SketchConflicts", unit=MetricUnit.Count, value=summary.sketch_conflicts)
    metrics.add_metric(name="WindowStatesDiscarded", unit=MetricUnit.Count, value=summary.discarded_states)
    if summary.rebuilt_states:
        metrics.add_metric(name="WindowStatesRebuilt", unit=MetricUnit.Count, value=summary.rebuilt_states)
    metrics.add_metric(name="ItemsUnresolved", unit=MetricUnit.Count, value=len(summary.unresolved))
    if summary.overlaps_read:
        metrics.add_metric(name="OverlapsReadAgain", unit=MetricUnit.Count, value=summary.overlaps_read)
    if summary.stream_requests:  # only an overlap or an unreadable state reads the stream again
        metrics.add_metric(name="StreamReadRequests", unit=MetricUnit.Count, value=summary.stream_requests)
    for reason, count in summary.rejected.items():
        # One blob per reason: EMF gives all metrics of a blob the same dimensions.
        by_reason = EphemeralMetrics(service=SERVICE, namespace=NAMESPACE)
        by_reason.add_dimension(name="reason", value=reason.value)
        by_reason.add_metric(name="RecordsRejected", unit=MetricUnit.Count, value=count)
        by_reason.flush_metrics()
    for rule, count in summary.rejected_by_rule.items():
        by_rule = EphemeralMetrics(service=SERVICE, namespace=NAMESPACE)
        by_rule.add_dimension(name="rule", value=rule)
        by_rule.add_metric(name="RecordsRejected", unit=MetricUnit.Count, value=count)
        by_rule.flush_metrics()


def publish_alerts(summary: AlertSummary) -> None:
    """What an evaluation of the alerts did: after a window's commits, and after each scheduled one."""
    metrics.add_metric(name="AlertCrossings", unit=MetricUnit.Count, value=summary.crossings)
    metrics.add_metric(name="AlertEventsPut", unit=MetricUnit.Count, value=summary.delivered)
    metrics.add_metric(name="AlertEventsPending", unit=MetricUnit.Count, value=summary.delivery_failures)

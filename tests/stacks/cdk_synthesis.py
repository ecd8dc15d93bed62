"""Synthesizing the app and reading the cloud assembly, shared by the stack tests."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# `stacks` lives at the repository root, which `pytest` (unlike `python -m pytest`)
# does not put on sys.path; the Node process must start with these set.
REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")

import aws_cdk as cdk  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

STACK_NAME = "Tally"
OVERRIDDEN_STACK_NAME = "Overridden"
IMPORTED_STACK_NAME = "Adopting"
# Logical ids of the read API's resources hold this (its construct's id inside Tally).
READ_API_ID = "ReadApi"
# ... and those of the in-account backfill's (switched on by backfillExports).
BACKFILL_ID = "Backfill"
# ... and those of the close of days and months (switched on by calendarPrefixes).
CLOSE_ID = "Close"

ORDERS_STREAM_ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-01T00:00:00.000"
# As `make synth CDK_ARGS="-c eventsTableName=orders -c eventsStreamArn=... -c countFrom=..."` gives them.
IMPORTED_CONTEXT = {
    "stackName": IMPORTED_STACK_NAME,
    "eventsTableName": "orders",
    "eventsStreamArn": ORDERS_STREAM_ARN,
    "countFrom": "2026-11-23T10:00:00Z",
    # The backfill in the account, reading the exports the adoption takes into this prefix.
    "backfillExports": "s3://orders-exports/tally",
    # Days and months of every order counter in UTC and in Berlin, closed in the account (JSON, as in cdk.json).
    "calendarPrefixes": ["orders"],
    "calendarZones": ["Europe/Berlin"],
}

# As `-c key=value` delivers them: strings.
CONTEXT_OVERRIDES = {
    "tumblingWindowSeconds": "300",
    "batchSize": "250",
    "counterAttribute": "metric",
    "minuteRetentionHours": "72",
    "eventsTableRemovalPolicy": "destroy",
    "countsTableRemovalPolicy": "retain",
    "powertoolsLayerVersion": "31",
    "alarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:tally-alarms",
    "rules": '[{"name": "jobs", "counter": "jobs/{providerId}"}, '
    '{"name": "revenue", "counter": "revenue/{shop}", "when": {"status": {"equals": "paid"}}, "sum": "amount"}, '
    '{"name": "done", "counter": "done/{providerId}", "becomes": {"status": {"equals": "done"}}, "time": "doneAt"}]',
    # Public read of two prefixes, with the dashboard and browser origins, as a blog would deploy it.
    "apiPublicPrefixes": "views/,load/",
    "apiPublicCacheSeconds": "30",
    "apiPublicRateLimit": "20",
    "apiPublicBurstLimit": "40",
    "apiCorsOrigins": '["https://blog.example.com", "http://localhost:3000"]',
    "apiDashboard": "true",
    "apiLatencyAlarmMs": "800",
    "rankedPrefixes": "jobs/,revenue/",  # top lists of these two, certified from rank records
    # Revenue's days and months in UTC and New York, kept longer than the defaults, closed in the account.
    "calendarPrefixes": "revenue/",
    "calendarZones": '["America/New_York"]',
    "dayRetentionDays": "800",
    "monthRetentionMonths": "120",
}


@dataclass(frozen=True)
class Synthesis:
    """What one `app.synth()` produced, read from its cloud assembly directory."""

    outdir: Path
    templates: dict[str, dict[str, Any]]
    validation_error: str | None

    def template(self, stack_name: str = STACK_NAME) -> Template:
        return Template.from_json(self.templates[stack_name])

    def function_asset(self, stack_name: str = STACK_NAME) -> dict[str, Any]:
        """The assets manifest's entry for the code of the counting function (the read function shares it)."""
        template = self.templates[stack_name]
        counting = counting_part(template)["Resources"].values()
        (function,) = [r for r in counting if r["Type"] == "AWS::Lambda::Function"]
        key = function["Properties"]["Code"]["S3Key"]
        assets = json.loads((self.outdir / f"{stack_name}.assets.json").read_text())["files"]
        (asset,) = [
            entry for entry in assets.values() if any(d["objectKey"] == key for d in entry["destinations"].values())
        ]
        return asset

    def function_asset_folder(self, stack_name: str = STACK_NAME) -> Path:
        """Where the synthesis staged that code."""
        return self.outdir / self.function_asset(stack_name)["source"]["path"]

    @property
    def validation_report(self) -> dict[str, Any]:
        return json.loads((self.outdir / "validation-report.json").read_text())


def synthesize(app: cdk.App, outdir: Path, stack_names: list[str]) -> Synthesis:
    """Synthesize; a failed validation still leaves the templates on disk to inspect."""
    try:
        app.synth()
        validation_error = None
    except RuntimeError as error:
        if "ValidationFailed" not in str(error):
            raise
        validation_error = str(error)
    templates = {name: json.loads((outdir / f"{name}.template.json").read_text()) for name in stack_names}
    return Synthesis(outdir=outdir, templates=templates, validation_error=validation_error)


def counting_part(template: dict[str, Any]) -> dict[str, Any]:
    """The template without the read API, the backfill and the close: what counts events (their tests read the
    whole)."""
    resources = {
        name: body
        for name, body in template["Resources"].items()
        if READ_API_ID not in name and not name.startswith((BACKFILL_ID, CLOSE_ID))
    }
    return {**template, "Resources": resources}


def cdk_json_context() -> dict[str, Any]:
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]

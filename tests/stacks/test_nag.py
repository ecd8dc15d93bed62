"""cdk-nag's AWS Solutions checks pass, and every acknowledged finding says why."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from cdk_synthesis import Synthesis, synthesize

pytestmark = pytest.mark.cdk

ACKNOWLEDGED_RULES_METADATA = "aws:cdk:acknowledged-rules"

# Each acknowledgment, where it sits and the finding it covers. Anything else must be fixed.
EXPECTED_ACKNOWLEDGMENTS = {
    "/Tally/FailureQueue": "AwsSolutions::AwsSolutions-SQS3",
    "/Tally/CountingFunctionRole": "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
    "/Tally/CountingFunction": "AwsSolutions::AwsSolutions-L1",
}


def test_aws_solutions_checks_report_nothing(default_synthesis: Synthesis):
    assert default_synthesis.validation_error is None
    violations = [
        (violation["ruleName"], construct["constructPath"])
        for report in default_synthesis.validation_report["pluginReports"]
        for violation in report["violations"]
        for construct in violation["violatingConstructs"]
    ]
    assert violations == []


def test_only_the_reviewed_findings_are_acknowledged_with_reasons(default_synthesis: Synthesis):
    acknowledged = {
        path: entry["data"]
        for path, entries in default_synthesis.metadata().items()
        for entry in entries
        if entry["type"] == ACKNOWLEDGED_RULES_METADATA
    }

    assert {path: list(rules) for path, rules in acknowledged.items()} == {
        path: [rule] for path, rule in EXPECTED_ACKNOWLEDGMENTS.items()
    }
    for rules in acknowledged.values():
        for reason in rules.values():
            assert len(reason.split()) >= 15, f"reason too thin for a reviewer: {reason!r}"


def test_the_checks_do_fail_an_app_that_breaks_a_rule(tmp_path):
    """Guards the wiring: a plugin that never ran would also report nothing."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Careless")
    sqs.Queue(stack, "PlainQueue")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))

    synthesis = synthesize(app, tmp_path, ["Careless"])

    assert synthesis.validation_error is not None
    rules = {violation["ruleName"] for report in synthesis.validation_report["pluginReports"] for violation in report["violations"]}
    assert {"AwsSolutions-SQS3", "AwsSolutions-SQS4"} <= rules

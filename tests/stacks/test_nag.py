"""cdk-nag's AWS Solutions checks pass, and every acknowledged finding says why."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from cdk_synthesis import Synthesis, synthesize

pytestmark = pytest.mark.cdk

# Each acknowledgment, where it sits and the finding it covers. Anything else must be fixed.
EXPECTED_ACKNOWLEDGMENTS = {
    ("Tally/Default/FailureQueue", "AwsSolutions::AwsSolutions-SQS3"),
    ("Tally/Default/CountingFunctionRole", "AwsSolutions::AwsSolutions-IAM5[Resource::*]"),
    ("Tally/Default/CountingFunction", "AwsSolutions::AwsSolutions-L1"),
    ("Tally/Default/ReadApi/ReadFunction", "AwsSolutions::AwsSolutions-L1"),
}


def violations(synthesis: Synthesis) -> list[tuple[str, str]]:
    return [
        (violation["ruleName"], construct["constructPath"])
        for report in synthesis.validation_report["pluginReports"]
        for violation in report["violations"]
        for construct in violation["violatingConstructs"]
    ]


def test_aws_solutions_checks_report_nothing(default_synthesis: Synthesis):
    (report,) = default_synthesis.validation_report["pluginReports"]

    assert default_synthesis.validation_error is None
    assert (report["pluginName"], report["conclusion"]) == ("AwsSolutions", "success")
    assert violations(default_synthesis) == []


def test_context_overrides_and_alarm_actions_pass_the_checks_too(overridden_synthesis: Synthesis):
    assert overridden_synthesis.validation_error is None
    assert violations(overridden_synthesis) == []


def test_an_imported_events_table_passes_the_checks_too(imported_synthesis: Synthesis):
    assert imported_synthesis.validation_error is None
    assert violations(imported_synthesis) == []


def test_only_the_reviewed_findings_are_acknowledged_each_with_a_reason(default_synthesis: Synthesis):
    (report,) = default_synthesis.validation_report["pluginReports"]
    suppressed = report["suppressedViolations"]

    assert {(entry["acknowledgedAt"], entry["acknowledgedId"]) for entry in suppressed} == EXPECTED_ACKNOWLEDGMENTS
    assert len(suppressed) == len(EXPECTED_ACKNOWLEDGMENTS), "an acknowledgment covers more than one finding"
    for entry in suppressed:
        assert len(entry["reason"].split()) >= 15, f"reason too thin for a reviewer: {entry['reason']!r}"


def test_the_checks_do_fail_an_app_that_breaks_a_rule(tmp_path):
    """Guards the wiring: a plugin that never ran would also report nothing."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Careless")
    sqs.Queue(stack, "PlainQueue")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))

    synthesis = synthesize(app, tmp_path, ["Careless"])

    assert synthesis.validation_error is not None
    assert {"AwsSolutions-SQS3", "AwsSolutions-SQS4"} <= {rule for rule, _ in violations(synthesis)}

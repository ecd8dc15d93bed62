"""cfn-lint finds nothing in the synthesized templates beyond what CDK itself emits."""

from __future__ import annotations

import contextlib
import json

import pytest
import time_machine
from cfnlint.api import ManualArgs, lint
from cdk_synthesis import IMPORTED_STACK_NAME, OVERRIDDEN_STACK_NAME, STACK_NAME, Synthesis

pytestmark = pytest.mark.cdk

REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2"]

IGNORED_RULES = {
    # Experimental, informational: asks for a hand-written architecture summary in
    # template Metadata, which CDK does not generate.
    "I4010",
    # CDK makes the function depend on its role and the role's default policy, so it
    # never runs without its permissions; the role half repeats what the Role GetAtt
    # already implies, which is redundant, not wrong.
    "W3005",
    # Informational: CDK renders token concatenation as Fn::Join rather than Fn::Sub.
    "I1022",
}


def on_the_real_calendar():
    """cfn-lint judges a runtime's deprecation (E2533, W2531) by today's date: the real one, also under `make test-anytime`.

    A moved clock would fail the lint for a runtime retired years from now; on the real calendar the same rule
    is the reminder to move the function to a newer runtime before Lambda stops updating it.
    """
    if time_machine.escape_hatch.is_travelling():
        return time_machine.travel(time_machine.escape_hatch.time.time(), tick=True)
    return contextlib.nullcontext()


def findings(template: dict) -> list[str]:
    with on_the_real_calendar():
        matches = lint(
            json.dumps(template),
            config=ManualArgs(regions=REGIONS, include_checks=["I"], include_experimental=True),
        )
    return [f"{match.rule.id} {'/'.join(map(str, match.path))}: {match.message}" for match in matches if match.rule.id not in IGNORED_RULES]


def test_default_template_is_clean(default_synthesis: Synthesis):
    assert findings(default_synthesis.templates[STACK_NAME]) == []


@pytest.mark.parametrize("stack_name", [OVERRIDDEN_STACK_NAME])
def test_overridden_templates_are_clean(overridden_synthesis: Synthesis, stack_name: str):
    assert findings(overridden_synthesis.templates[stack_name]) == []


def test_the_template_of_an_imported_table_is_clean(imported_synthesis: Synthesis):
    assert findings(imported_synthesis.templates[IMPORTED_STACK_NAME]) == []

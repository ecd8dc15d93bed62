"""cfn-lint finds nothing in the synthesized templates beyond what CDK itself emits."""

from __future__ import annotations

import json

import pytest
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


def findings(template: dict) -> list[str]:
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

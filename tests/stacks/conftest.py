"""Synthesize the CDK app once per session; every stack test reads the result.

Synthesis takes seconds, so the app `cdk synth` builds (cdk-nag checks
included) and one app with overridden context are each synthesized once.
"""

from __future__ import annotations

import pytest

# First: it puts the repository root on sys.path and prepares the environment
# before aws_cdk starts its Node process.
from cdk_synthesis import (  # isort: skip
    CONTEXT_OVERRIDES,
    IMPORTED_CONTEXT,
    IMPORTED_STACK_NAME,
    OVERRIDDEN_STACK_NAME,
    STACK_NAME,
    Synthesis,
    cdk_json_context,
    synthesize,
)

import aws_cdk as cdk  # noqa: E402
from app import build_app  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from stacks import TallyStack  # noqa: E402


@pytest.fixture(scope="session")
def default_synthesis(tmp_path_factory: pytest.TempPathFactory) -> Synthesis:
    """The app exactly as `cdk synth` builds it from cdk.json, cdk-nag checks included."""
    outdir = tmp_path_factory.mktemp("cdk-default")
    app = build_app(outdir=str(outdir), context=cdk_json_context())
    return synthesize(app, outdir, [STACK_NAME])


@pytest.fixture(scope="session")
def overridden_synthesis(tmp_path_factory: pytest.TempPathFactory) -> Synthesis:
    """Context overrides as `-c` gives them."""
    outdir = tmp_path_factory.mktemp("cdk-overridden")
    app = cdk.App(outdir=str(outdir), context=CONTEXT_OVERRIDES)
    TallyStack(app, OVERRIDDEN_STACK_NAME)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return synthesize(app, outdir, [OVERRIDDEN_STACK_NAME])


@pytest.fixture(scope="session")
def imported_synthesis(tmp_path_factory: pytest.TempPathFactory) -> Synthesis:
    """The app `cdk synth` builds when the context names an existing events table and its stream."""
    outdir = tmp_path_factory.mktemp("cdk-imported")
    app = build_app(outdir=str(outdir), context={**cdk_json_context(), **IMPORTED_CONTEXT})
    return synthesize(app, outdir, [IMPORTED_STACK_NAME])

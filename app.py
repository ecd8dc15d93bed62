#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` runs this with the repository's virtualenv (see cdk.json)."""

import sys
from pathlib import Path

# The tally package is installed editable by `make install`; adding its source
# directory keeps `cdk synth` working from a virtualenv that predates it.
sys.path.insert(0, str(Path(__file__).resolve().parent / "lambda_src"))

import aws_cdk as cdk  # noqa: E402

from stacks import TallyStack  # noqa: E402
from stacks.context import stack_name_from_context  # noqa: E402

app = cdk.App()
TallyStack(app, stack_name_from_context(app.node.try_get_context))
app.synth()

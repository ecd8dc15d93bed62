#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` runs this with the repository's virtualenv (see cdk.json).

cdk-nag's AWS Solutions checks run on every synth, so `cdk deploy` refuses a
stack with an unacknowledged finding.
"""

import sys
from pathlib import Path

# tally and tally_cdk are installed editable by `make install`; adding their source
# directories keeps `cdk synth` working from a virtualenv that predates them.
ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT / "lambda_src"), str(ROOT / "stacks")]

import aws_cdk as cdk  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from stacks import TallyStack  # noqa: E402
from tally_cdk import ContextError, ReadApiSettingsError, TallyConfigurationError  # noqa: E402
from tally_cdk.context import stack_name_from_context  # noqa: E402


def build_app(**app_props) -> cdk.App:
    """The app `cdk synth` builds; tests pass an outdir and context of their own."""
    app = cdk.App(**app_props)
    TallyStack(app, stack_name_from_context(app.node.try_get_context))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main(**app_props) -> int:
    """Synthesize; a bad context value is one line naming its key, not a traceback through jsii."""
    try:
        build_app(**app_props).synth()
    except ContextError as error:
        print(f"tally: {error} (set it in cdk.json or with -c key=value)", file=sys.stderr)
        return 1
    except (TallyConfigurationError, ReadApiSettingsError) as error:
        print(f"tally: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

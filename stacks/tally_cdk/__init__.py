"""tally_cdk: the Tally construct, to attach tally to a DynamoDB table in any CDK app.

    from tally_cdk import StackSettings, Tally

Its own import name, so it imports beside an app's own ``stacks`` package.
"""

from tally_cdk.construct import Tally, TallyConfigurationError
from tally_cdk.context import ContextError, StackSettings
from tally_cdk.read_api import ReadApiSettings, ReadApiSettingsError

__all__ = ["ContextError", "ReadApiSettings", "ReadApiSettingsError", "StackSettings", "Tally", "TallyConfigurationError"]

"""CDK stacks of tally: the Tally construct, and the stack that deploys it."""

from stacks.tally_construct import Tally, TallyConfigurationError
from stacks.tally_stack import TallyStack

__all__ = ["Tally", "TallyConfigurationError", "TallyStack"]

"""CDK stacks of tally."""

from stacks.tally_stack import TallyStack

__all__ = ["TallyStack"]

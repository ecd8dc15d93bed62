"""This app's CDK stack: the events table and the Tally construct (package ``tally_cdk``) counting it."""

from stacks.tally_stack import TallyStack

__all__ = ["TallyStack"]

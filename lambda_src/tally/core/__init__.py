"""The pure core: bucket math, record parsing, segment folding, commit items, windows and plans.

Nothing here performs I/O, so every rule that decides a count is testable
without DynamoDB.
"""

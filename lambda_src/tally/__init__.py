"""tally: exact rolling-window counters from DynamoDB Streams.

Write path: stream record -> event (records) -> segment (segments) -> commit
(commit, dynamo). Read path: window (windows) -> plan (plans) -> fetch (dynamo)
-> sum (sums), tied together by query.
"""

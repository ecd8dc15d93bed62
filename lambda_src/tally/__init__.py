"""tally: exact rolling-window counters from DynamoDB Streams.

Layout (the Lambda asset ships everything but ``local``):

- ``core/``: pure rules. Write path: stream record -> event (records) -> segment
  (segments) -> commit items (commit). Read path: window (windows) -> plan
  (plans) -> sum (sums).
- ``dynamo``: the one module that talks to DynamoDB (commits and fetches).
- ``invocation``, ``handler``: the Lambda edge; ``query``: window -> plan -> fetch -> sum.
- ``local/``: the local toolkit (moto server, stream runner, workload), not deployed.
"""

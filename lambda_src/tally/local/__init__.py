"""The local toolkit: the embedded moto server, the stream runner, the workload generator.

It runs on a developer's machine or CI, never in Lambda: the stack leaves this
folder out of the function's asset.
"""

"""The two servers that play DynamoDB on this machine, as a test parameter.

``@pytest.mark.parametrize("backend", BACKENDS)`` runs a test on moto's server and
on DynamoDB Local; the ``local_server`` fixture (conftest.py) gives the running one.
"""

import pytest

BACKENDS = ["moto", pytest.param("dynamodb-local", marks=pytest.mark.dynamodb_local)]

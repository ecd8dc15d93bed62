"""The read function (``handler``): API Gateway's requests (HTTP API, payload 2.0) answered by ``tally.http_api``.

Environment: COUNTS_TABLE and the TALLY_* settings (see core/settings.py), and
the API's own TALLY_API_* (``tally.core.api_access.ApiSettings``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tally.http_api import VERSION_HEADER, app, logger
from tally.version import __version__


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Every answer, errors included, names the release that gave it (X-Tally-Version)."""
    response = app.resolve(event, context)
    response.setdefault("headers", {})[VERSION_HEADER] = __version__
    return response

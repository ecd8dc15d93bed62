"""The read function's entry point: API Gateway's event in, the routes' answer out, naming the release."""

from __future__ import annotations

import json

import pytest
from factories import LambdaContext

import tally
from tally import http_api
from tally.functions import read_api
from tally.local.http_adapter import http_api_event


@pytest.fixture
def settings_read_again():
    http_api.api_settings.cache_clear()
    yield
    http_api.api_settings.cache_clear()


@pytest.mark.parametrize(("path", "status"), [("/openapi.json", 200), ("/nowhere", 404)])
def test_every_answer_names_the_release_that_gave_it(settings_read_again, path, status):
    event = http_api_event("GET", path, [("host", "api.example")], route_key=f"GET {path}")
    response = read_api.handler(event, LambdaContext())
    assert response["statusCode"] == status, response["body"]
    assert response["headers"]["X-Tally-Version"] == tally.__version__
    assert json.loads(response["body"])

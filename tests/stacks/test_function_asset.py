"""The function's asset holds the runtime alone, and the handler runs from it.

A subprocess imports the handler from the staged asset folder with an import
guard that lets through only the standard library, boto3 (with what it needs)
and Powertools: what the Lambda runtime and the Powertools layer provide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tally.dynamo.tables import create_tables
from tally.local.aws import MotoServer, client

pytestmark = [pytest.mark.cdk, pytest.mark.server]

RECORDED_EVENT = Path(__file__).resolve().parents[1] / "events" / "dynamodb_stream_tumbling_window.json"

# Runs inside the subprocess: argv = asset folder, event file.
RUN_FROM_ASSET = r"""
import importlib.abc, json, sys

RUNTIME = {"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six",
           "aws_lambda_powertools", "typing_extensions", "tally",
           "pydantic", "pydantic_core", "annotated_types", "typing_inspection"}  # the layer ships Powertools' extras

class OnlyTheRuntime(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in RUNTIME or top in sys.stdlib_module_names or top.startswith("_"):
            return None
        raise ImportError(f"{name} is not in the Lambda runtime")

asset, event_file = sys.argv[1], sys.argv[2]
sys.meta_path.insert(0, OnlyTheRuntime())
sys.path.insert(0, asset)
import tally.functions.stream_handler
assert tally.functions.stream_handler.__file__.startswith(asset), tally.functions.stream_handler.__file__

class Context:
    function_name = "tally"; memory_limit_in_mb = 256; aws_request_id = "req-1"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tally"
    def get_remaining_time_in_millis(self): return 60_000

with open(event_file) as source:
    response = tally.functions.stream_handler.handler(json.load(source), Context())
print(json.dumps({"response": response, "modules": sorted({m.partition(".")[0] for m in sys.modules})}))
"""


def test_the_asset_holds_no_local_toolkit_and_no_test_or_infrastructure_import(default_synthesis):
    folder = default_synthesis.function_asset_folder()
    files = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*.py"))

    assert "tally/functions/stream_handler.py" in files and "tally/core/records.py" in files
    assert not [name for name in files if name.startswith("tally/local")]
    forbidden = ("moto", "rich", "hypothesis", "aws_cdk", "cdk_nag", "freezegun", "tally.local")
    for name in files:
        source = (folder / name).read_text()
        imports = [line.strip() for line in source.splitlines() if line.strip().startswith(("import ", "from "))]
        assert not [line for line in imports if any(f" {module}" in line for module in forbidden)], name


def asset_environment(server: MotoServer, **settings: str) -> dict[str, str]:
    """The environment the asset's code runs in: the server's, the function's settings, nothing on PYTHONPATH (the
    asset alone), and no bytecode written, as in Lambda, whose code folder is read-only: the asset stays as built."""
    env = {**os.environ, **server.environment(), **settings, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    return env


def test_the_handler_runs_a_recorded_event_from_the_asset_alone(default_synthesis, tmp_path):
    folder = default_synthesis.function_asset_folder()
    counts = f"counts-{uuid.uuid4().hex[:8]}"
    with MotoServer() as server:
        env = asset_environment(server, COUNTS_TABLE=counts, POWERTOOLS_METRICS_DISABLED="true")
        dynamodb = client("dynamodb", server.endpoint_url)
        create_tables(dynamodb, f"events-{counts}", counts)

        run = subprocess.run(
            [sys.executable, "-c", RUN_FROM_ASSET, str(folder), str(RECORDED_EVENT)],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        result = json.loads(run.stdout.strip().splitlines()[-1])
        items = dynamodb.query(
            TableName=counts,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "page-views"}},
        )["Items"]

    assert not {"moto", "rich", "hypothesis", "aws_cdk"} & set(result["modules"])
    assert result["response"] == {"state": {}}
    by_key = {item["sk"]["S"]: int(item["count"]["N"]) for item in items}
    assert by_key == {"H#2026-11-18T11": 2, "M#2026-11-18T11:06": 2}


# Runs inside the subprocess: the read function's handler, from the asset alone, for two requests.
READ_FROM_ASSET = RUN_FROM_ASSET.split("asset, event_file")[0] + r"""
asset = sys.argv[1]
sys.meta_path.insert(0, OnlyTheRuntime())
sys.path.insert(0, asset)
import tally.functions.read_api
assert tally.functions.read_api.__file__.startswith(asset), tally.functions.read_api.__file__

class Context:
    function_name = "tally-read"; memory_limit_in_mb = 512; aws_request_id = "req-2"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tally-read"
    def get_remaining_time_in_millis(self): return 10_000

def event(path, query):
    return {"version": "2.0", "routeKey": f"GET {path}", "rawPath": path, "rawQueryString": query, "headers": {},
            "requestContext": {"http": {"method": "GET", "path": path, "sourceIp": "192.0.2.1"}, "requestId": "r",
                               "stage": "$default", "routeKey": f"GET {path}"}, "isBase64Encoded": False}

answers = [tally.functions.read_api.handler(event(path, query), Context())
           for path, query in [("/counts", f"counter=page-views&window=24h&at={sys.argv[2]}"), ("/", ""),
                               ("/openapi.json", "")]]
print(json.dumps({"answers": answers, "modules": sorted({m.partition(".")[0] for m in sys.modules})}))
"""


def test_the_read_function_answers_from_the_asset_alone_and_serves_the_built_dashboard_and_its_description(default_synthesis, tmp_path):
    folder = default_synthesis.function_asset_folder()
    counts = f"counts-{uuid.uuid4().hex[:8]}"
    assert (folder / "tally" / "dashboard.html").is_file(), "make dashboard builds the page into the asset"
    with MotoServer() as server:
        env = asset_environment(server, COUNTS_TABLE=counts, TALLY_API_DASHBOARD="true")
        dynamodb = client("dynamodb", server.endpoint_url)
        create_tables(dynamodb, f"events-{counts}", counts)
        # The hour before a whole hour a day ago, wherever the clock stands: within the hour retention.
        at = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
        hour = f"H#{at - timedelta(hours=1):%Y-%m-%dT%H}"
        dynamodb.put_item(TableName=counts, Item={"pk": {"S": "page-views"}, "sk": {"S": hour}, "count": {"N": "7"}})

        run = subprocess.run(
            [sys.executable, "-c", READ_FROM_ASSET, str(folder), f"{at:%Y-%m-%dT%H:%MZ}"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
        )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    counted, page, description = result["answers"]

    assert counted["statusCode"] == 200, counted
    assert json.loads(counted["body"])["counts"][0]["total"] == 7
    assert page["statusCode"] == 200 and "uPlot" in page["body"]
    assert description["statusCode"] == 200 and "/counts" in json.loads(description["body"])["paths"]
    assert not {"moto", "rich", "hypothesis", "aws_cdk", "selenium"} & set(result["modules"])

"""Amazon's DynamoDB Local as the local toolkit's second backend: how it is chosen, and what it says when it is
missing. Where it and moto differ from DynamoDB as documented: test_backends.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tally.local.aws import MotoServer, local_server
from tally.local.cli import ScriptError
from tally.local.dynamodb_local import ENV_BACKEND, ENV_JAR, DynamoDBLocalServer, find_jar

pytestmark = pytest.mark.dynamodb_local

KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


def test_the_backend_defaults_to_moto(monkeypatch):
    monkeypatch.delenv(ENV_BACKEND, raising=False)
    assert isinstance(local_server(), MotoServer)


def test_a_missing_jar_or_java_says_what_to_install(monkeypatch, tmp_path):
    from tally.local import dynamodb_local as dynamodb_local_module

    monkeypatch.setenv(ENV_JAR, str(tmp_path / "DynamoDBLocal.jar"))
    with pytest.raises(ScriptError, match="no such file"):
        find_jar()
    monkeypatch.delenv(ENV_JAR)
    monkeypatch.setattr(dynamodb_local_module, "PACKAGE", Path("node_modules") / "not-installed")
    with pytest.raises(ScriptError, match="npm ci"):
        find_jar()
    monkeypatch.setattr(dynamodb_local_module.shutil, "which", lambda name: None)
    with pytest.raises(ScriptError, match="default-jre-headless"):
        DynamoDBLocalServer()

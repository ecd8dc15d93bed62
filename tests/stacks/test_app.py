"""`cdk synth` runs app.py: a bad context value must reach the operator as one line naming its key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cdk

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("context", "key"),
    [({"minuteRetentionHours": "25"}, "minuteRetentionHours"), ({"batchSize": "0"}, "batchSize")],
)
def test_a_bad_context_value_is_one_line_on_stderr(context, key, tmp_path):
    # The CDK CLI hands `-c key=value` to the app as CDK_CONTEXT_JSON.
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path)}
    finished = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert finished.returncode == 1
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1, finished.stderr
    assert key in lines[0] and "Traceback" not in finished.stderr

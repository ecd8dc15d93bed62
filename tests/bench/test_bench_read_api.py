"""The read API's load test runs bounded on loopback; it refuses to time answers that are not the stored totals."""

from __future__ import annotations

import pytest

from bench import read_api

pytestmark = pytest.mark.server


def test_a_short_run_times_the_api_and_the_library_on_the_same_window():
    figures = read_api.measure(cases=[(1, 1), (2, 3)], seconds=0.5)

    assert [(case["counters"], case["clients"]) for case in figures["cases"]] == [(1, 1), (2, 3)]
    for case in figures["cases"]:
        assert case["requests"] >= 1 and case["errors"] == 0
        assert case["seconds"] < 0.5 + read_api.REQUEST_TIMEOUT
        assert case["p50_ms"] <= case["p99_ms"]
        assert case["api_over_library_p50"] == round(case["p50_ms"] / case["library_p50_ms"], 2)
    assert {entry["counters"] for entry in figures["library"]} == {1, 2}


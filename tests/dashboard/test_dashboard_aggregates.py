"""The dashboard's quantiles and distinct counts, in headless Chromium, over a blog counted by its rules.

A blog's page views count distinct visitors per post, and its load times are a
summing histogram; the page shows each counter's distinct count and p50, p90
and p99 where it has them, exactly as the API answers them, and leaves the cells
of the others empty (a page of plain counters hides the columns:
`test_dashboard_page.py`).
"""

from __future__ import annotations

import json
import os
import urllib.request
from urllib.parse import urlencode

import pytest
from botocore.credentials import Credentials
from test_dashboard_page import WAIT_SECONDS, require_browser_and_page

from handler_state import handler_state_restored
from tally import http_api
from tally.core.api_access import ENV_DASHBOARD
from tally.core.rules import ENV_RULES
from tally.core.settings import ENV_TIME_ATTRIBUTE, Settings
from tally.core.windows import now_ms
from tally.dynamo.tables import create_tables
from tally.local.aws import LocalContext, MotoServer, client, local_handler, stream_arn_of, write_items
from tally.local.http_adapter import LocalApi
from tally.local.stream_reader import StreamReader
from tally.local.workload import SHAPES, Workload

pytestmark = pytest.mark.server

BLOG = SHAPES["blog"]
HISTOGRAM, DISTINCT = "load/posts/about", "views/posts/hello-world"


@pytest.fixture(scope="module")
def served_blog():
    """moto's server with a day of a blog's events counted by its rules, and the read API on a loopback port."""
    require_browser_and_page()
    with handler_state_restored(), MotoServer() as server:
        try:
            os.environ.update({
                **server.environment(), "COUNTS_TABLE": "blog-counts", ENV_RULES: BLOG.rules_json,
                ENV_TIME_ATTRIBUTE: BLOG.time_attribute, ENV_DASHBOARD: "true",
            })
            dynamodb = client("dynamodb")
            create_tables(dynamodb, "blog-events", "blog-counts")
            items = BLOG.items(Workload(counters=BLOG.keys, hours=25, rate=(1, 3), seed=3), now_ms())
            write_items(dynamodb, "blog-events", items)
            handler = local_handler("blog-counts", log_level="ERROR")
            runner = StreamReader(client("dynamodbstreams"), stream_arn_of(dynamodb, "blog-events"), handler, context=LocalContext())
            runner.run(until_idle=True, idle_polls=2, poll_interval=0.2, commit_open_windows=True)  # no one reads this stream again
            assert Settings.from_env().rules is not None
            http_api.reader.cache_clear()
            http_api.api_settings.cache_clear()
            with LocalApi(credentials=Credentials("testing", "testing")) as api:
                yield api
        finally:
            http_api.reader.cache_clear()
            http_api.api_settings.cache_clear()


# The totals' rows read in one script, so that a refresh replacing them (every 10 s) cannot come in between.
ROWS = """
const shown = (cell) => getComputedStyle(cell).display !== "none";
return Array.from(document.querySelectorAll("#totals tbody tr"), (row) => {
  const cells = Array.from(row.cells);
  const quantiles = Object.fromEntries(
    Array.from(row.querySelectorAll("td.quantile"), (cell) => [cell.dataset.quantile, cell.title || ""]));
  return [row.dataset.counter, {
    distinct: row.querySelector("td.distinct").textContent, window: cells[cells.length - 1].textContent, ...quantiles,
    shown: cells.filter((cell) => cell.className !== "retired").map(shown),
    retired: cells.filter((cell) => cell.className === "retired").map(shown),
  }];
});
"""


def rows(driver) -> dict[str, dict[str, str]]:
    """Each counter's row: its cells by class (their exact value, the title, where the page rounds it), and
    which of them show (but the retired mark's, hidden while no chosen counter is retired)."""
    return dict(driver.execute_script(ROWS))


# 7d reaches past the minute retention (48 h): the window answered is aligned to whole hours at its start.
@pytest.mark.parametrize("window", ["24h", "7d"])
def test_quantiles_and_distinct_counts_show_as_the_api_answers_them(served_blog, browser, tmp_path, window):
    from selenium.webdriver.support.ui import WebDriverWait

    api = served_blog
    wait = WebDriverWait(browser, WAIT_SECONDS)
    query = urlencode([("counter", HISTOGRAM), ("counter", DISTINCT), ("window", window), ("series", "hour")])
    browser.get(f"{api.url}/?{query}")
    wait.until(lambda driver: len(rows(driver)) == 2 and rows(driver)[HISTOGRAM]["0.5"])
    shown = rows(browser)
    browser.save_screenshot(str(tmp_path / "dashboard-aggregates.png"))

    start, end = shown[HISTOGRAM]["window"].split(" – ")
    asked = urlencode([
        ("counter", HISTOGRAM), ("counter", DISTINCT), ("window", window), ("at", end), ("align", "true"),
        ("quantiles", "0.5,0.9,0.99"),
    ])
    with urllib.request.urlopen(f"{api.url}/counts?{asked}", timeout=10) as response:
        histogram, distinct = json.loads(response.read())["counts"]

    assert histogram["start"] == start and histogram["quantiles"]
    # A 7d window starting mid-hour moves its start back to the hour; one read at a whole hour starts on one.
    assert histogram["aligned"] == (window == "7d" and not end.endswith(":00Z"))
    assert {q: shown[HISTOGRAM][q] for q in ("0.5", "0.9", "0.99")} == histogram["quantiles"]
    assert distinct["distinct"] > 0
    assert shown[DISTINCT]["distinct"] == ("" if distinct["distinct_exact"] else "≈ ") + f"{distinct['distinct']:,}"
    assert "distinct" not in histogram and "quantiles" not in distinct
    assert shown[HISTOGRAM]["distinct"] == "" and shown[DISTINCT]["0.5"] == ""
    assert all(shown[HISTOGRAM]["shown"])  # both columns shown: some chosen counter has each
    assert shown[HISTOGRAM]["retired"] == [False]  # and no retired column: their rules count on

"""The dashboard in headless Chromium: pick a counter, see the API's total, and a chart that drew.

Debian's chromium and chromium-driver (`make test-tools`) drive the page the
read API serves at / through the local adapter, over moto's server holding a
day of events counted by the stream runner; then the rule counting sign-ups
is retired, as a deployment retiring it would. A screenshot is saved in the
test's temporary folder.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from urllib.parse import urlencode

import pytest
from botocore.credentials import Credentials

from handler_state import handler_state_restored
from tally import http_api
from tally.core.api_access import ENV_DASHBOARD
from tally.core.settings import ENV_CALENDAR_PREFIXES, ENV_CALENDAR_ZONES, ENV_HOUR_RETENTION_DAYS, Settings
from tally.core.windows import now_ms, parse_instant
from tally.dynamo.counts_table import CountsTable
from tally.dynamo.tables import create_tables
from tally.local.aws import LocalContext, MotoServer, client, local_handler, stream_arn_of, write_items
from tally.local.http_adapter import LocalApi
from tally.local.stream_reader import StreamReader
from tally.local.workload import Workload

pytestmark = pytest.mark.server

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SERIES_COLOUR = (0x25, 0x63, 0xEB)  # the first series' stroke in app.js
WAIT_SECONDS = 60
# Both counters by name, as the classic rule counts them; page-views has an alert that a day of events crosses.
RULES = json.dumps(
    [
        {
            "name": "views",
            "counter": "page-views",
            "when": {"counter": {"equals": "page-views"}},
            "alerts": [{"name": "busy", "window": "24h", "above": 1}],
        },
        {"name": "signups", "counter": "sign-ups", "when": {"counter": {"equals": "sign-ups"}}},
    ]
)

# Pixels of the first series' colour on the chart's canvas.
COLOURED_PIXELS = """
const canvas = document.querySelector('#chart canvas');
const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
const [r, g, b] = arguments[0];
let found = 0;
for (let i = 0; i < data.length; i += 4) {
  if (data[i + 3] > 128 && Math.abs(data[i] - r) < 30 && Math.abs(data[i + 1] - g) < 30 && Math.abs(data[i + 2] - b) < 30) found++;
}
return found;
"""


def require_browser_and_page() -> None:
    """Fail in one line naming the make target when Chromium, its driver or the built dashboard page is missing."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are missing: `make test-tools` installs them (make test does)")
    if http_api.dashboard_page() is None:
        pytest.fail("the dashboard page is not built: `make dashboard` builds it (make test does)")


def retired(rules: str, name: str, retired_at_s: int) -> str:
    """``rules`` with the rule ``name`` retired at ``retired_at_s`` (epoch seconds)."""
    return json.dumps([rule | ({"retiredAt": retired_at_s} if rule["name"] == name else {}) for rule in json.loads(rules)])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """moto's server with a day of counted events, and the read API (dashboard on) on a loopback port."""
    require_browser_and_page()
    with handler_state_restored(), MotoServer() as server:
        try:
            os.environ.update({**server.environment(), "COUNTS_TABLE": "dashboard-counts", "TALLY_RULES": RULES})
            dynamodb = client("dynamodb")
            create_tables(dynamodb, "dashboard-events", "dashboard-counts")
            settings = Settings.from_env()
            events = Workload(counters=["page-views", "sign-ups"], hours=25, rate=(5, 20), seed=5).events(now_ms())
            write_items(dynamodb, "dashboard-events", [event.item(settings) for event in events])
            runner = StreamReader(
                client("dynamodbstreams"),
                stream_arn_of(dynamodb, "dashboard-events"),
                local_handler("dashboard-counts", log_level="ERROR"),
                context=LocalContext(),
            )
            runner.run(until_idle=True, idle_polls=2, poll_interval=0.2, commit_open_windows=True)  # no one reads this stream again
            # The day counted, sign-ups' rule is retired now, and the counting function publishes the new rules.
            os.environ["TALLY_RULES"] = retired(RULES, "signups", now_ms() // 1000)
            CountsTable(dynamodb, "dashboard-counts", Settings.from_env()).publish_settings("dashboard", now_ms())
            os.environ[ENV_DASHBOARD] = "true"
            http_api.reader.cache_clear()
            http_api.api_settings.cache_clear()
            with LocalApi(credentials=Credentials("testing", "testing")) as api:
                yield api, events
        finally:
            http_api.reader.cache_clear()
            http_api.api_settings.cache_clear()


def test_the_page_shows_the_apis_total_and_draws_the_minute_series(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import Select, WebDriverWait

    api, events = served
    wait = WebDriverWait(browser, WAIT_SECONDS)
    browser.get(f"{api.url}/")

    # The counter list comes from GET /counters; pick one, a day, per minute.
    wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, '#counters option[value="page-views"]')))
    Select(browser.find_element(By.ID, "window")).select_by_value("24h")
    Select(browser.find_element(By.ID, "series")).select_by_value("minute")
    Select(browser.find_element(By.ID, "counters")).select_by_value("page-views")
    wait.until(lambda driver: driver.find_element(By.TAG_NAME, "body").get_attribute("data-chart-points") == "1440")
    row = browser.find_element(By.CSS_SELECTOR, '#totals tr[data-counter="page-views"]')
    shown_total = int(row.find_element(By.CSS_SELECTOR, "td.total").text.replace(",", ""))
    start, end = row.find_elements(By.TAG_NAME, "td")[-1].text.split(" – ")
    browser.save_screenshot(str(tmp_path / "dashboard.png"))

    # The same window, asked of the API directly, and counted by hand from the events written.
    with urllib.request.urlopen(f"{api.url}/counts?counter=page-views&window=24h&at={end}", timeout=10) as response:
        (answer,) = json.loads(response.read())["counts"]
    first, after = parse_instant(start), parse_instant(end)
    assert (answer["start"], answer["end"]) == (start, end)
    assert shown_total == answer["total"] == sum(1 for e in events if e.counter == "page-views" and first <= e.ts_ms < after)
    assert shown_total > 0
    assert browser.execute_script(COLOURED_PIXELS, list(SERIES_COLOUR)) > 200  # the line was drawn
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    # Plain counters have no distinct count or quantiles: those columns stay hidden.
    hidden = row.find_elements(By.CSS_SELECTOR, "td.distinct, td.quantile")
    assert len(hidden) == 4 and not any(cell.is_displayed() for cell in hidden)

    # A counter the API refuses shows the API's one-line reason instead of a chart.
    typed = browser.find_element(By.ID, "add-counter")
    typed.send_keys("#secret", Keys.ENTER)
    wait.until(lambda driver: "error" in driver.find_element(By.ID, "status").get_attribute("class"))
    assert "#secret" in browser.find_element(By.ID, "status").text


def test_counters_in_alarm_are_marked_with_their_alerts(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import Select, WebDriverWait

    api, _ = served
    wait = WebDriverWait(browser, WAIT_SECONDS)
    browser.get(f"{api.url}/")
    wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, '#counters option[value="sign-ups"]')))
    chosen = Select(browser.find_element(By.ID, "counters"))
    chosen.select_by_value("page-views")
    chosen.select_by_value("sign-ups")
    wait.until(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, "#totals tbody tr")) == 2)
    with urllib.request.urlopen(f"{api.url}/alerts?state=ALARM", timeout=10) as response:
        alarms = json.loads(response.read())["alerts"]
    assert [(a["alert"], a["counter"]) for a in alarms] == [("busy", "page-views")]
    # A render whose /alerts read failed leaves the marks out until the next live refresh: wait for a marked one.
    views = wait.until(lambda driver: driver.find_element(By.CSS_SELECTOR, '#totals tr[data-counter="page-views"].in-alarm'))
    signups = browser.find_element(By.CSS_SELECTOR, '#totals tr[data-counter="sign-ups"]')
    assert "in-alarm" not in (signups.get_attribute("class") or "")
    assert views.find_element(By.CSS_SELECTOR, "td.alarm").text.startswith("busy: ")
    assert signups.find_elements(By.CSS_SELECTOR, "td.alarm") == []


def test_the_top_list_ranks_the_apis_exact_totals_and_a_click_charts_a_counter(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    api, events = served
    wait = WebDriverWait(browser, WAIT_SECONDS)
    browser.get(f"{api.url}/?window=24h&series=hour")

    # The list ranks every counter (the signed page's default prefix is ''), as GET /top answers for its window.
    wait.until(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, "#top tbody tr")) == 2)
    table = browser.find_element(By.ID, "top")
    start, end = table.get_attribute("data-start"), table.get_attribute("data-end")
    with urllib.request.urlopen(f"{api.url}/top?prefix=&n=10&window=24h&at={end}", timeout=10) as response:
        answer = json.loads(response.read())
    rows = [
        [cell.text for cell in row.find_elements(By.TAG_NAME, "td")[:3]]
        for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]
    assert answer["start"] == start and answer["exact"] is True and table.get_attribute("data-exact") == "true"
    assert rows == [[str(e["rank"]), e["counter"], f"{e['total']:,}"] for e in answer["top"]]
    first, after = parse_instant(start), parse_instant(end)
    by_hand = {name: sum(1 for e in events if e.counter == name and first <= e.ts_ms < after) for name in ("page-views", "sign-ups")}
    assert {e["counter"]: e["total"] for e in answer["top"]} == by_hand
    assert "exact (certified)" in browser.find_element(By.ID, "top-status").text
    assert not any(cell.is_displayed() for cell in table.find_elements(By.CSS_SELECTOR, ".rising"))

    # A click on a listed counter charts it beside the totals.
    second = answer["top"][1]["counter"]
    table.find_element(By.CSS_SELECTOR, f'tr[data-counter="{second}"] td.counter').click()
    wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, f'#totals tr[data-counter="{second}"]'))
    assert f"counter={second}" in browser.current_url

    # Rising: each entry with the previous window's total and the increase it is ranked by.
    browser.find_element(By.ID, "top-rising").click()
    wait.until(lambda driver: "rising" in (driver.find_element(By.ID, "top").get_attribute("class") or ""))
    for row in browser.find_elements(By.CSS_SELECTOR, "#top tbody tr"):
        total, previous, increase = (int(cell.text.replace(",", "")) for cell in row.find_elements(By.TAG_NAME, "td")[2:5])
        assert increase == total - previous
    assert "rising top 10" in browser.find_element(By.ID, "top-status").text

    # A prefix the API refuses shows its one-line reason in place of the list.
    typed = browser.find_element(By.ID, "top-prefix")
    typed.clear()
    typed.send_keys("#segment#\n")
    wait.until(lambda driver: "error" in (driver.find_element(By.ID, "top-status").get_attribute("class") or ""))
    assert "not starting with '#'" in browser.find_element(By.ID, "top-status").text
    assert not browser.find_element(By.ID, "top").is_displayed()


def test_a_counter_whose_rule_is_retired_is_marked_retired_in_the_list_the_totals_and_the_top_list(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import Select, WebDriverWait

    api, _ = served
    with urllib.request.urlopen(f"{api.url}/counts?counter=sign-ups&counter=page-views", timeout=10) as response:
        signups, views = json.loads(response.read())["counts"]
    assert signups["retired"] is not None and views["retired"] is None  # views' rule counts on
    wait = WebDriverWait(browser, WAIT_SECONDS)
    browser.get(f"{api.url}/?window=24h&series=hour")

    # The counter list says which counters are retired, from GET /counters.
    option = wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, '#counters option[value="sign-ups"]')))
    assert option.text == "sign-ups (retired)" and option.get_attribute("data-retired") == signups["retired"]
    assert browser.find_element(By.CSS_SELECTOR, '#counters option[value="page-views"]').text == "page-views"

    # The totals mark its row, and say when; a counter that counts has no mark.
    chosen = Select(browser.find_element(By.ID, "counters"))
    chosen.select_by_value("page-views")
    chosen.select_by_value("sign-ups")
    wait.until(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, "#totals tbody tr")) == 2)
    retired_row = browser.find_element(By.CSS_SELECTOR, '#totals tr[data-counter="sign-ups"]')
    live_row = browser.find_element(By.CSS_SELECTOR, '#totals tr[data-counter="page-views"]')
    mark = retired_row.find_element(By.CSS_SELECTOR, "td.retired")
    assert mark.is_displayed() and mark.text == f"retired {signups['retired']}"
    assert "is-retired" in retired_row.get_attribute("class") and "is-retired" not in (live_row.get_attribute("class") or "")
    assert live_row.find_element(By.CSS_SELECTOR, "td.retired").text == ""
    assert int(retired_row.find_element(By.CSS_SELECTOR, "td.total").text.replace(",", "")) > 0  # readable still

    # So does the top list.
    wait.until(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, "#top tbody tr")) == 2)
    ranked = browser.find_element(By.CSS_SELECTOR, '#top tr[data-counter="sign-ups"] td.retired')
    assert ranked.is_displayed() and ranked.text == f"retired {signups['retired']}"
    assert browser.find_element(By.CSS_SELECTOR, '#top tr[data-counter="page-views"] td.retired').text == ""


# page-views' month so far as the totals show it, read in one script: a live refresh replaces the rows.
MONTH_SHOWN = """
const shown = document.querySelector('#totals tr[data-counter="page-views"] td.month');
return shown ? shown.textContent : null;
"""


@contextmanager
def browser_zone(browser, zone: str):
    """The browser's own time zone (what Intl reports and the page defaults to) set to ``zone``, then restored."""
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone})
    try:
        yield
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


def test_the_calendar_draws_the_apis_days_in_the_browsers_zone_and_this_month_beside_the_total(served, browser):
    """The days are the ones the page asked /calendar for (the last 30 in New York, whatever today is), each the
    API's count; a day of events falls within them whole, and this month so far is /counts' month to date."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    api, events = served
    wait = WebDriverWait(browser, WAIT_SECONDS)
    with browser_zone(browser, "America/New_York"):
        browser.get(f"{api.url}/?counter=page-views&window=24h&series=hour")
        wait.until(lambda driver: driver.find_element(By.TAG_NAME, "body").get_attribute("data-calendar-updates"))
        month_shown = wait.until(lambda driver: driver.execute_script(MONTH_SHOWN))
        drawn = browser.find_element(By.ID, "calendar-chart")
        asked = {name: drawn.get_attribute(f"data-{name}") for name in ("period", "tz", "from", "to")}
        zone_chosen = browser.find_element(By.ID, "calendar-tz").get_attribute("value")
        coloured = browser.execute_script(COLOURED_PIXELS.replace("#chart", "#calendar-chart"), list(SERIES_COLOUR))
        points = json.loads(drawn.get_attribute("data-points"))
        status = browser.find_element(By.ID, "calendar-status")
        status_text, status_class = status.text, status.get_attribute("class") or ""
    query = urlencode({"counter": "page-views", **asked})
    with urllib.request.urlopen(f"{api.url}/calendar?{query}", timeout=10) as response:
        (series,) = json.loads(response.read())["series"]
    with urllib.request.urlopen(f"{api.url}/counts?counter=page-views&window=month-to-date&tz=America/New_York", timeout=10) as response:
        (month,) = json.loads(response.read())["counts"]

    assert zone_chosen == asked["tz"] == series["tz"] == "America/New_York" and asked["period"] == "day"
    assert points == [[[point["start"], point["count"]] for point in series["points"]]]
    assert len(points[0]) == 30
    assert series["points"][-1]["end"].startswith(asked["to"]) and series["start"].startswith(asked["from"])
    assert series["total"] == sum(1 for e in events if e.counter == "page-views") > 0  # a day of events, all within
    assert coloured > 100  # the line was drawn
    assert "error" not in status_class and "days in America/New_York" in status_text
    assert int(month_shown.replace(",", "")) == month["total"] > 0


def test_a_browser_zone_the_api_cannot_answer_shows_its_reason_instead_of_the_calendar(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    api, _ = served
    wait = WebDriverWait(browser, WAIT_SECONDS)
    with browser_zone(browser, "Australia/Adelaide"):  # UTC+10:30 (+09:30 in winter): its days begin on half hours
        browser.get(f"{api.url}/?counter=page-views&window=24h&series=hour")
        wait.until(lambda driver: "error" in (driver.find_element(By.ID, "calendar-status").get_attribute("class") or ""))
        message = browser.find_element(By.ID, "calendar-status").text
        chart_shown = browser.find_element(By.ID, "calendar-chart").is_displayed()
        zone_chosen = browser.find_element(By.ID, "calendar-tz").get_attribute("value")
        drawn = browser.find_element(By.ID, "calendar-chart")
        asked = {name: drawn.get_attribute(f"data-{name}") for name in ("period", "tz", "from", "to")}
        wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, '#totals tr[data-counter="page-views"]'))
        month_shown = browser.execute_script(MONTH_SHOWN)
    query = urlencode({"counter": "page-views", **asked})  # the days the page asked for: the offset they have
    try:
        urllib.request.urlopen(f"{api.url}/calendar?{query}", timeout=10)
    except urllib.error.HTTPError as refusal:
        status, body = refusal.code, json.loads(refusal.read())

    assert zone_chosen == asked["tz"] == "Australia/Adelaide" and status == 400
    assert message == body["message"] and "not on a whole hour" in message
    assert not chart_shown and month_shown == ""


def test_where_days_and_months_are_kept_the_calendar_offers_the_last_twelve_months(served, browser, monkeypatch):
    """Offered only where the table keeps days and months (the page's config names the kept zones): the 12 months
    up to this one in the browser's zone, each the API's count. Here the hours are kept 400 days, since no close
    has run on this day of events: the months come from hours, as they would from closed months."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    api, events = served
    wait = WebDriverWait(browser, WAIT_SECONDS)
    page = f"{api.url}/?counter=page-views&window=24h&series=hour&calendar=year"
    with browser_zone(browser, "America/New_York"):
        browser.get(page)
        wait.until(lambda driver: driver.find_element(By.TAG_NAME, "body").get_attribute("data-calendar-updates"))
        plain = [option.get_attribute("value") for option in Select(browser.find_element(By.ID, "calendar-period")).options]
    kept = {ENV_CALENDAR_PREFIXES: '["page-views"]', ENV_CALENDAR_ZONES: '["America/New_York"]', ENV_HOUR_RETENTION_DAYS: "400"}
    for name, value in kept.items():
        monkeypatch.setenv(name, value)
    http_api.reader.cache_clear()
    http_api.api_settings.cache_clear()
    try:
        with browser_zone(browser, "America/New_York"):
            browser.get(page)
            wait.until(lambda driver: driver.find_element(By.TAG_NAME, "body").get_attribute("data-calendar-updates"))
            choice = Select(browser.find_element(By.ID, "calendar-period"))
            offered = {option.get_attribute("value"): option.text for option in choice.options}
            chosen = choice.first_selected_option.get_attribute("value")
            drawn = browser.find_element(By.ID, "calendar-chart")
            asked = {name: drawn.get_attribute(f"data-{name}") for name in ("period", "tz", "from", "to")}
            points = json.loads(drawn.get_attribute("data-points"))
            zones = [option.get_attribute("value") for option in Select(browser.find_element(By.ID, "calendar-tz")).options]
            status = browser.find_element(By.ID, "calendar-status")
            status_text, status_class = status.text, status.get_attribute("class") or ""
        query = urlencode({"counter": "page-views", **asked})
        with urllib.request.urlopen(f"{api.url}/calendar?{query}", timeout=10) as response:
            (series,) = json.loads(response.read())["series"]
    finally:
        browser.get("about:blank")  # no refresh reads with these settings after them
        http_api.reader.cache_clear()
        http_api.api_settings.cache_clear()

    assert "year" not in plain and offered["year"] == "last 12 months" and chosen == "year"
    assert (asked["period"], asked["tz"]) == ("month", "America/New_York") and "America/New_York" in zones
    first, end = date.fromisoformat(asked["from"]), date.fromisoformat(asked["to"])
    assert first.day == end.day == 1 and (end.year - first.year) * 12 + end.month - first.month == 12
    assert points == [[[point["start"], point["count"]] for point in series["points"]]] and len(points[0]) == 12
    assert series["total"] == sum(1 for e in events if e.counter == "page-views") > 0
    assert "error" not in status_class and "months in America/New_York" in status_text

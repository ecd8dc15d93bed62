"""The dashboard tests' browser: one headless Chromium per test process, a blank page for each test."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def chromium(tmp_path_factory):
    """One headless Chromium per test process: starting one takes seconds, and the tests share no state in it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from test_dashboard_page import CHROMEDRIVER, CHROMIUM

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium') / 'profile'}",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium):
    """The process's Chromium on a blank page without cookies, as a fresh one would start; left on a blank page,
    so that no dashboard goes on polling its API (or a later test's server on the same port) after the test."""
    chromium.get("about:blank")
    chromium.delete_all_cookies()
    yield chromium
    chromium.get("about:blank")

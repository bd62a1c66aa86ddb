"""A headless Chromium for browser tests, as the ``browser`` fixture.

A test module imports ``browser_fixture`` (which provides it) and the helpers it uses.

It skips the test where Chromium, chromedriver or selenium is missing (Debian: chromium and
chromium-driver).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: The longest any page load or awaited page content may take, in seconds.
WAIT_SECONDS = 15


@pytest.fixture(name="browser")
def browser_fixture(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium driven by Selenium, with a fresh profile; quit after the test."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.skip("no Chromium here: install Debian's chromium and chromium-driver to run it")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,900",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=chromedriver)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(browser: Any, condition: Callable[[Any], Any], timeout: float = WAIT_SECONDS) -> Any:
    """The first truthy ``condition(browser)`` within ``timeout`` seconds, else a timeout.

    Errors of a page being replaced meanwhile (an element gone with the old document, which
    Chromium may also report as a node that "does not belong to the document") mean: not yet.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, ignored_exceptions=(WebDriverException,)).until(
        condition
    )


def wait_for_text(browser: Any, text: str, timeout: float = WAIT_SECONDS) -> None:
    """Wait until the current page's body shows ``text``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    located = (By.TAG_NAME, "body")
    wait_for(browser, expected_conditions.text_to_be_present_in_element(located, text), timeout)

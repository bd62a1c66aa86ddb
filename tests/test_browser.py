"""An operator releases a lock in the admin, in a real headless Chromium."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User

from django_redis_lock import lock
from tests.browser import WAIT_SECONDS, browser_fixture, wait_for_text  # noqa: F401  (browser)
from tests.helpers import forge, hold

CHANGELIST = "/admin/django_redis_lock/lock/"
#: Set to a folder to keep the admin screenshot (the README's comes from docs/).
SCREENSHOT_DIR_ENV = "DJANGO_REDIS_LOCK_SCREENSHOT_DIR"


def _log_in(browser: Any, live_server: Any, expect: str) -> None:
    """Log in as a new superuser and wait for the list of held locks to show ``expect``."""
    from selenium.webdriver.common.by import By

    User.objects.create_superuser("operator", password="s3cret-pass")
    browser.get(f"{live_server.url}/admin/login/?next={CHANGELIST}")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys("s3cret-pass")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for_text(browser, expect)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_operator_sees_and_releases_a_lock(browser: Any, live_server: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    held = lock("nightly-import", timeout=120, auto_renew=False, label="nightly import job")
    other = lock("report:2026-11", timeout=300, auto_renew=False, label="monthly report")
    assert held.acquire(blocking=False)
    assert other.acquire(blocking=False)
    _log_in(browser, live_server, "nightly-import")

    row = browser.find_element(By.XPATH, "//tr[.//a[text()='nightly-import']]")
    assert re.fullmatch(r"1[01]\d\.\d s", row.find_element(By.CLASS_NAME, "field-ttl").text)
    assert row.find_element(By.CLASS_NAME, "field-label").text == "nightly import job"
    assert "pid" in row.find_element(By.CLASS_NAME, "field-owner").text
    folder = Path(os.environ.get(SCREENSHOT_DIR_ENV) or tmp_path)
    assert browser.save_screenshot(str(folder / "admin-locks.png"))

    row.find_element(By.CLASS_NAME, "action-select").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("release_selected")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    wait_for_text(browser, "Are you sure")
    assert held.owned()  # nothing happens before the confirmation
    browser.find_element(By.CSS_SELECTOR, "input[type=submit][value^='Yes']").click()
    wait_for_text(browser, "Released 1 lock; no client was waiting for it.")

    names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#result_list th a")]
    assert names == ["report:2026-11"]
    assert not held.owned()
    assert other.owned()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_long_texts_leave_the_ttl_and_token_in_view(
    browser: Any, live_server: Any, redis_client: redis.Redis
) -> None:
    from selenium.webdriver.common.by import By

    forge(redis_client, "n" * 1024, l="L" * 10_000, o="O" * 10_000)
    forge(redis_client, "spaced", l="word " * 2_000)
    hold("plain", label="nightly")
    _log_in(browser, live_server, "plain")
    width = browser.execute_script("return window.innerWidth")
    cells = browser.find_elements(By.CSS_SELECTOR, "#result_list .field-ttl")
    cells += browser.find_elements(By.CSS_SELECTOR, "#result_list .field-fencing_token")
    assert len(cells) == 6
    for cell in cells:
        box = browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", cell)
        assert cell.text
        assert box["left"] >= 0
        assert box["right"] <= width, (cell.text, box, width)
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_select_all_box(browser: Any, live_server: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    held = hold("a:1", "a:2", "a:3")
    _log_in(browser, live_server, "a:3")
    toggle = browser.find_element(By.ID, "action-toggle")
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list input.action-select")
    assert len(rows) == 3
    toggle.click()
    assert [row.is_selected() for row in rows] == [True] * 3
    rows[1].click()  # one row off: the box is no longer "all"
    assert not toggle.is_selected()
    rows[1].click()
    assert toggle.is_selected()
    Select(browser.find_element(By.NAME, "action")).select_by_value("release_selected")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    wait_for_text(browser, "Are you sure")
    assert "A client waiting for a lock takes it over at once." in browser.page_source
    browser.find_element(By.CSS_SELECTOR, "input[type=submit][value^='Yes']").click()
    wait_for_text(browser, "Released 3 locks; no client was waiting for them.")
    assert not any(each.locked() for each in held)

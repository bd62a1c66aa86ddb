"""An operator releases a lock in the admin, in a real headless Chromium."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User

from django_redis_lock import lock, semaphore
from tests.browser import WAIT_SECONDS, browser_fixture, wait_for_text  # noqa: F401  (browser)
from tests.helpers import forge, hold, record_stats

CHANGELIST = "/admin/django_redis_lock/lock/"
STATS = CHANGELIST + "stats/"
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
def test_operator_releases_one_holder_of_a_semaphore(browser: Any, live_server: Any) -> None:
    from selenium.webdriver.common.by import By

    first = semaphore("exports", 2, timeout=120, auto_renew=False, label="first export")
    second = semaphore("exports", 2, timeout=120, auto_renew=False, label="second export")
    assert first.acquire(blocking=False)
    assert second.acquire(blocking=False)
    _log_in(browser, live_server, "exports [semaphore of 2]")
    browser.find_elements(By.XPATH, "//a[text()='exports [semaphore of 2]']")[0].click()
    wait_for_text(browser, "second export")
    holds = browser.find_elements(By.CSS_SELECTOR, "fieldset.module")
    (chosen,) = [each for each in holds if "first export" in each.text]
    assert str(first.fencing_token) in chosen.text
    # Each holder has its own form, after its fieldset: the first one's releases it.
    form = chosen.find_element(By.XPATH, "following-sibling::form[1]")
    form.find_element(By.CSS_SELECTOR, "input[value^='Release this holder']").click()
    wait_for_text(browser, "Are you sure")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit][value^='Yes']").click()
    wait_for_text(browser, "Released 1 lock")
    assert not first.owned()
    assert second.owned()
    second.release()


# What a cell shows of itself: its box, and whether its text is cut (overflows it).
_CELL = """
const cell = arguments[0], box = cell.getBoundingClientRect().toJSON();
box.cut = cell.scrollWidth > cell.clientWidth + 1;
return box;
"""


def _cells(browser: Any, selector: str) -> list[tuple[str, dict[str, Any]]]:
    """The text and box of every cell matching ``selector``."""
    from selenium.webdriver.common.by import By

    return [
        (cell.text, browser.execute_script(_CELL, cell))
        for cell in browser.find_elements(By.CSS_SELECTOR, selector)
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_column_is_readable_at_every_width(
    browser: Any, live_server: Any, redis_client: redis.Redis
) -> None:
    """With the admin's sidebar open (its default), at 1280, 1600 and 1920 px no value that
    identifies a hold (start, lease, token) is cut and nothing runs off the page, however long
    the texts; at 400 px each lock is a block of its own whose texts wrap (issue 21)."""
    forge(redis_client, "n" * 1024, l="L" * 10_000, o="O" * 10_000)
    forge(redis_client, "spaced", l="word " * 2_000)
    hold("plain", label="nightly")
    _log_in(browser, live_server, "plain")
    for width in (1280, 1600, 1920):
        browser.set_window_size(width, 1000)
        browser.refresh()
        wait_for_text(browser, "plain")
        inner = browser.execute_script("return window.innerWidth")
        assert browser.execute_script("return document.getElementById('nav-sidebar').offsetWidth")
        identifying = "#result_list .field-acquired_at, #result_list .field-ttl, "
        identifying += "#result_list .field-fencing_token"
        cells = _cells(browser, identifying)
        assert len(cells) == 9
        for text, box in cells:
            assert text
            assert not box["cut"], (width, text, box)
            assert box["left"] >= 0, (width, text, box)
            assert box["right"] <= inner, (width, text, box)
        for text, box in _cells(browser, "#result_list .field-name, #result_list .field-label"):
            assert not box["cut"], (width, text[:20], box)  # wrapped, not cut
        assert browser.execute_script("return document.documentElement.scrollWidth") <= inner
    browser.set_window_size(400, 900)
    browser.refresh()
    wait_for_text(browser, "plain")
    inner = browser.execute_script("return window.innerWidth")
    for text, box in _cells(browser, "#result_list td, #result_list th"):
        assert not box["cut"], (text[:20], box)
        assert box["right"] <= inner
    for text, box in _cells(browser, "#result_list .field-owner, #result_list .field-label"):
        assert box["width"] > inner / 2, (text[:20], box)  # a line of its own, not 1-3 letters
    assert browser.execute_script("return document.documentElement.scrollWidth") <= inner


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


def _visible_box(browser: Any, element: Any) -> dict[str, float]:
    box: dict[str, float] = browser.execute_script(
        "return arguments[0].getBoundingClientRect().toJSON()", element
    )
    assert element.is_displayed()
    assert box["width"] > 0
    assert box["height"] > 0
    return box


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_lock_statistics_page(
    browser: Any, live_server: Any, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """From the list of held locks to the statistics: the charts drawn, in both themes, on a
    wide and a narrow screen, with nothing on the console."""
    from selenium.webdriver.common.by import By

    record_stats(
        redis_client,
        "nightly-import",
        [2500] * 40 + [4200] * 12 + [8800] * 3,
        [0.4] * 55,
        busy=14,
        timeout=10,
    )
    record_stats(
        redis_client,
        "report:2026-11",
        [35] * 120 + [180] * 60 + [900] * 8,
        [0.4] * 150 + [40] * 30 + [450] * 8,
        busy=61,
        timeout=30,
    )
    record_stats(
        redis_client, "cache:warmup", [120] * 80 + [260] * 20, [0.4] * 100, busy=3, timeout=3600
    )
    record_stats(
        redis_client,
        "invoice:sync",
        [8] * 300 + [15] * 90 + [60] * 10,
        [0.4] * 250 + [6] * 100 + [25] * 50,
        busy=148,
        lost=2,
        timeout=5,
    )
    with lock("orders:42", timeout=30):  # and one recorded by the real scripts
        assert not lock("orders:42").acquire(blocking=False)
    hold("orders:42")
    _log_in(browser, live_server, "orders:42")

    link = browser.find_element(By.CSS_SELECTOR, ".object-tools a")
    assert link.text.casefold() == "lock statistics"  # shown in capitals, as the admin does
    link.click()
    wait_for_text(browser, "Most contended lock names")
    assert browser.current_url == f"{live_server.url}{STATS}"
    names = [
        th.text.split("\n")[0]
        for th in browser.find_elements(By.CSS_SELECTOR, "#stats-table tbody th")
    ]
    assert names == [
        "cache:warmup",
        "invoice:sync",
        "nightly-import",
        "orders:42",
        "report:2026-11",
    ]
    histograms = browser.find_elements(By.CSS_SELECTOR, "svg.histogram")
    assert len(histograms) == 10  # a hold and a wait histogram per name
    charts = [*histograms, browser.find_element(By.CSS_SELECTOR, "svg.contention")]
    for chart in charts:
        _visible_box(browser, chart)
        for bar in chart.find_elements(By.CSS_SELECTOR, "rect.bar"):
            _visible_box(browser, bar)
    flagged = browser.find_elements(By.CSS_SELECTOR, "#stats-table tr.advice-row .advice li")
    assert any("too short?" in each.text for each in flagged)
    assert any("too long?" in each.text for each in flagged)

    folder = Path(os.environ.get(SCREENSHOT_DIR_ENV) or tmp_path)
    # The whole page for the docs, as operators see it: with the admin's app list beside it,
    # which Django shows by default.
    browser.set_window_size(1500, 1300)
    sidebar = browser.find_element(By.ID, "nav-sidebar")
    assert sidebar.is_displayed()
    assert browser.save_screenshot(str(folder / "admin-stats.png"))

    # The bars take the admin's link colour of each theme (currentColor, its CSS variables).
    fill = "return getComputedStyle(document.querySelector('svg.histogram rect.bar')).fill"
    link = "return getComputedStyle(document.documentElement).getPropertyValue('--link-fg')"
    colours = {}
    for theme in ("light", "dark"):
        browser.execute_script(f"document.documentElement.dataset.theme = '{theme}'")
        colours[theme] = (browser.execute_script(fill), browser.execute_script(link).strip())
    assert colours["light"][0] != colours["dark"][0]
    assert colours["dark"] == ("rgb(129, 212, 250)", "#81d4fa")

    browser.set_window_size(1280, 1000)  # the sidebar open: the advice in view (issue 21)
    browser.find_element(By.ID, "toggle-nav-sidebar").click()
    browser.refresh()
    wait_for_text(browser, "Most contended lock names")
    width = browser.execute_script("return window.innerWidth")
    assert browser.execute_script("return document.getElementById('nav-sidebar').offsetWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
    suggested = _cells(browser, "#stats-table .field-suggested")
    assert len(suggested) == 5
    for text, box in suggested:
        assert text
        assert not box["cut"]
        assert box["right"] <= width, (text, box, width)

    browser.set_window_size(400, 900)  # a phone: one block per name, nothing wider than it
    browser.refresh()
    wait_for_text(browser, "Most contended lock names")
    width = browser.execute_script("return window.innerWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
    for chart in browser.find_elements(By.CSS_SELECTOR, "svg.histogram, svg.contention"):
        box = _visible_box(browser, chart)
        assert box["right"] <= width

    # The browser asks for /favicon.ico on its own: that 404 is not the page's.
    logged = browser.get_log("browser")
    errors = [e for e in logged if e["level"] == "SEVERE" and "/favicon.ico" not in e["message"]]
    assert errors == []

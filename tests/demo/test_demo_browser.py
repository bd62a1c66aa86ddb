"""The demo's promise, in a real headless Chromium: run the locked job in two tabs, and the
second answers 423 while the first still runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from django_redis_lock import get_lock_manager, signals
from tests.browser import browser_fixture, wait_for, wait_for_text  # noqa: F401  (browser)

JOB_LOCK = "demo:slow-job:nightly"
#: Long enough for a second tab to open while the first runs; the test waits for events.
JOB_SECONDS = 5


@pytest.fixture
def job_started() -> Iterator[threading.Event]:
    """Set when the job's view takes its lock (live_server runs in this process)."""
    started = threading.Event()

    def record(sender: object, name: str, **kwargs: object) -> None:
        if name == JOB_LOCK:
            started.set()

    signals.lock_acquired.connect(record, weak=False)
    yield started
    signals.lock_acquired.disconnect(record)


def _run_job_in_a_new_tab(browser: Any) -> str:
    """Click "Run the nightly job" on the demo page; the handle of the tab it opens."""
    from selenium.webdriver.common.by import By

    before = set(browser.window_handles)
    browser.find_element(By.XPATH, "//button[normalize-space()='Run the nightly job']").click()
    (tab,) = wait_for(browser, lambda b: set(b.window_handles) - before)
    return str(tab)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@override_settings(DEMO_JOB_SECONDS=JOB_SECONDS)
def test_second_tab_answers_423_while_the_first_runs(
    browser: Any, live_server: Any, job_started: threading.Event
) -> None:
    browser.get(f"{live_server.url}/")
    first = _run_job_in_a_new_tab(browser)
    assert job_started.wait(10)
    holder = get_lock_manager().get(JOB_LOCK)
    assert holder is not None

    second = _run_job_in_a_new_tab(browser)
    browser.switch_to.window(second)
    wait_for_text(browser, "This resource is busy; retry in")
    still = get_lock_manager().get(JOB_LOCK)
    assert still is not None
    assert still.fencing_token == holder.fencing_token  # the first tab's job still runs

    browser.switch_to.window(first)
    wait_for_text(browser, "Job nightly done", timeout=JOB_SECONDS + 10)
    assert get_lock_manager().get(JOB_LOCK) is None


#: A lock name and an owner with no place to break a line, as a new user's trial had them.
LONG_NAME = "report:" + "quarterly-revenue-by-region-and-product-line-" * 4 + "2026"
#: The viewport widths the held-locks card must fit: a phone, a laptop, a wide screen.
WIDTHS = (400, 1280, 1600)

_GEOMETRY = """
const box = (element) => element.getBoundingClientRect().toJSON();
const card = document.querySelector("table.held").closest("section");
return {
  viewport: document.documentElement.clientWidth,
  page: document.documentElement.scrollWidth,
  card: box(card),
  table: box(document.querySelector("table.held")),
  buttons: [...card.querySelectorAll("button")].map(box),
  kinds: [...card.querySelectorAll("td.kind")].map((cell) => cell.textContent),
};
"""


def _inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (
        inner["left"] >= outer["left"] - 0.5
        and inner["right"] <= outer["right"] + 0.5
        and inner["top"] >= outer["top"] - 0.5
        and inner["bottom"] <= outer["bottom"] + 0.5
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_held_locks_fit_their_card_at_every_width(
    browser: Any, live_server: Any, tmp_path: Any
) -> None:
    """The held-locks table with long names stays inside its card, its Force release buttons
    too, and the page needs no sideways scrolling, at 400, 1280 and 1600 px."""
    from django_redis_lock import lock, rwlock, semaphore

    held = [
        lock(LONG_NAME, auto_renew=False, label="a-label-without-any-space-" * 3),
        semaphore(LONG_NAME + ":pool", 2, auto_renew=False),
        rwlock("catalogue", auto_renew=False).read(),
    ]
    for each in held:
        assert each.acquire()
    try:
        for width in WIDTHS:
            browser.set_window_rect(width=width, height=900)
            # The window's outer size includes no frame in headless mode: the viewport is it.
            browser.get(f"{live_server.url}/")
            geometry = browser.execute_script(_GEOMETRY)
            browser.save_screenshot(str(tmp_path / f"demo-{width}.png"))
            assert geometry["viewport"] <= width
            assert geometry["page"] <= geometry["viewport"], f"{width} px: scrolls sideways"
            assert _inside(geometry["table"], geometry["card"]), f"{width} px: table outside"
            assert len(geometry["buttons"]) == 3
            for button in geometry["buttons"]:
                assert _inside(button, geometry["card"]), f"{width} px: a button outside"
            assert sorted(geometry["kinds"]) == ["lock", "reader", "semaphore place (of 2)"]
    finally:
        for each in held:
            each.release()

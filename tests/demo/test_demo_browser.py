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

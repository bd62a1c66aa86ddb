"""The examples of the "Rate limits" page (docs/examples/rate.py), run."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

import pytest

from django_redis_lock import rate_limit
from tests.docs.examples import calls, example, forget


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget()
    yield
    forget()


def test_calls_to_the_partner_wait_their_turn_past_the_burst() -> None:
    examples = example("rate")
    started = time.monotonic()
    for customer_id in range(7):  # the burst, 1 + 5 at once, then the next turn
        examples.sync_customer_now(customer_id)
    assert time.monotonic() - started >= 0.09  # the seventh: 0.1 s after the first
    assert calls() == [("sync_customer_data", i) for i in range(7)]


def test_a_second_digest_within_20_minutes_is_refused_with_its_retry_after() -> None:
    examples = example("rate")
    assert examples.send_digest(5) == "sent"
    assert examples.send_digest(5) == "try again in 1200 s"
    assert examples.send_digest(6) == "sent"  # another user's limit
    assert calls() == [("send_digest_to", 5), ("send_digest_to", 6)]


def test_the_async_refresh_is_spaced_at_the_rate() -> None:
    started = time.monotonic()
    asyncio.run(example("rate").refresh_feeds(3))
    assert time.monotonic() - started >= 0.1  # two intervals of 0.05 s
    assert calls() == [("refresh_feed", None)] * 3


def test_the_scheduler_sends_each_task_for_its_turn() -> None:
    from testproject.celery import app

    examples = example("rate")
    app.conf.task_always_eager = True  # run at once: the countdown is Celery's to keep
    try:
        turns = [examples.schedule_sync(customer_id) for customer_id in range(3)]
    finally:
        app.conf.task_always_eager = False
    assert [turn.admitted for turn in turns] == [True] * 3
    assert turns[0].wait == 0
    # An interval apart at least (a call that came after its turn was admitted then).
    assert all(b.at - a.at >= 0.0999 for a, b in itertools.pairwise(turns))
    assert calls() == [("sync_customer_data", i) for i in range(3)]
    assert 0.1 < rate_limit("crm-api", "600/m").retry_after() <= 0.3

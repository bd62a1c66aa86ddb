"""The @locked(rate=...) example of docs/locked.rst (docs/examples/rate_locked.py), run
against the test Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from django.test import RequestFactory

from django_redis_lock import RateLimited
from tests.docs.examples import calls, example, forget


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget()
    yield
    forget()


def test_rate_locked() -> None:
    examples = example("rate_locked")
    request = RequestFactory().get("/search/")
    request.user = SimpleNamespace(pk=3)  # type: ignore[assignment]
    answers = [examples.search(request).status_code for _ in range(12)]
    assert answers == [200] * 11 + [429]  # one, and a burst of ten more
    refused = examples.search(request)
    assert refused["Retry-After"] == "1"

    examples.push_order(7)  # the task's body, as a worker runs it
    with pytest.raises(RateLimited):  # called directly, not by a worker: raised
        examples.push_order(8)
    assert examples.push_order.name.endswith("rate_locked.push_order")  # a Celery task

    started = time.monotonic()
    examples.text("+3312345678", "hi")
    examples.text("+3312345678", "again")  # waits its turn, a second later
    assert time.monotonic() - started >= 0.9
    assert calls() == [
        ("call_partner_api", 7),
        ("send_sms", "+3312345678"),
        ("send_sms", "+3312345678"),
    ]

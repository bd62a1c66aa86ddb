"""The examples of the "Run once across instances" page (docs/examples/leader.py), run."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal

import pytest

from django_redis_lock import LeadershipLost, StaleFencingToken, get_lock_manager, leader
from django_redis_lock.testing import expire_now
from testproject.models import Account
from tests.docs.examples import calls, example, forget
from tests.helpers import wait_until


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget()
    yield
    forget()


def test_the_scheduler_runs_while_it_leads_and_stops_when_asked() -> None:
    stop = threading.Event()
    ran = threading.Event()
    examples = example("leader")

    def run() -> None:
        examples.run_scheduler(stop, every=30)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        wait_until(lambda: calls() == [("run_due_jobs", True)], timeout=10)
        ran.set()
    finally:
        stop.set()
        worker.join(10)
    assert ran.is_set()
    assert get_lock_manager().get("leader:scheduler") is None  # resigned


def test_the_consumer_is_cancelled_when_its_leadership_is_lost() -> None:
    examples = example("leader")

    async def messages() -> AsyncIterator[str]:
        yield "first"
        await asyncio.to_thread(expire_now, "feed-consumer", kind="leader")
        await asyncio.sleep(30)  # cancelled by the loss long before this ends
        yield "never"

    with pytest.raises(LeadershipLost):
        asyncio.run(asyncio.wait_for(examples.consume(messages()), 15))
    assert calls() == [("handle_message", ("first", True))]


@pytest.mark.django_db
def test_settling_is_fenced_by_the_epoch() -> None:
    examples = example("leader")
    account = Account.objects.create(balance=Decimal(100), fence=0)
    examples.settle(account.pk, 10)
    with leader("settlement") as lead:
        epoch = lead.epoch
    os.environ["DJANGO_REDIS_LOCK_EPOCH"] = str(epoch)
    try:
        examples.settle_in_a_supervised_command(account.pk, 5)
        examples.settle(account.pk, 1)  # a newer leadership: accepted
        with pytest.raises(StaleFencingToken):  # the old epoch, late
            examples.settle_in_a_supervised_command(account.pk, 50)
    finally:
        del os.environ["DJANGO_REDIS_LOCK_EPOCH"]
    account.refresh_from_db()
    assert account.balance == Decimal(84)

"""Leadership: one leader of a name at a time, its epoch, its loss (sync and async), resigning
to a waiting follower, and the epoch fencing a deposed leader's write."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.db.models import F

from django_redis_lock import (
    Leadership,
    LeadershipLost,
    LockBusy,
    StaleFencingToken,
    fenced_update,
    get_lock_manager,
    leader,
)
from django_redis_lock.runtime import runtime
from django_redis_lock.testing import expire_now
from testproject.models import Account
from tests.helpers import start, wait_until

# A short lease, renewed at a third of it: a loss is found within about 0.2 s.
LEASE = 0.6


def test_one_leader_at_a_time_and_each_new_leadership_has_a_higher_epoch() -> None:
    epochs = []
    for _ in range(3):
        with leader("beat") as lead:
            assert lead.is_leader
            assert lead.epoch is not None
            epochs.append(lead.epoch)
            with pytest.raises(LockBusy), leader("beat", blocking_timeout=0):
                pass
            lead.check()  # leads: no error
        assert state(lead) == (False, None)  # resigned
    assert epochs == sorted(set(epochs))


def test_operators_see_a_leadership_under_its_own_name() -> None:
    with leader("scheduler", label="celery beat") as lead:
        info = get_lock_manager().get("leader:scheduler")
        assert info is not None
        assert info.fencing_token == lead.epoch
        assert info.label == "celery beat"
        assert lead.lock.name == "leader:scheduler"


def test_a_lost_leadership_sets_lost_and_check_raises_and_the_block_ends_with_the_loss() -> None:
    lead = leader("lost:sync", timeout=LEASE)
    seen: list[str] = []
    lead.on_loss(lambda: seen.append("lost"))

    def lead_until_lost() -> None:
        with lead:
            expire_now("lost:sync", kind="leader")  # its lease ended (a long pause, an eviction)
            assert lead.lost.is_set()  # learned at once: the watchdog looked
            assert not lead.is_leader
            with pytest.raises(LeadershipLost):
                lead.check()

    with pytest.raises(LeadershipLost):
        lead_until_lost()  # the block ends: the loss is said
    assert seen == ["lost"]


def test_an_async_body_is_cancelled_with_leadership_lost() -> None:
    reached: list[object] = []

    async def main() -> None:
        async with leader("lost:async", timeout=LEASE) as lead:
            await asyncio.to_thread(expire_now, "lost:async", kind="leader")
            await asyncio.sleep(30)  # cancelled by the loss, long before this ends
            reached.append("after sleep")  # never
        reached.append(lead.epoch)

    with pytest.raises(LeadershipLost):
        asyncio.run(asyncio.wait_for(main(), 10))
    assert reached == []


def test_an_async_body_that_ends_before_any_loss_resigns() -> None:
    async def main() -> int | None:
        async with leader("calm:async") as lead:
            assert lead.is_leader
            epoch = lead.epoch
        assert not lead.is_leader
        return epoch

    assert isinstance(asyncio.run(main()), int)


def test_a_leader_that_resigns_hands_over_to_a_waiting_follower_at_once(
    redis_client: redis.Redis,
) -> None:
    led = threading.Event()
    leading = leader("handover", timeout=30)
    leading.acquire()
    follower = leader("handover", timeout=30)

    def follow() -> None:
        if follower.acquire(blocking_timeout=10):
            led.set()

    waiting = start(follow)
    queue = runtime().for_locks(None).keys_for(leading.lock.name).queue
    wait_until(lambda: redis_client.zcard(queue) == 1)  # the follower waits in line
    assert not led.is_set()
    first = leading.epoch
    leading.release()  # resigns: a 30 s lease is not waited out
    waiting.result(5)
    assert led.wait(5)
    assert follower.epoch is not None
    assert first is not None
    assert follower.epoch > first
    follower.release()


@pytest.mark.django_db
def test_the_epoch_fences_a_deposed_leaders_late_write() -> None:
    account = Account.objects.create(balance=Decimal(100), fence=0)
    rows = Account.objects.filter(pk=account.pk)
    deposed = leader("payments", timeout=LEASE)
    assert deposed.acquire()
    expire_now("payments", kind="leader")
    assert deposed.lost.is_set()
    with leader("payments") as current:
        assert fenced_update(rows, current, balance=F("balance") - 10) == 1
        with pytest.raises(StaleFencingToken):  # a late write of the old epoch
            fenced_update(rows, deposed.epoch, balance=F("balance") - 50)
    account.refresh_from_db()
    assert account.balance == Decimal(90)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"name": ""}, ValueError),
        ({"name": "x", "timeout": 0}, ValueError),
        ({"name": "x", "blocking_timeout": -1}, ValueError),
        ({"name": "x", "using": "no-such-alias"}, ImproperlyConfigured),
    ],
)
def test_bad_input_is_refused_at_the_call(options: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        leader(**options)  # type: ignore[arg-type]


def state(lead: Leadership) -> tuple[bool, int | None]:
    """Whether ``lead`` leads, and its epoch."""
    return lead.is_leader, lead.epoch

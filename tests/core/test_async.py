"""What only the async API has: owners named after tasks, and cancellation.

The scenarios both APIs must pass are written once, with the ``driver`` fixture, in the test
modules of what they test (test_lock.py, test_waiting.py, test_backends.py); so are the
waiting coroutine that lets the loop run and the cancelled waiter, in test_waiting.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from django_redis_lock import Lock, get_lock_manager, lock, signals
from django_redis_lock.exceptions import LateGrant
from testproject.redis_server import RedisServer
from tests.helpers import received, until_redis_has_unread_request


def test_async_owner_names_the_task() -> None:
    async def take() -> None:
        await lock("task-owned", auto_renew=False).aacquire()

    async def main() -> None:
        await asyncio.create_task(take(), name="billing-task")

    asyncio.run(main())
    info = get_lock_manager().get("task-owned")
    assert info is not None
    assert "task billing-task" in info.owner


# -- cancellation never leaves a hold behind (issue 9) -----------------------------------------


@contextlib.asynccontextmanager
async def sent_to_paused_redis(
    redis_server: RedisServer, attempt: Lock
) -> AsyncIterator[asyncio.Task[bool]]:
    """``attempt.aacquire(blocking=False)`` sent to a paused Redis, which resumes (and runs
    it) when the block ends; this loop's client is connected first."""
    warm = lock(attempt.name, auto_renew=False)
    assert await warm.aacquire(blocking=False)
    await warm.arelease()
    redis_server.pause()
    try:
        task = asyncio.create_task(attempt.aacquire(blocking=False))
        await until_redis_has_unread_request(redis_server.port)
        yield task
    finally:
        redis_server.resume()


def test_a_cancelled_non_blocking_aacquire_whose_attempt_ran_leaves_no_hold(
    redis_server: RedisServer,
) -> None:
    async def main() -> None:
        attempt = lock("cancelled-take", timeout=30, auto_renew=False)
        async with sent_to_paused_redis(redis_server, attempt) as task:
            task.cancel()  # as Django cancels an async view whose client went away
        # Redis resumed and ran the attempt: it granted the lock
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not attempt.owned()
        assert await lock("cancelled-take").aacquire(blocking=False)  # nobody holds it

    asyncio.run(main())


def test_a_cancelled_arelease_can_be_retried_quietly(redis_server: RedisServer) -> None:
    async def main() -> None:
        held = lock("cancelled-release", auto_renew=False)
        assert await held.aacquire()
        redis_server.pause()
        try:
            task = asyncio.create_task(held.arelease())
            await until_redis_has_unread_request(redis_server.port)
            task.cancel()
        finally:
            redis_server.resume()  # Redis runs the release; its reply goes nowhere
        with pytest.raises(asyncio.CancelledError):
            await task
        with received(signals.lock_lost) as lost:
            await held.arelease()  # the retry: this hold released itself, no LockNotOwned
        assert lost == []
        assert not held.lost
        assert not await held.alocked()

    asyncio.run(main())


def test_a_grant_whose_reply_came_after_its_lease_is_not_trusted(redis_server: RedisServer) -> None:
    async def main() -> None:
        attempt = lock("late-grant", timeout=0.25, auto_renew=False)
        async with sent_to_paused_redis(redis_server, attempt) as task:
            await asyncio.sleep(0.4)  # the fault itself: Redis frozen for longer than the lease
        with pytest.raises(LateGrant, match=r"reply took .* given back"):
            await task  # not blocking: it ends, having given the grant back at once
        assert attempt.fencing_token is None
        assert not await lock("late-grant").alocked()

    asyncio.run(main())

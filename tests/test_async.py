"""The async API: the same semantics as sync, per-object ownership, no blocked event loop."""

from __future__ import annotations

import asyncio

import pytest
import redis

from django_redis_lock import LockBusy, LockError, LockNotOwned, get_lock_manager, lock, signals
from testproject.redis_server import RedisServer
from tests.helpers import received, until_redis_has_unread_request


def test_async_acquire_release_extend_and_state() -> None:
    async def main() -> None:
        held = lock("async", timeout=10, auto_renew=False)
        assert not await held.alocked()
        assert await held.aacquire()
        assert await held.alocked()
        assert await held.aowned()
        assert 9 < (await held.attl() or 0) <= 10
        await held.aextend(10)
        assert 19 < (await held.attl() or 0) <= 20
        assert not await lock("async").aacquire(blocking=False)
        await held.arelease()
        assert await held.attl() is None
        with pytest.raises(LockNotOwned):
            await held.arelease()
        with pytest.raises(LockNotOwned):
            await held.aextend()

    asyncio.run(main())


def test_async_scripts_are_loaded_again_after_the_server_forgets_them(
    redis_client: redis.Redis,
) -> None:
    async def main() -> None:
        held = lock("async-flushed")
        assert await held.aacquire()
        redis_client.script_flush()
        await held.aextend(5)
        redis_client.script_flush()
        await held.arelease()
        redis_client.script_flush()
        assert await lock("async-flushed").aacquire(blocking=False)

    asyncio.run(main())


def test_async_context_manager_and_busy() -> None:
    async def main() -> None:
        async with lock("async-ctx") as held:
            assert held.fencing_token is not None
            with pytest.raises(LockBusy):
                async with lock("async-ctx", blocking_timeout=0):
                    pass
            with pytest.raises(LockError):
                await held.aacquire()
        assert not await held.alocked()

    asyncio.run(main())


def test_ownership_belongs_to_the_object_not_the_task() -> None:
    async def main() -> None:
        held = lock("handed-over")
        await asyncio.create_task(held.aacquire())
        assert await held.aowned()  # another task took it; this one may use and release it
        await asyncio.create_task(held.arelease())
        assert not await held.alocked()

    asyncio.run(main())


def test_async_owner_names_the_task() -> None:
    async def take() -> None:
        await lock("task-owned", auto_renew=False).aacquire()

    async def main() -> None:
        await asyncio.create_task(take(), name="billing-task")

    asyncio.run(main())
    info = get_lock_manager().get("task-owned")
    assert info is not None
    assert "task billing-task" in info.owner


def test_async_waiters_are_served_by_release() -> None:
    async def main() -> list[bool]:
        holder = lock("async-queue", auto_renew=False)  # a 30 s lease nobody renews
        await holder.aacquire()
        waiters = [lock("async-queue", blocking_timeout=10) for _ in range(5)]
        queued = asyncio.Event()
        busy: list[object] = []

        def on_busy(**kwargs: object) -> None:  # sent on the loop, once a waiter is queued
            busy.append(kwargs["lock"])
            if len(busy) == len(waiters):
                queued.set()

        async def take(waiting: object) -> bool:
            got = await waiting.aacquire()  # type: ignore[attr-defined]
            await waiting.arelease()  # type: ignore[attr-defined]
            return bool(got)

        signals.lock_busy.connect(on_busy, weak=False)
        try:
            tasks = [asyncio.create_task(take(w)) for w in waiters]
            await asyncio.wait_for(queued.wait(), 5)
        finally:
            signals.lock_busy.disconnect(on_busy)
        await holder.arelease()
        # Within 10 s, long before the holder's lease ends: the release woke them, in turn.
        return await asyncio.wait_for(asyncio.gather(*tasks), 10)

    assert asyncio.run(main()) == [True] * 5


def test_async_blocking_timeout() -> None:
    async def main() -> None:
        holder = lock("async-deadline", auto_renew=False)
        await holder.aacquire()
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert not await lock("async-deadline").aacquire(blocking_timeout=0.2)
        assert 0.2 <= loop.time() - started < 0.35
        await holder.arelease()

    asyncio.run(main())


# -- cancellation never leaves a hold behind (issue 9) -----------------------------------------


def test_a_cancelled_non_blocking_aacquire_whose_attempt_ran_leaves_no_hold(
    redis_server: RedisServer,
) -> None:
    async def main() -> None:
        warm = lock("cancelled-take", auto_renew=False)  # this loop's client has a connection
        assert await warm.aacquire(blocking=False)
        await warm.arelease()
        attempt = lock("cancelled-take", timeout=30, auto_renew=False)
        redis_server.pause()
        try:
            task = asyncio.create_task(attempt.aacquire(blocking=False))
            await until_redis_has_unread_request(redis_server.port)
            task.cancel()  # as Django cancels an async view whose client went away
        finally:
            redis_server.resume()  # Redis runs the attempt: it grants the lock
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

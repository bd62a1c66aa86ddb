"""A waiting thread reads its process's wake-up channel itself when nobody else does, and
shares it with the listener thread and async waiters."""

from __future__ import annotations

import asyncio
import threading
from functools import partial

import pytest
import redis

from django_redis_lock import lock
from django_redis_lock.runtime import runtime
from django_redis_lock.runtime.listener import Listener
from django_redis_lock.runtime.tickets import Grant, Message, SyncTicket
from tests.helpers import hold, keys, listen, queued_behind, start, wait_until


class _Recorded(SyncTicket):
    """A ticket that notes the thread its wake-up came from."""

    woken_on: threading.Thread | None = None

    def wake(self, message: Message) -> None:
        self.woken_on = threading.current_thread()
        super().wake(message)


def test_a_lone_waiting_thread_reads_its_grant_itself(redis_client: redis.Redis) -> None:
    listen()
    listener = runtime().listener(runtime().backend())
    assert isinstance(listener, Listener)
    read_by_the_waiter = 0
    for number in range(1, 21):
        ticket, secret = _Recorded(), f"reader-{number}"
        listener.register(secret, ticket)

        def wait(ticket: _Recorded = ticket) -> tuple[Message, threading.Thread]:
            return ticket.wait(5), threading.current_thread()

        waiting = start(wait)
        redis_client.publish(listener.channel, f"{secret}:{number}:{number + 1}")
        message, thread = waiting.result(5)
        assert message == Grant(number, number + 1)
        read_by_the_waiter += ticket.woken_on is thread
        listener.unregister(secret)
    # The listener thread takes the channel back once a second to look at it (and keeps it
    # while a waiter is registered): a grant may fall in that window now and then.
    assert read_by_the_waiter >= 15


@pytest.mark.parametrize("first", ["async", "sync"])
def test_a_reading_thread_and_an_async_waiter_are_both_handed_their_locks(
    redis_client: redis.Redis, first: str
) -> None:
    listen()
    holders = dict(zip("ab", hold("shared-a", "shared-b"), strict=True))
    queued = {"a": threading.Event(), "b": threading.Event()}

    def wait_in_a_thread() -> bool:
        waiting = lock("shared-a", timeout=30, blocking_timeout=20, auto_renew=False)
        queued["a"].set()
        got = waiting.acquire()
        waiting.release()
        return got

    async def wait_on_a_loop() -> bool:
        waiting = lock("shared-b", timeout=30, blocking_timeout=20, auto_renew=False)
        queued["b"].set()
        got = await waiting.aacquire()
        await waiting.arelease()
        return got

    waiters = {"a": start(wait_in_a_thread), "b": start(lambda: asyncio.run(wait_on_a_loop()))}
    for name in "ab":  # queued in Redis: the ticket is registered right after that reply
        assert queued[name].wait(5)
        queue = keys(f"shared-{name}").queue
        wait_until(partial(redis_client.zcard, queue))
    # Each holder's lease is 60 s and each waiter's 20 s: only a grant wakes them in time.
    order = "ba" if first == "async" else "ab"
    for name in order:
        holders[name].release()
        assert waiters[name].result(5)


def test_a_release_that_hands_the_lock_over_gives_up_the_core_once(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So that the new holder, woken by the same reply, runs at once where it shares the core
    (or the GIL); a release that hands nothing over goes straight on."""
    from django_redis_lock.core import holding as lock_module

    yielded: list[str] = []
    monkeypatch.setattr(lock_module, "_let_run", lambda: yielded.append("yield"))
    holder, waiting, taken = queued_behind("let-run", redis_client)
    holder.release()
    assert yielded == ["yield"]
    assert taken.result(5)
    waiting.release()  # nobody waits
    assert yielded == ["yield"]

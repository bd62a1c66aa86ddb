"""What a multi-name lock must do on every topology, written once (``test_many.py`` runs it on
one server, ``test_topologies.py`` on a cluster and a quorum)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from django_redis_lock import MultiLock, lock, lock_many
from tests.helpers import AsyncDriver, SyncDriver

# How long the opposite-order runs may take at most: a deadlock fails the test, never hangs it.
RACE_SECONDS = 60.0


def call(driver: SyncDriver, held: MultiLock, method: str, *args: Any, **kwargs: Any) -> Any:
    """``held.<method>(...)`` through the driver's API (``a<method>`` on its loop if async)."""
    if isinstance(driver, AsyncDriver):
        return driver.run(getattr(held, f"a{method}")(*args, **kwargs))
    return getattr(held, method)(*args, **kwargs)


def all_or_none(driver: SyncDriver) -> None:
    """One name held by another: the set is not taken, and none of its names is held."""
    other = lock("b")
    assert other.acquire()
    many = lock_many(["c", "a", "b"])
    assert not call(driver, many, "acquire", blocking=False)
    assert many.fencing_tokens == {}
    assert many.busy_name == "b"
    assert not lock("a").locked()
    assert not lock("c").locked()
    other.release()
    assert call(driver, many, "acquire", blocking=False)
    assert list(many.fencing_tokens) == ["a", "b", "c"]
    assert all(lock(name).locked() for name in "abc")
    call(driver, many, "release")
    assert not any(lock(name).locked() for name in "abc")
    assert many.fencing_tokens == {}


def tokens_increase(driver: SyncDriver) -> None:
    """Each name's fencing token grows across holds, and a single lock of the name follows."""
    first = lock_many(["x", "y"])
    assert call(driver, first, "acquire")
    before = dict(first.fencing_tokens)
    call(driver, first, "release")
    second = lock_many(("y", "x"))
    assert call(driver, second, "acquire")
    assert all(second.fencing_tokens[n] > before[n] for n in "xy")
    call(driver, second, "release")
    single = lock("x")
    assert single.acquire()
    assert single.fencing_token is not None
    assert single.fencing_token > second.fencing_tokens.get("x", before["x"])
    single.release()


def waits_and_times_out(driver: SyncDriver) -> None:
    """A blocking acquire takes the set once the busy name is released; one that times out
    leaves nothing held."""
    other = lock("m2")
    assert other.acquire()
    many = lock_many(["m1", "m2", "m3"])
    began = time.monotonic()
    assert not call(driver, many, "acquire", blocking_timeout=0.3)
    assert 0.25 < time.monotonic() - began < 5
    assert not lock("m1").locked()
    assert not lock("m3").locked()
    done = threading.Event()
    got: list[bool] = []

    def take() -> None:
        got.append(call(driver, many, "acquire", blocking_timeout=10))
        done.set()

    threading.Thread(target=take, daemon=True).start()
    time.sleep(0.05)  # let it queue; the outcome does not depend on it
    other.release()
    assert done.wait(10)
    assert got == [True]
    call(driver, many, "release")


def opposite_orders(rounds: int) -> None:
    """Two threads take the same three names in opposite orders: no deadlock, no overlap."""
    inside = [0]
    overlaps = [0]
    failures: list[BaseException] = []
    deadline = time.monotonic() + RACE_SECONDS

    def worker(names: list[str]) -> None:
        try:
            for _ in range(rounds):
                many = lock_many(names, blocking_timeout=RACE_SECONDS)
                if time.monotonic() > deadline:
                    raise TimeoutError("the rounds took too long")
                assert many.acquire()
                inside[0] += 1
                if inside[0] != 1:
                    overlaps[0] += 1
                inside[0] -= 1
                many.release()
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=worker, args=(names,), daemon=True)
        for names in (["r1", "r2", "r3"], ["r3", "r2", "r1"])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_SECONDS + 5)
        assert not thread.is_alive(), "deadlock: a thread never finished"
    assert failures == []
    assert overlaps == [0]


async def async_with() -> None:
    """``async with`` takes and releases every name."""
    async with lock_many(["p", "q"]) as many:
        assert set(many.fencing_tokens) == {"p", "q"}
        assert await lock("p").alocked()
    assert not await lock("q").alocked()


def run_async_with() -> None:
    asyncio.run(async_with())

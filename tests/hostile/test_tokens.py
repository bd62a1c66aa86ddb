"""Hostile probes of the fencing counter: a lock's last token overwritten with text that Lua
reads as NaN, an infinity, a negative or no number. The promise held: a token is a positive
integer that keeps increasing (docs/locks.rst, fencing tokens); garbage restarts the counter
from the clock, never from a negative number."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from django_redis_lock import lock, lock_many, semaphore
from tests.helpers import server_backend

GARBAGE = ["nan", "-nan", "inf", "-inf", "-5", "abc", "1e400", ""]


def _spoil(redis_client: redis.Redis, name: str, value: str) -> None:
    """A tombstone of ``name`` whose last token is ``value``."""
    key = server_backend().keys_for(name).lock
    redis_client.delete(key)
    redis_client.hset(key, "t", value)


def _tokens_of_a_lock(name: str) -> list[int | None]:
    with lock(name) as held:
        return [held.fencing_token]


def _tokens_of_a_set(name: str) -> list[int | None]:
    with lock_many([name, f"{name}-other"]) as held:
        return list(held.fencing_tokens.values())


@pytest.mark.parametrize("take", [_tokens_of_a_lock, _tokens_of_a_set])
@pytest.mark.parametrize("value", GARBAGE)
def test_a_lock_after_a_garbage_token_gets_a_positive_one(
    redis_client: redis.Redis, value: str, take: Callable[[str], list[int | None]]
) -> None:
    _spoil(redis_client, "spoiled", value)
    started = time.time_ns() // 1000
    tokens = take("spoiled")
    assert all(token is not None and token >= started - 5_000_000 for token in tokens), tokens


@pytest.mark.parametrize("value", GARBAGE)
def test_a_semaphore_after_a_garbage_token_gets_a_positive_one(
    redis_client: redis.Redis, value: str
) -> None:
    key = server_backend().shared_keys_for("spoiled-pool", "s").lock
    redis_client.delete(key)
    redis_client.hset(key, "#t", value)
    started = time.time_ns() // 1000
    with semaphore("spoiled-pool", 2) as held:
        assert held.fencing_token is not None
        assert held.fencing_token >= started - 5_000_000

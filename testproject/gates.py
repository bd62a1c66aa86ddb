"""Gates for the demo's tasks in the tests: a task says it started, then waits to be let on."""

from __future__ import annotations

import os

import redis

# How long a task waits for its gate before giving up.
GATE_SECONDS = 30


def through_gate(gate: str, value: object) -> None:
    """RPUSH ``<gate>:started`` (the test sees the task run), then wait for a push on ``gate``
    (on the Redis at REDIS_URL)."""
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        client.rpush(f"{gate}:started", str(value))
        if client.blpop([gate], timeout=GATE_SECONDS) is None:
            raise TimeoutError(f"nobody opened the gate {gate!r}")
    finally:
        client.close()


def record_run(log: str, value: object) -> None:
    """RPUSH ``"<value>:<the Redis server's time>"`` to the list ``log`` (on the Redis at
    REDIS_URL): which runs happened, and when by one clock."""
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        seconds, microseconds = client.time()
        client.rpush(log, f"{value}:{seconds + microseconds / 1e6:.6f}")
    finally:
        client.close()

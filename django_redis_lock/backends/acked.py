"""Scripts acknowledged by replicas: each followed by ``WAIT`` in one pipeline, and the
verdict on the replies (``REDIS_LOCK["WAIT_REPLICAS"]``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import LuaScript
from django_redis_lock.backends.clients import Client
from django_redis_lock.exceptions import LockNotReplicated

Pipelines = list[tuple[tuple[Any, ...], ...]]


def acked_commands(
    lua: LuaScript, keys: Sequence[str | bytes], args: Sequence[Any], wait: tuple[int, int]
) -> Pipelines:
    """The pipelines to try in turn: the script by its SHA, then (unknown) by its source, each
    followed by ``WAIT replicas timeout_ms``."""
    command = ("WAIT", *wait)
    return [
        (("EVALSHA", lua.sha, len(keys), *keys, *args), command),
        (("EVAL", lua.source, len(keys), *keys, *args), command),
    ]


def acked_results(client: Any, pipelines: Pipelines) -> list[Any]:
    """The replies of the first pipeline whose script the server knows, errors among them as
    they came."""
    results: list[Any] = []
    for commands in pipelines:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        results = pipe.execute(raise_on_error=False)
        if not isinstance(results[0], errors.NO_SCRIPT):
            break
    return results


async def aacked_results(client: Client, pipelines: Pipelines) -> list[Any]:
    """:func:`acked_results` on an asyncio client."""
    results: list[Any] = []
    for commands in pipelines:
        try:
            results = await pipelined(client, commands)
        except errors.CONNECTION:  # a pooled connection that died while idle: a new one
            results = await pipelined(client, commands)
        if not isinstance(results[0], errors.NO_SCRIPT):
            break
    return results


async def pipelined(client: Client, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """``commands`` in one pipeline of an asyncio client; their replies (errors as values)."""
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    results: list[Any] = await pipe.execute(raise_on_error=False)
    return results


def acknowledged(script: str, results: list[Any], replicas: int, timeout_ms: int) -> Any:
    """The script's reply, or LockNotReplicated when it granted something too few replicas
    acknowledged. An array reply (a busy acquire) granted nothing: it needs no
    acknowledgement, and comes back as it is."""
    reply, count = results
    if int(count) >= replicas or isinstance(reply, list):
        return reply
    raise LockNotReplicated(
        f"{count} of the {replicas} replicas REDIS_LOCK['WAIT_REPLICAS'] asks for acknowledged "
        f"the lock's {script} within {timeout_ms / 1000:g} s (REDIS_LOCK['WAIT_TIMEOUT'])",
        int(count),
        replicas,
        reply,
    )

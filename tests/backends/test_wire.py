"""Reading the wake-up channel's connection: from its socket with hiredis's parser, or through
the client library; both read the same replies, in order, and fail the same way."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_redis_lock.backends import errors, wire
from django_redis_lock.runtime import listener as listener_module
from django_redis_lock.runtime import runtime
from tests.helpers import listen, queued_behind, server_backend, wait_until

HIREDIS = importlib.util.find_spec("hiredis") is not None
# The read timeout the connection is made with, as the listener makes its own.
READ_SECONDS = 0.5


@pytest.fixture(params=["socket", "client"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How connections are read in the test: from the socket (hiredis installed) or through
    the client library (hiredis taken away)."""
    if request.param == "socket" and not HIREDIS:
        pytest.skip("hiredis is not installed: the client library reads the connection")
    if request.param == "client":
        monkeypatch.setattr(wire, "hiredis", None)
    return str(request.param)


@pytest.fixture
def subscribed(reader: str) -> Iterator[tuple[Any, wire.Replies]]:
    """A connection made as the listener makes its own, subscribed to "wire", and its reader."""
    connection = server_backend().own_connection(read_timeout=READ_SECONDS)
    connection.connect()
    connection.send_command("SUBSCRIBE", "wire")
    replies = wire.replies_of(connection, READ_SECONDS)
    kind = wire.SocketReplies if reader == "socket" else wire.ClientReplies
    assert isinstance(replies, kind)
    assert _text(replies.read(None)) == ["subscribe", "wire", "1"]
    try:
        yield connection, replies
    finally:
        connection.disconnect()


def _text(reply: Any) -> list[str]:
    return [part.decode() if isinstance(part, bytes) else str(part) for part in reply]


def _is_pong(reply: Any) -> bool:
    """PONG as a subscribed connection answers it: +PONG on RESP3, [pong, ""] on RESP2."""
    if isinstance(reply, bytes):
        return reply == b"PONG"
    return isinstance(reply, list) and _text(reply) == ["pong", ""]


def test_messages_come_in_order_and_whole(
    subscribed: tuple[Any, wire.Replies], redis_client: redis.Redis
) -> None:
    _, replies = subscribed
    big = "x" * 300_000  # several reads of the socket for one reply
    for payload in ("secret-1:5:6", big, "secret-2:7:8"):
        redis_client.publish("wire", payload)
    found = [_text(replies.read(5)) for _ in range(3)]
    assert found == [
        ["message", "wire", "secret-1:5:6"],
        ["message", "wire", big],
        ["message", "wire", "secret-2:7:8"],
    ]


def test_nothing_in_time_is_nothing_and_the_connection_still_serves(
    subscribed: tuple[Any, wire.Replies], redis_client: redis.Redis
) -> None:
    connection, replies = subscribed
    assert replies.read(0) is wire.NOTHING  # only what is there already: nothing
    started = time.monotonic()
    assert replies.read(0.05) is wire.NOTHING
    assert 0.04 <= time.monotonic() - started < READ_SECONDS
    if isinstance(replies, wire.SocketReplies):  # the connection's timeout, for its sends
        # redis-py's socket, which it names no public way to (wire.replies_of reads it so too).
        assert connection._sock.gettimeout() == READ_SECONDS
    connection.send_command("PING")
    assert _is_pong(replies.read(5))
    redis_client.publish("wire", "late:1:2")
    assert _text(replies.read(5)) == ["message", "wire", "late:1:2"]


def test_a_message_already_there_is_read_without_waiting(
    subscribed: tuple[Any, wire.Replies], redis_client: redis.Redis
) -> None:
    _, replies = subscribed
    redis_client.publish("wire", "here:1:2")
    found = wait_until(lambda: (reply := replies.read(0)) is not wire.NOTHING and reply)
    assert _text(found) == ["message", "wire", "here:1:2"]


def test_an_error_reply_raises(subscribed: tuple[Any, wire.Replies]) -> None:
    connection, replies = subscribed
    connection.send_command("NO-SUCH-COMMAND")
    with pytest.raises(Exception, match=r"(?i)unknown command"):
        replies.read(5)


def test_a_connection_closed_by_the_server_raises(
    subscribed: tuple[Any, wire.Replies], redis_client: redis.Redis
) -> None:
    _, replies = subscribed
    assert redis_client.client_kill_filter(_type="pubsub") >= 1
    with pytest.raises((ConnectionError, *errors.CONNECTION)):
        replies.read(5)


def test_the_listener_reads_with_either_and_hands_a_lock_over(
    reader: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[wire.Replies] = []

    def recorded(connection: Any, read_timeout: float) -> wire.Replies:
        made.append(wire.replies_of(connection, read_timeout))
        return made[-1]

    monkeypatch.setattr(listener_module, "replies_of", recorded)
    runtime().reset()  # a new listener, which picks its reader as the fixture set it
    listen()
    kind = wire.SocketReplies if reader == "socket" else wire.ClientReplies
    assert made
    assert all(isinstance(replies, kind) for replies in made)
    holder, waiting, taken = queued_behind("wire-handover", redis_client)
    holder.release()
    assert taken.result(5)
    assert waiting.fencing_token is not None
    waiting.release()

"""The fault suite's TCP proxy (faults/proxy.py): forwarding, and the two ways it cuts.

Real sockets on loopback, and a real redis-server behind the proxy. A negative check ("nothing
passes while held") waits for a reply at most HELD_WAIT seconds: the proxy holds for as long as
it is told, so a short look is enough to see that nothing came.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from faults.proxy import Proxy
from testproject.redis_server import RedisServer, RedisServerGroup, command

# How long a test waits for a reply that should come (through a proxy that forwards).
REPLY_WAIT = 5.0
# How long a test looks for a reply that must not come (through a proxy that holds).
HELD_WAIT = 0.3
PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


def _set(key: str, value: str) -> bytes:
    parts = [b"SET", key.encode(), value.encode()]
    return b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


@pytest.fixture
def server(redis_factory: RedisServerGroup) -> RedisServer:
    return redis_factory()


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[Proxy]:
    with Proxy(server.port) as started:
        yield started


def _connect(proxy: Proxy) -> socket.socket:
    return socket.create_connection(proxy.address, timeout=REPLY_WAIT)


def _reply(sock: socket.socket, size: int, timeout: float = REPLY_WAIT) -> bytes:
    """Read ``size`` bytes (bounded in time); fewer if the connection ends."""
    sock.settimeout(timeout)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _ping(sock: socket.socket) -> bytes:
    """Send PING and read the reply (ConnectionResetError when the connection is reset)."""
    sock.sendall(PING)
    return _reply(sock, len(PONG))


def _ping_anew(proxy: Proxy) -> bytes:
    """:func:`_ping` on a new connection (a reset may already fail the connect)."""
    with _connect(proxy) as sock:
        return _ping(sock)


def _client(proxy: Proxy) -> redis.Redis:
    # No retries: a test that expects a failure must see the first one.
    host, port = proxy.address
    return redis.Redis(host=host, port=port, socket_timeout=REPLY_WAIT, retry=Retry(NoBackoff(), 0))


def test_forwards_both_ways_on_loopback(server: RedisServer, proxy: Proxy) -> None:
    host, port = proxy.address
    assert host == "127.0.0.1"
    assert port not in (0, server.port)
    client = _client(proxy)
    assert client.set("key", "through the proxy")
    assert client.get("key") == b"through the proxy"
    big = "x" * 1_000_000  # more than one read and one socket buffer, both ways
    assert client.set("big", big)
    assert client.get("big") == big.encode()
    assert command(server.host, server.port, "GET", "key") == b"through the proxy"
    client.close()


def test_reset_closes_connections_and_refuses_new_ones(server: RedisServer, proxy: Proxy) -> None:
    sock = _connect(proxy)
    assert _ping(sock) == PONG
    proxy.cut("reset")
    with pytest.raises(ConnectionResetError):
        _ping(sock)
    sock.close()
    with pytest.raises(ConnectionResetError):  # accepted (by the kernel) and reset at once
        _ping_anew(proxy)
    proxy.heal()
    assert _ping_anew(proxy) == PONG


def test_hold_passes_nothing_until_healed(server: RedisServer, proxy: Proxy) -> None:
    sock = _connect(proxy)
    assert _ping(sock) == PONG
    proxy.cut("hold")
    sock.sendall(_set("held", "1"))
    with pytest.raises(TimeoutError):
        _reply(sock, 5, timeout=HELD_WAIT)
    assert command(server.host, server.port, "GET", "held") == b""  # it never reached Redis
    late = _connect(proxy)  # accepted, not forwarded
    late.sendall(PING)
    with pytest.raises(TimeoutError):
        _reply(late, len(PONG), timeout=HELD_WAIT)
    proxy.heal()
    assert _reply(sock, 5) == b"+OK\r\n"  # what was held passes, in order
    assert command(server.host, server.port, "GET", "held") == b"1"
    assert _reply(late, len(PONG)) == PONG
    sock.close()
    late.close()


def test_a_held_connection_can_be_reset(server: RedisServer, proxy: Proxy) -> None:
    sock = _connect(proxy)
    proxy.cut("hold")
    sock.sendall(PING)
    proxy.cut("reset")
    with pytest.raises(ConnectionResetError):
        _reply(sock, len(PONG))
    sock.close()
    proxy.heal()
    assert _client(proxy).ping()


def test_a_target_that_is_down_is_a_reset(redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    with Proxy(server.port) as proxy:
        server.kill()
        with pytest.raises(ConnectionResetError):
            _ping_anew(proxy)


def test_stop_ends_connections_and_listening(server: RedisServer) -> None:
    proxy = Proxy(server.port)
    port = proxy.start()
    sock = _connect(proxy)
    assert _ping(sock) == PONG
    proxy.stop()
    with pytest.raises(ConnectionResetError):
        _ping(sock)
    sock.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=REPLY_WAIT).close()
    proxy.stop()  # a second stop does nothing


def test_cut_takes_only_reset_or_hold(proxy: Proxy) -> None:
    with pytest.raises(ValueError, match="reset, hold"):
        proxy.cut("drop")

"""A Redis Sentinel deployment on loopback, for tests and fault injection: one primary, its
replicas and the sentinels watching them, each a private RedisServer of redis_server.py.

Standard library only, like redis_server.py. The sentinels detect a dead primary after
DOWN_AFTER_MS and give a failover FAILOVER_TIMEOUT_MS, so a failover completes in a few seconds
instead of Sentinel's default half a minute. Every wait is bounded (WAIT_TIMEOUT).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import BinaryIO, TypeVar

from testproject.redis_server import RedisServer, find_redis_server

DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 2000
# The longest any wait of this module lasts: electing a primary takes about 2 s here.
WAIT_TIMEOUT = 20.0
POLL_INTERVAL = 0.05

T = TypeVar("T")
Reply = str | int | None | list["Reply"]


class ReplyError(Exception):
    """An error reply of a Redis server or Sentinel."""


def call(host: str, port: int, *args: str, timeout: float = 0.5) -> Reply:
    """Send one command over a raw socket and return its parsed reply (strings decoded).

    Unlike redis_server.command this reads every RESP2 reply type (Sentinel answers arrays).
    Raises OSError when the server cannot be reached, ReplyError for an error reply.
    """
    request = f"*{len(args)}\r\n".encode() + b"".join(
        b"$%d\r\n%s\r\n" % (len(arg.encode()), arg.encode()) for arg in args
    )
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        with sock.makefile("rb") as stream:
            return _read_reply(stream)


def _read_reply(stream: BinaryIO) -> Reply:
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise OSError("connection closed by the server")
    kind, body = line[:1], line[1:-2].decode(errors="replace")
    if kind == b"+":
        return body
    if kind == b"-":
        raise ReplyError(body)
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data = stream.read(size + 2)
        if len(data) != size + 2:
            raise OSError("connection closed by the server")
        return data[:-2].decode(errors="replace")
    if kind == b"*":
        count = int(body)
        return None if count < 0 else [_read_reply(stream) for _ in range(count)]
    raise OSError(f"unexpected reply: {line[:80]!r}")


def info(server: RedisServer, section: str = "replication") -> dict[str, str]:
    """A running server's INFO section as a dict; empty when it does not answer."""
    try:
        text = call(server.host, server.port, "INFO", section)
    except (OSError, ReplyError):
        return {}
    fields = (line.partition(":") for line in str(text).splitlines() if ":" in line)
    return {key: value for key, _, value in fields}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_TIMEOUT) -> T:
    """Poll ``probe`` until it returns something other than None (at most ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_INTERVAL)


class SentinelTopology:
    """One primary, ``replicas`` replicas and ``sentinels`` sentinels on free loopback ports.

    A context manager: ``with SentinelTopology() as topology:`` starts everything and stops it
    all (by PID, through RedisServer) at the end. ``failover()`` and ``kill_primary()`` play
    the two ways a primary changes; ``recover()`` brings killed servers back as replicas.
    """

    def __init__(
        self,
        replicas: int = 2,
        sentinels: int = 3,
        service: str = "mymaster",
        binary: str | None = None,
    ) -> None:
        """Describe the deployment; nothing runs until ``start()``."""
        if replicas < 0 or sentinels < 1:
            raise ValueError("a topology needs at least one sentinel and no negative replicas")
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.service = service
        self.binary = binary or find_redis_server()
        #: Every data server (primary and replicas, in start order) and every sentinel.
        self.servers: list[RedisServer] = []
        self.sentinels: list[RedisServer] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SentinelTopology:
        """Start the servers and sentinels; return once the sentinels know every replica and
        each other, so that a failover can start at once."""
        try:
            primary = RedisServer(binary=self.binary)
            self._launch(primary, self.servers)
            for _ in range(self.replica_count):
                replica = RedisServer.replica(primary.host, primary.port, binary=self.binary)
                self._launch(replica, self.servers)
                replica.wait_until_synced()
            for _ in range(self.sentinel_count):
                sentinel = RedisServer.sentinel(
                    primary.host, primary.port, self.service, binary=self.binary
                )
                self._launch(sentinel, self.sentinels)
                self._ask_sentinel(
                    sentinel,
                    "SENTINEL",
                    "SET",
                    self.service,
                    "down-after-milliseconds",
                    str(DOWN_AFTER_MS),
                    "failover-timeout",
                    str(FAILOVER_TIMEOUT_MS),
                )
            wait_for("the sentinels to find each other", self._sentinels_acquainted)
            self.wait_for_replicas(self.replica_count)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server and sentinel this topology started, whatever their state."""
        for group in (self.sentinels, self.servers):
            while group:
                group.pop().stop()

    def __enter__(self) -> SentinelTopology:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ", ".join(str(server.port) for server in self.servers)
        return f"<SentinelTopology {self.service!r} servers [{ports}]>"

    # -- what the sentinels say --------------------------------------------------------------

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every sentinel, as client configurations list them."""
        return [(sentinel.host, sentinel.port) for sentinel in self.sentinels]

    def primary(self) -> RedisServer:
        """The server most of the answering sentinels name as the primary."""
        server = self._reported_primary()
        if server is None:
            raise RuntimeError(f"the sentinels of {self!r} agree on no primary of ours")
        return server

    def replicas(self) -> list[RedisServer]:
        """The running servers that are not the primary."""
        primary = self.primary()
        return [server for server in self.servers if server is not primary and server.running]

    # -- faults ------------------------------------------------------------------------------

    def failover(self) -> RedisServer:
        """``SENTINEL FAILOVER``; return the new primary once every answering sentinel names it.

        The old primary stays a writable primary until Sentinel converts it (about 10 s later;
        ``settle()`` does it at once).
        """
        old = self.primary()

        def started() -> bool | None:
            try:
                self._ask_sentinel(self.sentinels[0], "SENTINEL", "FAILOVER", self.service)
            except ReplyError:  # INPROG, NOGOODSLAVE: the last failover is not over yet
                return None
            return True

        wait_for("a sentinel to accept SENTINEL FAILOVER", started)
        return self._wait_for_new_primary(old, "the failover")

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary; return the new one once every answering sentinel names it."""
        old = self.primary()
        old.kill()
        return self._wait_for_new_primary(old, "the election after SIGKILL of the primary")

    def wait_until_announced(self, primary: RedisServer) -> None:
        """Return once every answering sentinel lists ``primary`` in ``SENTINEL MASTERS``.

        That is where redis-py's and valkey-py's Sentinel pools look the primary up, and the
        sentinels switch it there only when the failover ends (the other replicas follow the
        new primary): about a second after ``GET-MASTER-ADDR-BY-NAME`` names the promoted one,
        which is what :meth:`failover` and :meth:`kill_primary` wait for.
        """

        def announced() -> bool | None:
            for sentinel in self._answering():
                if self._master_state(sentinel).get("port") != str(primary.port):
                    return None
            return True

        wait_for(f"the sentinels to list {primary.port} as the primary", announced)

    def settle(self) -> None:
        """Make the topology whole again at once: wait until every sentinel is done with the
        last failover, restart killed servers, turn every running server that is not the
        primary into its replica (Sentinel converts a demoted primary only about 10 s after a
        failover), and wait until they synced."""
        wait_for("the sentinels to end the failover", self._failover_over)
        primary = self.primary()
        for server in self.servers:
            if server is primary:
                continue
            if not server.running:
                server.start()
            if info(server).get("master_port") != str(primary.port):
                self._ask_sentinel(server, "REPLICAOF", primary.host, str(primary.port))
        self.wait_for_replicas(len(self.servers) - 1)

    def wait_for_replicas(self, n: int, timeout: float = WAIT_TIMEOUT) -> list[RedisServer]:
        """Wait until the primary has ``n`` online replicas and the sentinels know that many
        healthy ones; return the replicas."""

        def ready() -> list[RedisServer] | None:
            primary = self._reported_primary()
            if primary is None:
                return None
            fields = info(primary)
            online = [
                port
                for key, value in fields.items()
                if key.startswith("slave") and "state=online" in value
                for port in _field(value, "port")
            ]
            if len(online) < n or not self._sentinels_see_replicas(n):
                return None
            return [server for server in self.servers if str(server.port) in online]

        return wait_for(f"{n} replicas of the primary", ready, timeout)

    # -- internals ---------------------------------------------------------------------------

    def _launch(self, server: RedisServer, into: list[RedisServer]) -> None:
        into.append(server)  # first, so that stop() finds a server that failed half-way
        server.start()

    def _ask_sentinel(self, server: RedisServer, *args: str) -> Reply:
        return call(server.host, server.port, *args)

    def _reported_primary(self) -> RedisServer | None:
        """The server that most answering sentinels name, if it is one of ours and runs."""
        votes = Counter(port for port in map(self._sentinel_view, self.sentinels) if port)
        if not votes:
            return None
        (port, count), *_ = votes.most_common(1)
        if count * 2 <= sum(votes.values()):
            return None
        return next(
            (server for server in self.servers if server.port == port and server.running),
            None,
        )

    def _wait_for_new_primary(self, old: RedisServer, what: str) -> RedisServer:
        def elected() -> RedisServer | None:
            new = self._reported_primary()
            if new is None or new is old or info(new).get("role") != "master":
                return None
            # Every sentinel names it (they do once it was promoted; the reconfiguration of the
            # replicas may go on, for a dead one until FAILOVER_TIMEOUT_MS).
            if any(self._sentinel_view(sentinel) != new.port for sentinel in self._answering()):
                return None
            return new

        return wait_for(what, elected)

    def _answering(self) -> Iterator[RedisServer]:
        return (sentinel for sentinel in self.sentinels if sentinel.running)

    def _sentinel_view(self, sentinel: RedisServer) -> int | None:
        with contextlib.suppress(OSError, ReplyError, ValueError):
            reply = self._ask_sentinel(
                sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
            )
            if isinstance(reply, list) and len(reply) == 2:
                return int(str(reply[1]))
        return None

    def _master_state(self, sentinel: RedisServer) -> dict[str, str]:
        with contextlib.suppress(OSError, ReplyError):
            reply = self._ask_sentinel(sentinel, "SENTINEL", "MASTER", self.service)
            if isinstance(reply, list):
                return _pairs(reply)
        return {}

    def _failover_over(self) -> bool | None:
        """True once every answering sentinel names the same healthy primary, and none is
        still reconfiguring replicas (until then a sentinel ignores a new failure)."""
        primary = self._reported_primary()
        for sentinel in self._answering():
            state = self._master_state(sentinel)
            if primary is None or state.get("port") != str(primary.port):
                return None
            if state.get("flags") != "master":  # failover_in_progress, s_down, o_down...
                return None
        return True

    def _sentinels_acquainted(self) -> bool | None:
        others = str(self.sentinel_count - 1)
        states = [self._master_state(sentinel) for sentinel in self.sentinels]
        return True if all(s.get("num-other-sentinels") == others for s in states) else None

    def _sentinels_see_replicas(self, n: int) -> bool:
        for sentinel in self.sentinels:
            try:
                reply = self._ask_sentinel(sentinel, "SENTINEL", "REPLICAS", self.service)
            except (OSError, ReplyError):
                return False
            healthy = 0
            for entry in reply if isinstance(reply, list) else []:
                if not isinstance(entry, list):
                    continue
                fields = _pairs(entry)
                flags = fields.get("flags", "")
                # A sentinel learns a replica's link status only every 10 s: not awaited.
                healthy += "s_down" not in flags and "disconnected" not in flags
            if healthy < n:
                return False
        return True


def _pairs(reply: list[Reply]) -> dict[str, str]:
    """A flat [key, value, key, value...] reply as a dict."""
    return dict(zip(map(str, reply[::2]), map(str, reply[1::2]), strict=False))


def _field(value: str, name: str) -> list[str]:
    """The ``name=...`` entries of an INFO value such as ``ip=...,port=...,state=online``."""
    return [part.partition("=")[2] for part in value.split(",") if part.startswith(f"{name}=")]

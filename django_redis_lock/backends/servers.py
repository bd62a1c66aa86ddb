"""What the lock's Redis servers are set up to do, and what of it endangers held locks.

A lock is only as safe as the server that keeps it. A cache Redis usually runs with
``maxmemory`` and an eviction policy, and every policy but ``noeviction`` may drop a held lock's
key (all of them carry a TTL, so the ``volatile-*`` policies evict them too): the next caller
then takes a lock its holder still works under. A primary that restarts empty forgets its
grants; a replica left with the old primary by a partition lets it go on granting.

The facts come from ``INFO`` (managed services often disable ``CONFIG``), read on a connection
of its own with a short timeout, so a server that does not answer costs a probe that long and
is reported, never raised. The system checks (``checks/caches.py``), the first lock call of
each process (``runtime/__init__.py``) and ``manage.py locks doctor`` (``ops/doctor.py``) read
them through this module.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django_redis_lock.backends.base import text_of

logger = logging.getLogger("django_redis_lock")

#: How long a probe waits for a server to connect and answer (seconds).
PROBE_SECONDS = 0.5
#: The only eviction policy that never drops a key.
SAFE_POLICY = "noeviction"
#: The oldest Redis the product is tested with (Valkey reports a compatible redis_version).
OLDEST_TESTED = (6, 2)
#: The least a lock cache's socket timeout should exceed WAIT_TIMEOUT by (seconds): a WAIT that
#: takes its whole time (a failover, a slow replica) must not time the call out.
WAIT_MARGIN = 0.5


@dataclass(frozen=True)
class ServerFacts:
    """What one server said of itself (``INFO``), or why it could not be asked."""

    #: The cache alias whose locks the server grants.
    alias: str
    #: Where the server is (host:port, or a socket path; "" when not reached).
    address: str
    #: The fields of ``INFO``'s default sections (empty when it did not answer).
    info: dict[str, str] = field(default_factory=dict)
    #: Why the server could not be asked (None: it answered).
    error: str | None = None
    #: ``CONFIG GET`` values read besides INFO (absent where CONFIG is disabled).
    config: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The server as operators know it: its address and cache alias."""
        return f"{self.address or 'the server'} (cache {self.alias!r})"

    @property
    def maxmemory(self) -> int:
        """The memory limit in bytes (0: none)."""
        return _int(self.info.get("maxmemory"))

    @property
    def policy(self) -> str:
        """The eviction policy (``maxmemory_policy``)."""
        return self.info.get("maxmemory_policy", "")

    @property
    def connected_replicas(self) -> int | None:
        """How many replicas the server has connected, as a primary (None: not known)."""
        value = self.info.get("connected_slaves")
        return _int(value) if value is not None else None

    @property
    def version(self) -> tuple[int, ...]:
        """The Redis version it reports (Valkey reports the Redis version it matches)."""
        text = self.info.get("redis_version", "")
        return tuple(_int(part) for part in text.split(".")) if text else ()

    @property
    def product(self) -> str:
        """The server and version, for people: ``Redis 7.0.15``, ``Valkey 8.0.1``."""
        if "valkey_version" in self.info:
            return f"Valkey {self.info['valkey_version']}"
        return f"Redis {self.info.get('redis_version', '?')}"

    def evicts(self) -> bool:
        """Whether the server may drop keys under memory pressure: a limit and a policy other
        than ``noeviction`` (every lock key carries a TTL: ``volatile-*`` policies count)."""
        return self.maxmemory > 0 and self.policy != SAFE_POLICY


def eviction_warning(facts: ServerFacts) -> str:
    """The warning for a server that may evict held locks (see :meth:`ServerFacts.evicts`)."""
    return (
        f"The Redis server {facts.address} of cache {facts.alias!r} may evict keys (maxmemory "
        f"{facts.maxmemory} bytes, maxmemory-policy {facts.policy}): a held lock's key can be "
        "dropped under memory pressure, and the next caller then takes the lock while its holder "
        "still works."
    )


EVICTION_HINT = (
    "Give locks a Redis server that never evicts: maxmemory-policy noeviction (or maxmemory 0). "
    "Eviction is per server, so a separate database does not help; use a separate instance."
)


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def parse_info(text: str) -> dict[str, str]:
    """The ``field:value`` lines of an INFO reply (sections and comments left out)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            fields[key.strip()] = value.strip()
    return fields


def probe_connection(pool: Any, timeout: float = PROBE_SECONDS) -> Any:
    """A new connection configured like ``pool``'s (address, auth, TLS, Sentinel), outside it,
    that gives up connecting and reading after ``timeout`` seconds."""
    kwargs = {**pool.connection_kwargs, "socket_timeout": timeout}
    connect = kwargs.get("socket_connect_timeout")
    kwargs["socket_connect_timeout"] = timeout if connect is None else min(connect, timeout)
    return pool.connection_class(**kwargs)


def socket_timeout(pool: Any) -> float | None:
    """The socket timeout of ``pool``'s connections in seconds (None: none): the one configured,
    else the connection class's default (5 s from redis-py 8 on, none before)."""
    kwargs = pool.connection_kwargs
    if "socket_timeout" in kwargs:
        value = kwargs["socket_timeout"]
    else:
        value = None
        for cls in pool.connection_class.__mro__:
            parameter = inspect.signature(cls.__init__).parameters.get("socket_timeout")
            if "__init__" in cls.__dict__ and parameter is not None:
                value = parameter.default
                break
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def probe(
    alias: str, pool: Any, config: Sequence[str] = (), timeout: float = PROBE_SECONDS
) -> ServerFacts:
    """What the server of ``pool`` (a server of cache ``alias``) says of itself: INFO, and the
    ``config`` parameters where CONFIG GET answers. Never raises: a server that cannot be asked
    has ``error`` set."""
    address = _address(pool.connection_kwargs)
    try:
        connection = probe_connection(pool, timeout)
    except Exception as exc:  # a pool this module cannot copy: nothing to say
        return ServerFacts(alias, address, error=f"{type(exc).__name__}: {exc}")
    try:
        connection.connect()
        address = _address(vars(connection)) or address  # a Sentinel primary: found as it connects
        connection.send_command("INFO")
        info = parse_info(text_of(connection.read_response()))
        values: dict[str, str] = {}
        for parameter in config:
            with contextlib.suppress(Exception):  # CONFIG disabled or renamed: not known
                connection.send_command("CONFIG", "GET", parameter)
                reply = connection.read_response()
                if isinstance(reply, dict):  # RESP3 answers a map
                    reply = [part for pair in reply.items() for part in pair]
                if isinstance(reply, list) and len(reply) == 2:
                    values[parameter] = text_of(reply[1])
        return ServerFacts(alias, address, info, config=values)
    except Exception as exc:  # not reachable now, or not answering as Redis does
        return ServerFacts(alias, address, error=f"{type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            connection.disconnect()


def _address(fields: dict[str, Any]) -> str:
    """host:port, or the socket path, of a connection's (or pool's connection) fields; "" for
    a Sentinel pool's, whose primary is found as a connection connects."""
    if fields.get("path"):
        return str(fields["path"])
    host = fields.get("host")
    return f"{host}:{fields.get('port', 6379)}" if host else ""


def warn_if_evicting(servers: Sequence[tuple[str, Any]]) -> None:
    """Log the eviction warning for each of ``servers`` (alias, pool) that may evict; what
    cannot be asked is logged at debug level only. Runs in a thread of its own (see
    ``runtime.py``): a process's first lock call does not wait for it."""
    for alias, pool in servers:
        facts = probe(alias, pool)
        if facts.error is not None:
            logger.debug("Could not ask %s about eviction: %s", facts.name, facts.error)
        elif facts.evicts():
            logger.warning("%s %s", eviction_warning(facts), EVICTION_HINT)
        else:
            logger.debug(
                "The Redis server %s of cache %r never evicts keys.", facts.address, facts.alias
            )


def address_of(pool: Any) -> tuple[str, ...]:
    """Which server the connections of ``pool`` reach: its address (or Sentinel service and
    sentinels). Not a database: the databases of one server fail together."""
    service = getattr(pool, "service_name", None)
    kwargs = pool.connection_kwargs
    if service is not None:  # a service is named by its sentinels too
        manager = getattr(pool, "sentinel_manager", None)
        sentinels = sorted(
            "{}:{}".format(*_host_port(sentinel.connection_pool.connection_kwargs))
            for sentinel in getattr(manager, "sentinels", ())
        )
        return ("sentinel", str(service), *sentinels)
    if kwargs.get("path"):
        return ("unix", str(kwargs["path"]))
    return ("tcp", *_host_port(kwargs))


def _host_port(kwargs: dict[str, Any]) -> tuple[str, str]:
    """A connection's host (resolved where it can be) and port."""
    host = str(kwargs.get("host", "localhost"))
    with contextlib.suppress(OSError):  # not resolvable now: compared as written
        host = socket.gethostbyname(host)
    return host, str(kwargs.get("port", 6379))

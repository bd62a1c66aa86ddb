"""The checks of the caches locks use: their backends and options, each quorum member, and
what their servers say of themselves (one probe each, with a half-second timeout)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import ERROR, CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_redis_lock.backends.base import Backend
from django_redis_lock.backends.clients import SHARDING_CLIENTS, SUPPORTED_CACHES, subclass_of
from django_redis_lock.backends.servers import (
    EVICTION_HINT,
    WAIT_MARGIN,
    ServerFacts,
    eviction_warning,
    probe,
    socket_timeout,
)
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.validation import (
    validate_using,
)

_CLUSTER_CACHE = "django_valkey.cluster_cache.cache.ClusterValkeyCache"


def check_caches(options: dict[str, Any]) -> list[CheckMessage]:
    """The cache of REDIS_LOCK['CACHE'], or each of a quorum's, and the quorum itself."""
    cache = options["CACHE"]
    if not isinstance(cache, (list, tuple)):
        return _check_cache(cache)
    why = refusal(validate_using, cache, "REDIS_LOCK['CACHE']")
    if why:
        return [_quorum_error(why)]
    # A quorum sends no WAIT: its members' replicas are not checked (W009 says why).
    errors = [error for alias in cache for error in _check_cache(alias, replicas=False)]
    if any(error.level >= ERROR for error in errors):
        return errors
    for alias in cache:
        if subclass_of(_import(settings.CACHES[alias].get("BACKEND", "")), _CLUSTER_CACHE):
            return [_quorum_error(f"The cache {alias!r} is a Redis Cluster.")]
    from django_redis_lock.runtime import runtime

    try:
        runtime().backend(tuple(cache))
    except ImproperlyConfigured as exc:
        return [*errors, _quorum_error(str(exc))]
    except Exception:  # a member not reachable now: its own check says so
        pass
    if options["WAIT_REPLICAS"]:
        errors.append(
            Warning(
                "REDIS_LOCK['WAIT_REPLICAS'] does not apply to quorum locks: a majority of "
                "independent primaries stands for the replicas' acknowledgement.",
                hint="Set it to 0, or give the quorum's primaries no replicas to wait for.",
                id="django_redis_lock.W009",
            )
        )
    return errors


def _quorum_error(message: str) -> CheckMessage:
    return Error(
        message,
        hint="A quorum lock needs a list of at least three cache aliases, each an independent "
        "Redis primary (its own server, not a cluster), with a Redis cache backend.",
        id="django_redis_lock.E012",
    )


def refusal(rule: Callable[[object, str], object], value: object, what: str) -> str | None:
    """Why the rule refuses ``value`` (the message lock() would raise), or None."""
    try:
        rule(value, what)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _check_cache(alias: object, *, replicas: bool = True) -> list[CheckMessage]:
    if not isinstance(alias, str) or alias not in settings.CACHES:
        return [
            Error(
                f"REDIS_LOCK['CACHE'] is {alias!r}, which is not an alias in CACHES.",
                hint=f"Use one of: {', '.join(sorted(settings.CACHES))}.",
                id="django_redis_lock.E002",
            )
        ]
    config = settings.CACHES[alias]
    backend = _import(config.get("BACKEND", ""))
    if backend is None or not subclass_of(backend, *SUPPORTED_CACHES):
        async_cache = subclass_of(backend, "django_valkey.async_cache.cache.AsyncValkeyCache")
        return [
            Error(
                f"The cache {alias!r} ({config.get('BACKEND')}) is not a cache locks can use.",
                hint="django-valkey's async cache has no sync client; give locks an alias of "
                "django_valkey.cache.ValkeyCache (async locks work on it)."
                if async_cache
                else "Use django-redis, django.core.cache.backends.redis.RedisCache or "
                "django-valkey, for example as a cache alias of its own for locks.",
                id="django_redis_lock.E003",
            )
        ]
    client_path = config.get("OPTIONS", {}).get("CLIENT_CLASS")
    if client_path:
        client = _import(client_path)
        if client is None or subclass_of(client, *SHARDING_CLIENTS):
            return [
                Error(
                    f"The cache {alias!r} uses the client {client_path}, which locks cannot use.",
                    hint="A lock needs all its keys on one server: use the DefaultClient, "
                    "HerdClient or SentinelClient of django-redis or django-valkey.",
                    id="django_redis_lock.E004",
                )
            ]
    if subclass_of(backend, _CLUSTER_CACHE):
        return _check_cluster_timeout(alias, config) + _check_backend(alias, replicas)
    return _check_socket_timeout(alias, config) + _check_backend(alias, replicas)


def _check_cluster_timeout(alias: str, config: dict[str, Any]) -> list[CheckMessage]:
    """django-valkey's cluster cache gives its client only OPTIONS["BASE_CLIENT_KWARGS"]: its
    SOCKET_TIMEOUT option is ignored there."""
    kwargs = config.get("OPTIONS", {}).get("BASE_CLIENT_KWARGS") or {}
    location = config.get("LOCATION")
    in_url = isinstance(location, str) and "socket_timeout=" in urlsplit(location).query
    if in_url or (isinstance(kwargs, dict) and kwargs.get("socket_timeout")):
        return []
    return [
        Warning(
            f"The cluster cache {alias!r} sets no socket timeout for its client: a node that "
            "stops answering makes lock calls, and the watchdog renewing held locks, wait "
            "forever. django-valkey's cluster cache ignores OPTIONS 'SOCKET_TIMEOUT'.",
            hint='Set OPTIONS "BASE_CLIENT_KWARGS": {"socket_timeout": 2, '
            '"socket_connect_timeout": 2} (seconds; what your locks can afford).',
            id="django_redis_lock.W007",
        )
    ]


def _check_socket_timeout(alias: str, config: dict[str, Any]) -> list[CheckMessage]:
    options = config.get("OPTIONS", {})
    if options.get("SOCKET_TIMEOUT") or options.get("socket_timeout"):
        return []
    return [
        Warning(
            f"The cache {alias!r} sets no socket timeout: with redis-py before 8 (or "
            "socket_timeout=None) a Redis that stops answering makes lock calls, and the "
            "watchdog renewing held locks, wait forever; redis-py 8 gives up after 5 s.",
            hint='Set OPTIONS "SOCKET_TIMEOUT" (django-redis, django-valkey) or "socket_timeout" '
            "(Django's RedisCache) to what your locks can afford, for example 1 to 5 seconds.",
            id="django_redis_lock.W003",
        )
    ]


def _check_backend(alias: str, replicas: bool) -> list[CheckMessage]:
    from django_redis_lock.runtime import runtime

    try:
        backend = runtime().backend(alias)
    except LockUnavailable as exc:  # a cluster cache connects as it is made: not reachable now
        return [_unreachable(alias, str(exc))]
    except Exception as exc:  # building the cache failed: say so instead of crashing checks
        return [Error(f"The cache {alias!r} cannot be used: {exc}", id="django_redis_lock.E010")]
    warnings: list[CheckMessage] = []
    if not backend.listable:
        warnings.append(
            Warning(
                f"The KEY_FUNCTION of cache {alias!r} does not keep key text, so held locks "
                "cannot be listed (manage.py locks, the admin).",
                hint="Give locks a cache alias that uses the default KEY_FUNCTION.",
                id="django_redis_lock.W002",
            )
        )
    try:
        backend.check_async()
    except Exception as exc:  # ImproperlyConfigured, or a client this library does not know
        warnings.append(
            Warning(
                f"Async locks on cache {alias!r} (aacquire, async with, async @locked views) "
                f"will fail: {exc}",
                id="django_redis_lock.W004",
            )
        )
    return warnings + _check_servers(backend, replicas)


def _check_servers(backend: Backend, replicas: bool) -> list[CheckMessage]:
    """What the servers that grant the alias's locks say of themselves (one probe each, with
    a short timeout): W008 for one that does not answer, W010 for one that may evict keys,
    and, unless the alias is a quorum's member, the replica checks (W005, W006, W011, W012)."""
    try:
        facts = [probe(name, pool) for name, pool in backend.servers()]
    except Exception as exc:  # a cluster whose nodes cannot be listed now
        return [_unreachable(backend.alias, str(exc))]
    messages = [_unreachable(f.alias, f.error, f.address) for f in facts if f.error is not None]
    messages += [
        Warning(eviction_warning(f), hint=EVICTION_HINT, id="django_redis_lock.W010")
        for f in facts
        if f.evicts()
    ]
    # Replicas are a single primary's (a cluster refuses WAIT_REPLICAS).
    primary = facts[0] if len(facts) == 1 and facts[0].error is None else None
    return messages + (_check_replicas(backend, primary) if replicas else [])


def _unreachable(alias: str, error: str, address: str = "") -> CheckMessage:
    """W008: a server of cache ``alias`` (at ``address``, if known) did not answer at startup."""
    server = f"The Redis server {address} of cache" if address else "The Redis server of cache"
    return Warning(
        f"{server} {alias!r} could not be reached, so the checks that need it were skipped: "
        f"{error}",
        id="django_redis_lock.W008",
    )


def _check_replicas(backend: Backend, primary: ServerFacts | None) -> list[CheckMessage]:
    """W006: Sentinel without WAIT_REPLICAS; with it, W005: more than the primary has connected
    (every acquire fails), W011: fewer (a partition can leave that many with the old primary,
    which then goes on granting); W012: a socket timeout that WAIT_TIMEOUT leaves no margin."""
    if not backend.wait_replicas:
        if not backend.sentinel:
            return []
        return [
            Warning(
                f"The cache {backend.alias!r} uses Sentinel, and REDIS_LOCK['WAIT_REPLICAS'] "
                "is 0: a grant the primary has not passed on to a replica is lost by a "
                "failover, and two clients may then hold the same lock.",
                hint="Set REDIS_LOCK['WAIT_REPLICAS'] to the number of replicas (see "
                "Partitions in the README).",
                id="django_redis_lock.W006",
            )
        ]
    messages = _check_wait_timeout(backend)
    replicas = None if primary is None else primary.connected_replicas
    needed = backend.wait_replicas
    if replicas is not None and replicas < needed:
        messages.append(
            Warning(
                f"REDIS_LOCK['WAIT_REPLICAS'] is {needed}, but the primary of cache "
                f"{backend.alias!r} has {replicas} connected replica(s): every acquire will fail "
                "with LockNotReplicated until enough replicas are connected.",
                id="django_redis_lock.W005",
            )
        )
    elif replicas is not None and replicas > needed:
        messages.append(
            Warning(
                f"REDIS_LOCK['WAIT_REPLICAS'] is {needed}, and the primary of cache "
                f"{backend.alias!r} has {replicas} connected replicas: a network partition that "
                f"leaves {needed} of them on the primary's side lets it go on granting locks "
                "that the replica Sentinel promotes on the other side grants again (two "
                "holders).",
                hint=f"Set REDIS_LOCK['WAIT_REPLICAS'] to {replicas}, the number of replicas: "
                "then no partition lets two primaries grant, at the price of no grants while "
                "a replica is down (see Partitions in the README).",
                id="django_redis_lock.W011",
            )
        )
    return messages


def _check_wait_timeout(backend: Backend) -> list[CheckMessage]:
    """W012: with WAIT_REPLICAS, a socket timeout that does not outlast WAIT_TIMEOUT by
    WAIT_MARGIN: a WAIT that takes its time (a failover, a slow replica) times out the call."""
    wait = backend.wait_timeout_ms / 1000
    timeouts = {socket_timeout(pool) for _, pool in backend.servers()}
    short = [t for t in timeouts if t is not None and t < wait + WAIT_MARGIN]
    if not short:
        return []
    return [
        Warning(
            f"The cache {backend.alias!r} has a socket timeout of {min(short):g} s, and "
            f"REDIS_LOCK['WAIT_TIMEOUT'] is {wait:g} s: a grant whose replicas take that long "
            "to acknowledge (a failover, a slow replica) times out the call, which then fails "
            "with LockUnavailable instead of being acknowledged.",
            hint=f"Set the socket timeout to at least {wait + WAIT_MARGIN:g} s (WAIT_TIMEOUT "
            f"plus {WAIT_MARGIN:g} s), or lower WAIT_TIMEOUT.",
            id="django_redis_lock.W012",
        )
    ]


def _import(path: str) -> Any:
    try:
        return import_string(path)
    except ImportError:
        return None

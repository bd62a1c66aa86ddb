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
    ServerFacts,
    eviction_warning,
    probe,
    socket_timeout,
)
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.ops import rules
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
    """W003 from the settings (the doctor reads the connections' own): one chosen, not a
    client's default."""
    options = config.get("OPTIONS", {})
    if options.get("SOCKET_TIMEOUT") or options.get("socket_timeout"):
        return []
    return [_message(rules.no_socket_timeout(alias))]


def _message(verdict: rules.Verdict) -> CheckMessage:
    """A rule's verdict as a system check message: a Warning whatever its level (at startup a
    server may not be set up yet; the doctor says how bad it is now)."""
    return Warning(verdict.message, hint=verdict.fix or None, id=verdict.id)


def _check_backend(alias: str, replicas: bool) -> list[CheckMessage]:
    from django_redis_lock.runtime import runtime

    try:
        backend = runtime().backend(alias)
    except LockUnavailable as exc:  # a cluster cache connects as it is made: not reachable now
        return [_unreachable(alias, str(exc))]
    except Exception as exc:  # building the cache failed: say so instead of crashing checks
        return [Error(f"The cache {alias!r} cannot be used: {exc}", id="django_redis_lock.E010")]
    listing = rules.listing(alias, listable=backend.listable)
    warnings = [] if listing.level == rules.OK else [_message(listing)]
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
    """The replica rules (``ops/rules.py``: W005, W006, W011) for the primary's connected
    replicas as probed (unknown when it did not answer), and W012 with WAIT_REPLICAS."""
    needed = backend.wait_replicas
    connected = None if primary is None else primary.connected_replicas
    timeouts = {socket_timeout(pool) for _, pool in backend.servers()} if needed else set()
    said = [
        rules.wait_timeout(backend.alias, timeouts, needed, backend.wait_timeout_ms),
        rules.replicas(backend.alias, needed, connected, sentinel=backend.sentinel),
    ]
    return [_message(verdict) for verdict in said if verdict and verdict.level != rules.OK]


def _import(path: str) -> Any:
    try:
        return import_string(path)
    except ImportError:
        return None

"""System checks: a misconfiguration is reported at startup, not as a stack trace later.

:func:`check_settings` (registered when the app is ready) checks REDIS_LOCK's values here, and
the caches locks use in ``caches.py``: their backends, options and what their servers say of
themselves; the models with fences in ``fencing.py``. :data:`CHECKS` lists every id.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from django_redis_lock.checks import fencing  # noqa: F401  (registers its check)
from django_redis_lock.checks.caches import check_caches, refusal
from django_redis_lock.checks.metrics import check_metrics
from django_redis_lock.conf import DEFAULTS, cluster_wake_ups
from django_redis_lock.validation import (
    handover_lease_ms,
    seconds_to_ms,
    validate_flag,
    validate_timeout,
    wait_replicas,
)

#: Every system check of this app, by id (``django_redis_lock.<id>``): what it reports. The
#: documentation's list is made from this.
CHECKS: dict[str, str] = {
    "E001": "REDIS_LOCK is not a dict.",
    "E002": "REDIS_LOCK['CACHE'] names no alias of CACHES.",
    "E003": "The lock cache is not one locks can use: django-redis, Django's RedisCache or "
    "django-valkey (ValkeyCache, ClusterValkeyCache).",
    "E004": "The lock cache's client spreads keys over several servers (a sharding client).",
    "E005": "TIMEOUT or TOMBSTONE_TIMEOUT is not a number of seconds from a millisecond to a "
    'year (TIMEOUT may be "auto").',
    "E006": "AUTO_RENEW, RUN_UNLOCKED_IF_UNAVAILABLE, STATS, METRICS or HASH_TAGS is not True "
    "or False.",
    "E007": "KEY_NAMESPACE is empty, or holds braces or glob characters.",
    "E008": "BUSY_STATUS is not an HTTP error status (400-599).",
    "E009": "HANDOVER_LEASE is not from 0.1 to 3600 seconds.",
    "E010": "The lock cache cannot be built, or WAIT_REPLICAS is set for a cluster cache.",
    "E011": "WAIT_REPLICAS or WAIT_TIMEOUT cannot be used.",
    "E012": "A quorum CACHE that cannot work: fewer than three aliases, one named twice, two on "
    "one server, a cluster, or a cache that is not a Redis one.",
    "E013": "@locked(limit=...) semaphores on REDIS_LOCK['CACHE'] when it is a quorum, which "
    "cannot hold semaphores.",
    "E014": "A model with FencedModelMixin and no FenceField, with several FenceFields, or "
    "with a nullable one.",
    "E015": "METRICS_REGISTRY names no prometheus_client CollectorRegistry, METRICS_OTHER "
    "is not a non-empty str, or METRICS_MAX_LABELS is not a whole number from 1.",
    "E016": "A @locked or @unique decorated before the settings were loaded names a cache alias "
    "that is not in CACHES (one decorated after is refused as it decorates).",
    "E017": "@locked(rate=...) rate limits on REDIS_LOCK['CACHE'] when it is a quorum, which "
    "cannot hold rate limits.",
    "E018": 'CLUSTER_WAKE_UPS is not "auto" or "classic".',
    "E019": "@cached_once functions fill the value on REDIS_LOCK['CACHE'] when it is a quorum, "
    "where a value cannot be cached once.",
    "W001": "REDIS_LOCK has a key this app does not know (a misspelling?).",
    "W002": "The lock cache's KEY_FUNCTION hides key text: held locks cannot be listed.",
    "W003": "The lock cache sets no socket timeout.",
    "W004": "Async locks cannot use the lock cache's connection options.",
    "W005": "WAIT_REPLICAS asks for more replicas than the primary has connected.",
    "W006": "WAIT_REPLICAS is 0 where a failover can promote a replica: a Sentinel lock "
    "cache, or a primary with connected replicas.",
    "W007": "A cluster lock cache sets no socket timeout (in BASE_CLIENT_KWARGS or its URL).",
    "W008": "A server of the lock cache could not be reached at startup: the checks that need "
    "it were skipped.",
    "W009": "WAIT_REPLICAS with a quorum, where it does not apply.",
    "W010": "A server of the lock cache may evict keys: maxmemory with a policy other than "
    "noeviction.",
    "W011": "WAIT_REPLICAS is below the replicas the primary has connected: a partition can "
    "leave enough of them with the old primary for it to go on granting.",
    "W012": "The lock cache's socket timeout outlasts WAIT_TIMEOUT by less than half a second.",
    "W013": "A model with a FenceField but without FencedModelMixin: its plain save() writes "
    "the fence back.",
}


@register(Tags.caches)
def check_settings(**kwargs: Any) -> list[CheckMessage]:
    """Check REDIS_LOCK and the cache it points at (without connecting to Redis)."""
    configured = getattr(settings, "REDIS_LOCK", None)
    if configured is None:
        configured = {}
    if not isinstance(configured, dict):
        return [
            Error(
                "REDIS_LOCK must be a dict.",
                hint='For example REDIS_LOCK = {"CACHE": "default", "TIMEOUT": 30}.',
                id="django_redis_lock.E001",
            )
        ]
    options = {**DEFAULTS, **configured}
    errors: list[CheckMessage] = [
        Warning(
            f"REDIS_LOCK has an unknown key {key!r}.",
            hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
            id="django_redis_lock.W001",
        )
        for key in sorted(set(configured) - set(DEFAULTS))
    ]
    errors += _check_values(options)
    errors += _check_on_one_primary(options)
    errors += check_metrics(options)
    replication = _check_replication(options)
    # A backend cannot be built with unusable WAIT settings: their error says it all.
    errors += replication or check_caches(options)
    return errors


def _check_on_one_primary(options: dict[str, Any]) -> list[CheckMessage]:
    """E013, E017, E019: semaphores (@locked with a limit), rate limits (@locked with a rate)
    or @cached_once functions on the default cache, which is a quorum."""
    from django_redis_lock.cached.decorator import DECLARED
    from django_redis_lock.locked import RATE_LIMITS, SEMAPHORES

    if not isinstance(options["CACHE"], (list, tuple)):
        return []
    found = (
        (
            "django_redis_lock.E013",
            SEMAPHORES,
            "limit=N",
            "semaphore(s)",
            "semaphores and read/write locks",
        ),
        ("django_redis_lock.E017", RATE_LIMITS, 'rate="10/s"', "rate limit(s)", "rate limits"),
    )
    errors: list[CheckMessage] = [
        Error(
            f"{declared.count(None)} @locked({option.partition('=')[0]}=...) {what} use "
            f"REDIS_LOCK['CACHE'], a quorum: {kinds} cannot be quorum locks.",
            hint=f"Give them a cache alias of one primary: @locked(..., {option}, using=<alias>).",
            id=check,
        )
        for check, declared, option, what, kinds in found
        if None in declared
    ]
    if None in DECLARED:
        errors.append(
            Error(
                f"{DECLARED.count(None)} @cached_once function(s) use REDIS_LOCK['CACHE'], a "
                "quorum: a value lives in one cache, and its fill cannot be a quorum lock.",
                hint="Give them a cache alias of one primary: @cached_once(..., using=<alias>).",
                id="django_redis_lock.E019",
            )
        )
    return errors


def _check_replication(options: dict[str, Any]) -> list[CheckMessage]:
    why = refusal(lambda value, what: wait_replicas(value), options["WAIT_REPLICAS"], "")
    why = why or refusal(seconds_to_ms, options["WAIT_TIMEOUT"], "REDIS_LOCK['WAIT_TIMEOUT']")
    if not why:
        return []
    hint = "WAIT_REPLICAS replicas must acknowledge a grant within WAIT_TIMEOUT seconds."
    return [Error(why, hint=hint, id="django_redis_lock.E011")]


def _check_values(options: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key, rule in (("TIMEOUT", validate_timeout), ("TOMBSTONE_TIMEOUT", seconds_to_ms)):
        why = refusal(rule, options[key], f"REDIS_LOCK[{key!r}]")
        if why:
            errors.append(
                Error(
                    why,
                    hint="Locks never live forever: a crashed holder must not block for good.",
                    id="django_redis_lock.E005",
                )
            )
    why = refusal(lambda value, what: handover_lease_ms(value), options["HANDOVER_LEASE"], "")
    if why:
        errors.append(
            Error(
                why,
                hint="It bounds how long a waiter that died while queued holds up the next.",
                id="django_redis_lock.E009",
            )
        )
    # METRICS: checks/metrics.py, by the rule the locks read it with at run time.
    for key in ("AUTO_RENEW", "RUN_UNLOCKED_IF_UNAVAILABLE", "STATS", "HASH_TAGS"):
        why = refusal(validate_flag, options[key], f"REDIS_LOCK[{key!r}]")
        if why:
            errors.append(Error(why, id="django_redis_lock.E006"))
    why = refusal(lambda value, what: cluster_wake_ups(value), options["CLUSTER_WAKE_UPS"], "")
    if why:
        hint = (
            '"auto": sharded pub/sub where every primary of a cluster has it, "classic": '
            'classic PUBLISH always. Until it is fixed, cluster caches use "auto".'
        )
        errors.append(Error(why, hint=hint, id="django_redis_lock.E018"))
    status = options["BUSY_STATUS"]
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        errors.append(
            Error(
                f"REDIS_LOCK['BUSY_STATUS'] must be an HTTP error status (400-599), "
                f"not {status!r}.",
                hint="423 Locked is the default; 409 Conflict and 429 are common choices.",
                id="django_redis_lock.E008",
            )
        )
    namespace = options["KEY_NAMESPACE"]
    if not isinstance(namespace, str) or not namespace or set(namespace) & set("{}*?[]\\"):
        errors.append(
            Error(
                f"REDIS_LOCK['KEY_NAMESPACE'] must be a non-empty str without braces or glob "
                f"characters, not {namespace!r}.",
                hint="Braces would change the Redis Cluster hash tag of lock keys.",
                id="django_redis_lock.E007",
            )
        )
    return errors

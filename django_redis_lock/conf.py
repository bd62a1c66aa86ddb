"""Settings of django_redis_lock, read from ``settings.REDIS_LOCK`` at access time."""

from __future__ import annotations

import logging
from typing import Any, Generic, TypeVar

from django.conf import settings

from django_redis_lock.validation import (
    handover_lease_ms,
    seconds_to_ms,
    validate_flag,
    validate_timeout,
    wait_replicas,
)

T = TypeVar("T")

logger = logging.getLogger("django_redis_lock")

#: Every key REDIS_LOCK understands, with its default.
DEFAULTS: dict[str, Any] = {
    "CACHE": "default",
    "TIMEOUT": 30.0,
    "AUTO_RENEW": True,
    "KEY_NAMESPACE": "lock",
    "TOMBSTONE_TIMEOUT": 60.0,
    "HANDOVER_LEASE": 5.0,
    "WAIT_REPLICAS": 0,
    "WAIT_TIMEOUT": 1.0,
    "BUSY_STATUS": 423,
    "RUN_UNLOCKED_IF_UNAVAILABLE": False,
    "STATS": True,
    "METRICS": True,
    "METRICS_REGISTRY": None,
    "METRICS_OTHER": "other",
    "METRICS_MAX_LABELS": 1000,
    "CLUSTER_WAKE_UPS": "auto",
    "HASH_TAGS": False,
}


def metrics_flag(value: object) -> bool:
    """REDIS_LOCK["METRICS"] as both the system check (E006) and the locks read it: True or
    False; anything else (``0``, ``"false"``, ``None``, ``"yes"``) a TypeError naming the
    setting, which at run time turns metrics off (:attr:`LockSettings.metrics`)."""
    return validate_flag(value, "REDIS_LOCK['METRICS']")


def metrics_max_labels(value: object) -> int:
    """REDIS_LOCK["METRICS_MAX_LABELS"] as both the system check (E015) and the locks read
    it: a whole number from 1; anything else a TypeError or ValueError naming the setting,
    for which the locks use the default (:attr:`LockSettings.max_labels`)."""
    what = "REDIS_LOCK['METRICS_MAX_LABELS']"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a whole number of labels, not {value!r}.")
    if value < 1:
        raise ValueError(f"{what} must be at least 1, not {value}.")
    return value


#: The values of REDIS_LOCK["CLUSTER_WAKE_UPS"].
WAKE_UPS = ("auto", "classic")


def cluster_wake_ups(value: object) -> str:
    """REDIS_LOCK["CLUSTER_WAKE_UPS"] as both the system check (E018) and cluster caches read
    it: "auto" or "classic"; anything else a ValueError naming the setting and the value, for
    which "auto" applies (:attr:`LockSettings.wake_ups`)."""
    if not isinstance(value, str) or value not in WAKE_UPS:
        raise ValueError(
            f'REDIS_LOCK[\'CLUSTER_WAKE_UPS\'] must be "auto" or "classic", not {value!r}.'
        )
    return value


class _Setting(Generic[T]):
    """A key of REDIS_LOCK, read at access time, typed for its readers."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    def __get__(self, settings: LockSettings, owner: type | None = None) -> T:
        return settings.get(self.key)  # type: ignore[no-any-return]


class LockSettings:
    """Access to ``settings.REDIS_LOCK``, read again whenever the setting changes
    (``runtime`` calls :meth:`forget` on ``setting_changed``: override_settings, pytest-django's
    ``settings``).

    Values come back as configured: the lock validates them where they are used (with an
    error naming the setting), and the system checks report them at startup.
    """

    # What was read of the setting, and the checked values derived from it (None: not yet).
    _configured: dict[str, Any] | None
    _tombstone_ms: int | None
    _handover_lease_ms: int | None
    _timeout_ms: int | None
    _auto_renew: bool | None
    _stats: str | None
    _metrics: bool | None
    _max_labels: int | None
    _wake_ups: str | None

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Read ``settings.REDIS_LOCK`` again on next use."""
        self._configured = None
        self._tombstone_ms = None
        self._handover_lease_ms = None
        self._timeout_ms = None
        self._auto_renew = None
        self._stats = None
        self._metrics = None
        self._max_labels = None
        self._wake_ups = None

    def get(self, key: str) -> Any:
        """The configured value of ``key``, else its default."""
        configured = self._configured
        if configured is None:
            found = getattr(settings, "REDIS_LOCK", None) or {}
            # Not a dict: the defaults apply, and the system check reports the bad type.
            configured = self._configured = found if isinstance(found, dict) else {}
        return configured.get(key, DEFAULTS[key])

    # Each key's documentation is the settings reference of the docs (docs/_ext/lockdocs.py).

    #: ``str``, or a list of aliases. The cache alias whose Redis holds the locks. It must be a
    #: django-redis cache (default, herd or Sentinel client; not ``ShardClient``), Django's
    #: built-in Redis cache, or a django-valkey cache: ``ValkeyCache`` (default, herd or Sentinel
    #: client) or ``ClusterValkeyCache`` (not its async cache, which has no sync client). Keys go
    #: through that cache's key function, so its ``KEY_PREFIX`` and ``VERSION`` apply; two
    #: aliases with the same server, prefix and version guard the same locks.
    #:
    #: A list of three or more aliases, each an independent Redis primary, makes every lock a
    #: quorum lock (see :ref:`quorum`); ``lock(..., using=[...])`` and ``@locked(...,
    #: using=[...])`` take such a list for one lock, and ``manage.py locks --using a,b,c`` for
    #: the command.
    CACHE = _Setting["str | list[str] | tuple[str, ...]"]()
    #: ``float`` seconds, or ``"auto"``. The lease of a lock created without ``timeout``: from
    #: 0.001 to ``MAX_TIMEOUT`` (one year). ``"auto"``: the timeout each lock's statistics
    #: suggest, 30 s until they know enough (see :ref:`statistics`).
    TIMEOUT = _Setting["float | str"]()
    #: ``bool``. Whether locks created without ``auto_renew`` are kept alive by the watchdog
    #: while held.
    AUTO_RENEW = _Setting[bool]()
    #: ``str``. The key segment after the cache's prefix that marks lock keys:
    #: ``<prefix>:<version>:lock:{<hash tag>}:l:<name>``. Not empty, without braces or glob
    #: characters.
    KEY_NAMESPACE = _Setting[str]()
    #: ``float`` seconds. How long a released lock keeps its last fencing token (after that the
    #: server's clock carries the tokens on).
    TOMBSTONE_TIMEOUT = _Setting[float]()
    #: ``float`` seconds, from 0.1 to 3600. The lease a lock handed to a waiter starts with,
    #: until the new holder's watchdog lengthens it to the lock's timeout (at a third of it):
    #: how long a waiter that died while queued can hold up the next one. Waiters behind the
    #: first look again every four fifths of it. It is built into the scripts, so every process
    #: that shares a lock should use the same value.
    HANDOVER_LEASE = _Setting[float]()
    #: ``int``, from 0 to 100. With ``n > 0`` no client learns that it holds a lock before
    #: ``n`` replicas acknowledged the grant: ``acquire()`` returning, a ``with`` block being
    #: entered, a waiter being handed the lock. Every write a holder relies on (the acquire, a
    #: hand-over, ``extend()``, the watchdog's renewals) is followed by Redis's ``WAIT n`` in
    #: the same pipeline, so the uncontended path costs no extra round trip (a handed-over lock
    #: costs its new holder one, to confirm the grant). When fewer replicas acknowledge within
    #: ``WAIT_TIMEOUT``, ``acquire()`` gives the hold back and raises ``LockNotReplicated`` (a
    #: ``LockUnavailable``) with ``acknowledged`` and ``needed``; ``extend()`` raises it with
    #: the lease lengthened on the primary only; the watchdog retries a renewal until the lease
    #: ends. Use it with Sentinel (see :ref:`sentinel` and :ref:`partitions`); with ``0`` a
    #: failover can lose a grant and let two clients hold one lock. Refused for a cluster.
    WAIT_REPLICAS = _Setting[int]()
    #: ``float`` seconds. How long a grant waits for ``WAIT_REPLICAS`` replicas. Keep the lock
    #: cache's socket timeout at least half a second above it (``W012``).
    WAIT_TIMEOUT = _Setting[float]()
    #: ``int``, from 400 to 599. The HTTP status a ``@locked`` view answers while its lock is
    #: busy (409 and 429 are common alternatives to 423 Locked).
    BUSY_STATUS = _Setting[int]()
    #: ``bool``. When Redis cannot be reached, ``@locked`` views answer 503. With ``True`` they
    #: run **without the lock** instead (and log a warning). This is unsafe: use it only for
    #: efficiency locks, where running twice is acceptable and being down is not.
    RUN_UNLOCKED_IF_UNAVAILABLE = _Setting[bool]()
    #: ``bool``. Whether releases record hold and wait times, and acquires busy answers, into
    #: each lock's statistics (see :ref:`statistics`).
    STATS = _Setting[bool]()
    #: ``bool``. Whether locks report metrics: to Prometheus when ``prometheus_client`` is
    #: installed, to OpenTelemetry when ``opentelemetry-api`` is (see :doc:`/metrics`).
    #: ``False`` turns both off; with neither installed there is nothing to turn off. Any
    #: other value (``0``, ``"false"``, ``None``, ``"yes"``) is an error of the system check
    #: (``E006``), and turns metrics off in a process that never ran the checks, with an
    #: error logged.
    METRICS = _Setting[bool]()
    #: ``str`` or ``None``. The dotted path of the ``prometheus_client.CollectorRegistry``
    #: the metrics are registered on; ``None``: ``prometheus_client``'s default registry, the
    #: one django-prometheus's ``/metrics`` view and ``start_http_server`` serve.
    METRICS_REGISTRY = _Setting["str | None"]()
    #: ``str``. The ``lock`` label of locks without a name template (a ``lock()`` without
    #: ``template=``, an ``@locked`` whose name is a callable): their names are not labels, so
    #: that the metrics' cardinality stays bounded.
    METRICS_OTHER = _Setting[str]()
    #: ``int``, from 1. The most distinct ``lock`` labels a process gives its metrics (a
    #: template formatted before it reaches ``template=`` would make a series per lock name):
    #: the locks of any template past them are labelled ``METRICS_OTHER``, and a warning is
    #: logged the first time. Another value is an error of the system check (``E015``), and
    #: the default applies, with an error logged.
    METRICS_MAX_LABELS = _Setting[int]()
    #: ``"auto"`` or ``"classic"``. How waiters on a Redis Cluster are woken. ``"auto"``:
    #: with sharded pub/sub where every primary has it (Redis 7+, Valkey), so that a hand-over's
    #: message stays on the lock's shard, else with classic ``PUBLISH``, which the cluster bus
    #: carries to every node. ``"classic"``: always classic, while processes of an older
    #: django_redis_lock share the cluster (their releases wake waiters classically only).
    #: Another value is an error of the system check (``E018``); ``"auto"`` applies.
    #: Only cluster caches read it; ``manage.py locks doctor`` says which way a cache wakes.
    CLUSTER_WAKE_UPS = _Setting[str]()
    #: ``bool``. Whether a lock name's own Redis hash tag (the text between its first ``{``
    #: and the next ``}``) places its keys: names with one tag (``"order:{42}:stock"``,
    #: ``"order:{42}:invoice"``) then share a Redis Cluster slot, and ``lock_many`` takes them
    #: in one script. ``False`` (the default): each name's keys have a slot of their own.
    #: Turning it on moves the keys of names with braces: change it with every process of
    #: the project stopped, as ``KEY_NAMESPACE``. Another value is an error of the system
    #: check (``E006``).
    HASH_TAGS = _Setting[bool]()

    @property
    def tombstone_ms(self) -> int:
        """TOMBSTONE_TIMEOUT in milliseconds, checked once (a ValueError naming the setting)."""
        if self._tombstone_ms is None:
            value = self.TOMBSTONE_TIMEOUT
            self._tombstone_ms = seconds_to_ms(value, "REDIS_LOCK['TOMBSTONE_TIMEOUT']")
        return self._tombstone_ms

    @property
    def handover_lease_ms(self) -> int:
        """HANDOVER_LEASE in milliseconds, checked once (a ValueError naming the setting)."""
        if self._handover_lease_ms is None:
            self._handover_lease_ms = handover_lease_ms(self.HANDOVER_LEASE)
        return self._handover_lease_ms

    @property
    def timeout_ms(self) -> int:
        """TIMEOUT in milliseconds, checked once (a ValueError naming the setting); for
        "auto", the default TIMEOUT, which locks use until their statistics suggest one."""
        if self._timeout_ms is None:
            ms = validate_timeout(self.TIMEOUT, "REDIS_LOCK['TIMEOUT']")
            self._timeout_ms = seconds_to_ms(DEFAULTS["TIMEOUT"], "") if ms is None else ms
        return self._timeout_ms

    @property
    def auto_timeout(self) -> bool:
        """Whether TIMEOUT is "auto"."""
        return validate_timeout(self.TIMEOUT, "REDIS_LOCK['TIMEOUT']") is None

    @property
    def auto_renew(self) -> bool:
        """AUTO_RENEW, checked once (a TypeError naming the setting)."""
        if self._auto_renew is None:
            self._auto_renew = validate_flag(self.AUTO_RENEW, "REDIS_LOCK['AUTO_RENEW']")
        return self._auto_renew

    @property
    def stats(self) -> str:
        """STATS as the scripts take it ("1": record, "": do not), checked once (a TypeError
        naming the setting)."""
        if self._stats is None:
            self._stats = "1" if validate_flag(self.STATS, "REDIS_LOCK['STATS']") else ""
        return self._stats

    @property
    def hash_tags(self) -> bool:
        """HASH_TAGS; a value that is not True or False is an error of the system check
        (E006), and here False, with an error logged: the keys stay where they were."""
        try:
            return validate_flag(self.HASH_TAGS, "REDIS_LOCK['HASH_TAGS']")
        except TypeError as exc:
            logger.error("%s Lock names' hash tags are not used.", exc)
            return False

    @property
    def metrics(self) -> bool:
        """METRICS, read once by :func:`metrics_flag`: a value it refuses turns metrics off
        (an error logged), as a value that means to turn them off would; a process that
        never ran the system checks exports nothing the checks would refuse."""
        if self._metrics is None:
            try:
                self._metrics = metrics_flag(self.METRICS)
            except TypeError as exc:
                logger.error("%s Lock metrics are off.", exc)
                self._metrics = False
        return self._metrics

    @property
    def max_labels(self) -> int:
        """METRICS_MAX_LABELS, read once by :func:`metrics_max_labels`: for a value it
        refuses, the default (an error logged)."""
        if self._max_labels is None:
            try:
                self._max_labels = metrics_max_labels(self.METRICS_MAX_LABELS)
            except (TypeError, ValueError) as exc:
                self._max_labels = int(DEFAULTS["METRICS_MAX_LABELS"])
                logger.error("%s Lock metrics use %d.", exc, self._max_labels)
        return self._max_labels

    @property
    def wake_ups(self) -> str:
        """CLUSTER_WAKE_UPS, read once by :func:`cluster_wake_ups`: for a value it refuses,
        "auto" (an error logged)."""
        if self._wake_ups is None:
            try:
                self._wake_ups = cluster_wake_ups(self.CLUSTER_WAKE_UPS)
            except ValueError as exc:
                self._wake_ups = str(DEFAULTS["CLUSTER_WAKE_UPS"])
                logger.error("%s Cluster caches wake waiters as with %r.", exc, self._wake_ups)
        return self._wake_ups

    def replication(self) -> tuple[int, int]:
        """WAIT_REPLICAS, and WAIT_TIMEOUT in milliseconds, checked (errors name the setting)."""
        needed = wait_replicas(self.WAIT_REPLICAS)
        return needed, seconds_to_ms(self.WAIT_TIMEOUT, "REDIS_LOCK['WAIT_TIMEOUT']")


lock_settings = LockSettings()

"""Settings of django_redis_lock, read from ``settings.REDIS_LOCK`` at access time."""

from __future__ import annotations

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
}


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

    def get(self, key: str) -> Any:
        """The configured value of ``key``, else its default."""
        configured = self._configured
        if configured is None:
            found = getattr(settings, "REDIS_LOCK", None) or {}
            # Not a dict: the defaults apply, and the system check reports the bad type.
            configured = self._configured = found if isinstance(found, dict) else {}
        return configured.get(key, DEFAULTS[key])

    #: The cache alias whose Redis holds the locks.
    CACHE = _Setting["str | list[str] | tuple[str, ...]"]()
    #: The default lock TTL in seconds.
    TIMEOUT = _Setting["float | str"]()
    #: Whether locks are kept alive by the watchdog unless told otherwise.
    AUTO_RENEW = _Setting[bool]()
    #: The segment after the cache's own key prefix that marks lock keys.
    KEY_NAMESPACE = _Setting[str]()
    #: Seconds a released lock keeps its last fencing token.
    TOMBSTONE_TIMEOUT = _Setting[float]()
    #: The lease, in seconds, a lock handed to a waiter starts with.
    HANDOVER_LEASE = _Setting[float]()
    #: How many replicas must acknowledge a grant before its holder learns of it (0: none).
    WAIT_REPLICAS = _Setting[int]()
    #: How long, in seconds, a grant waits for those acknowledgements.
    WAIT_TIMEOUT = _Setting[float]()
    #: The HTTP status a @locked view answers while its lock is busy.
    BUSY_STATUS = _Setting[int]()
    #: Whether a @locked view runs without its lock when Redis is down (unsafe).
    RUN_UNLOCKED_IF_UNAVAILABLE = _Setting[bool]()
    #: Whether releases record hold and wait times, and acquires busy answers (see stats.py).
    STATS = _Setting[bool]()

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

    def replication(self) -> tuple[int, int]:
        """WAIT_REPLICAS, and WAIT_TIMEOUT in milliseconds, checked (errors name the setting)."""
        needed = wait_replicas(self.WAIT_REPLICAS)
        return needed, seconds_to_ms(self.WAIT_TIMEOUT, "REDIS_LOCK['WAIT_TIMEOUT']")


lock_settings = LockSettings()

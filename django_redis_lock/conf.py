"""Settings of django_redis_lock, read from ``settings.REDIS_LOCK`` at access time."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from django_redis_lock.validation import seconds_to_ms

#: Every key REDIS_LOCK understands, with its default.
DEFAULTS: dict[str, Any] = {
    "CACHE": "default",
    "TIMEOUT": 30.0,
    "AUTO_RENEW": True,
    "KEY_NAMESPACE": "lock",
    "TOMBSTONE_TIMEOUT": 60.0,
    "BUSY_STATUS": 423,
    "RUN_UNLOCKED_IF_UNAVAILABLE": False,
}


class LockSettings:
    """Access to ``settings.REDIS_LOCK``, read again whenever the setting changes
    (``runtime`` calls :meth:`forget` on ``setting_changed``: override_settings, pytest-django's
    ``settings``).

    Values come back as configured: the lock validates them where they are used (with an
    error naming the setting), and the system checks report them at startup.
    """

    def __init__(self) -> None:
        self._configured: dict[str, Any] | None = None
        self._tombstone_ms: int | None = None

    def forget(self) -> None:
        """Read ``settings.REDIS_LOCK`` again on next use."""
        self._configured = None
        self._tombstone_ms = None

    def _get(self, key: str) -> Any:
        configured = self._configured
        if configured is None:
            found = getattr(settings, "REDIS_LOCK", None) or {}
            # Not a dict: the defaults apply, and the system check reports the bad type.
            configured = self._configured = found if isinstance(found, dict) else {}
        return configured.get(key, DEFAULTS[key])

    @property
    def CACHE(self) -> str:
        """The cache alias whose Redis holds the locks."""
        return self._get("CACHE")  # type: ignore[no-any-return]

    @property
    def TIMEOUT(self) -> float:
        """The default lock TTL in seconds."""
        return self._get("TIMEOUT")  # type: ignore[no-any-return]

    @property
    def AUTO_RENEW(self) -> bool:
        """Whether locks are kept alive by the watchdog unless told otherwise."""
        return self._get("AUTO_RENEW")  # type: ignore[no-any-return]

    @property
    def KEY_NAMESPACE(self) -> str:
        """The segment after the cache's own key prefix that marks lock keys."""
        return self._get("KEY_NAMESPACE")  # type: ignore[no-any-return]

    @property
    def TOMBSTONE_TIMEOUT(self) -> float:
        """Seconds a released lock keeps its last fencing token."""
        return self._get("TOMBSTONE_TIMEOUT")  # type: ignore[no-any-return]

    @property
    def tombstone_ms(self) -> int:
        """TOMBSTONE_TIMEOUT in milliseconds, checked once (a ValueError naming the setting)."""
        if self._tombstone_ms is None:
            value = self.TOMBSTONE_TIMEOUT
            self._tombstone_ms = seconds_to_ms(value, "REDIS_LOCK['TOMBSTONE_TIMEOUT']")
        return self._tombstone_ms

    @property
    def BUSY_STATUS(self) -> int:
        """The HTTP status a @locked view answers while its lock is busy."""
        return self._get("BUSY_STATUS")  # type: ignore[no-any-return]

    @property
    def RUN_UNLOCKED_IF_UNAVAILABLE(self) -> bool:
        """Whether a @locked view runs without its lock when Redis is down (unsafe)."""
        return self._get("RUN_UNLOCKED_IF_UNAVAILABLE")  # type: ignore[no-any-return]


lock_settings = LockSettings()

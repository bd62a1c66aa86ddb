"""Settings of django_redis_lock, read from ``settings.REDIS_LOCK`` at access time."""

from __future__ import annotations

from typing import Any

from django.conf import settings

#: Every key REDIS_LOCK understands, with its default.
DEFAULTS: dict[str, Any] = {
    "CACHE": "default",
    "TIMEOUT": 30.0,
    "AUTO_RENEW": True,
    "KEY_NAMESPACE": "lock",
    "TOMBSTONE_TIMEOUT": 60.0,
}


class LockSettings:
    """Typed access to ``settings.REDIS_LOCK``; nothing is cached, so override_settings works."""

    def _get(self, key: str) -> Any:
        configured = getattr(settings, "REDIS_LOCK", None) or {}
        if not isinstance(configured, dict):
            return DEFAULTS[key]  # the system check reports the bad type
        return configured.get(key, DEFAULTS[key])

    @property
    def CACHE(self) -> str:
        """The cache alias whose Redis holds the locks."""
        return str(self._get("CACHE"))

    @property
    def TIMEOUT(self) -> float:
        """The default lock TTL in seconds."""
        return float(self._get("TIMEOUT"))

    @property
    def AUTO_RENEW(self) -> bool:
        """Whether locks are kept alive by the watchdog unless told otherwise."""
        return bool(self._get("AUTO_RENEW"))

    @property
    def KEY_NAMESPACE(self) -> str:
        """The segment after the cache's own key prefix that marks lock keys."""
        return str(self._get("KEY_NAMESPACE"))

    @property
    def TOMBSTONE_TIMEOUT(self) -> float:
        """Seconds a released lock keeps its last fencing token."""
        return float(self._get("TOMBSTONE_TIMEOUT"))


lock_settings = LockSettings()

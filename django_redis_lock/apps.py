"""Django application configuration for django_redis_lock."""

from __future__ import annotations

from django.apps import AppConfig


class DjangoRedisLockConfig(AppConfig):
    """Registers the system checks of django_redis_lock."""

    name = "django_redis_lock"
    verbose_name = "Redis locks"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from django_redis_lock import checks  # noqa: F401  (registers the checks)

"""The placeholder model that gives the admin page and its permissions a home.

Locks live in Redis, not in the database: this model is unmanaged (no table is created) and
only makes ``migrate`` create the permissions ``django_redis_lock.view_lock`` (see the held
locks) and ``django_redis_lock.delete_lock`` (release them).
"""

from __future__ import annotations

from django.db import models

from django_redis_lock.validation import MAX_NAME_LENGTH


class Lock(models.Model):
    """A held lock, as the admin shows it (never stored in the database)."""

    name = models.CharField(max_length=MAX_NAME_LENGTH, primary_key=True)

    class Meta:
        managed = False
        default_permissions = ("view", "delete")
        verbose_name = "lock"
        verbose_name_plural = "locks"

    def __str__(self) -> str:
        return self.name

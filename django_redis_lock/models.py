"""The placeholder model that gives the admin page and its permissions a home.

Locks live in Redis, not in the database: the model is unmanaged (no table is created) and
only makes ``migrate`` create the permissions ``django_redis_lock.view_lock`` (see the held
locks) and ``django_redis_lock.delete_lock`` (release them).
"""

from __future__ import annotations

from typing import Any, cast

from django.db import models
from django.db.models.base import ModelBase

from django_redis_lock.validation import MAX_NAME_LENGTH


class _DjangoNamed(ModelBase):
    """Makes a model whose Django name is the class keyword ``django_name``, not the class's
    own name (which stays its ``__qualname__``, as Python finds it)."""

    def __new__(
        mcs,
        name: str,
        bases: tuple[type, ...],
        attrs: dict[str, Any],
        django_name: str,
        **kwargs: Any,
    ) -> _DjangoNamed:
        cls = cast(_DjangoNamed, super().__new__(mcs, django_name, bases, attrs, **kwargs))
        # Django has read the model name from the name it was given; Python keeps the class's
        # own, so that `django_redis_lock.models.<__name__>` exists (Django 5.2's shell imports
        # every model by it).
        cls.__name__ = name
        return cls


class HeldLock(models.Model, metaclass=_DjangoNamed, django_name="Lock"):
    """A held lock, as the admin shows it (never stored in the database).

    The class is named apart from the core :class:`django_redis_lock.Lock`, while its Django
    model name stays ``Lock``. Django derives from the model name the admin URL
    (``/admin/django_redis_lock/lock/``, URL names ``admin:django_redis_lock_lock_...``), the
    content type (``django_redis_lock.lock``) and the default permission codenames
    (``view_lock``, ``delete_lock``): all fixed, and held by existing databases, fixtures and
    data migrations (a permission's natural key names its content type). So nothing changes
    for them and no migration is needed. Renaming the Django model instead (RenameModel with
    explicit ``Meta.permissions``) would keep the codenames, but rename the content type, and
    move the admin URL to ``/heldlock/``: the admin site builds a model's URLs from its model
    name, which a ModelAdmin cannot change.
    """

    name = models.CharField(max_length=MAX_NAME_LENGTH, primary_key=True)

    class Meta:
        managed = False
        default_permissions = ("view", "delete")
        verbose_name = "lock"
        verbose_name_plural = "locks"

    def __str__(self) -> str:
        return self.name

"""The demo's one model: an account written under a lock, fenced by its token (docs/examples)."""

from __future__ import annotations

from django.db import models

from django_redis_lock import FencedModelMixin, FencedQuerySet, FenceField


class AccountQuerySet(FencedQuerySet["Account"]):
    """Account.objects: a QuerySet with fenced_update()."""


class Account(FencedModelMixin, models.Model):
    balance = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    # The fencing token of the last write this row accepted.
    fence = FenceField()

    objects = AccountQuerySet.as_manager()

    def __str__(self) -> str:
        return f"account {self.pk}"

"""The counter the workers protect, as the ORM sees the store's ``counter`` table (created by
``faults/store.py``, so not managed here): a value and its fence, the last token accepted."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from django_redis_lock import FencedModelMixin, FenceField


class Counter(FencedModelMixin, models.Model):
    name = models.TextField(primary_key=True)
    value = models.IntegerField()
    token = FenceField()

    objects: ClassVar[models.Manager[Counter]] = models.Manager()

    class Meta:
        managed = False
        db_table = "counter"

    def __str__(self) -> str:
        return f"counter {self.name}: {self.value} (token {self.token})"
